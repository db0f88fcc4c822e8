/*
 * rng.c - xoshiro256** seeded through splitmix64: small, fast and the same
 * on every platform, so that a training run or a plan is reproducible from
 * its seed.  Each thread owns one generator, seeded from (seed, stream).
 */
#define AR_INTERNAL 1
#include "config.h"

#include <math.h>

#include "arachne_private.h"

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void policy_rng_seed(struct policy_rng *r, uint64_t seed, uint64_t stream)
{
	uint64_t x = seed ^ (stream * 0xd1342543de82ef95ULL);

	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t policy_rng_next(struct policy_rng *r)
{
	uint64_t *s = r->s;
	uint64_t result = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return result;
}

double policy_rng_uniform(struct policy_rng *r)
{
	return (double)(policy_rng_next(r) >> 11) * 0x1.0p-53;
}

int policy_rng_below(struct policy_rng *r, int n)
{
	return n <= 1 ? 0 : (int)(policy_rng_uniform(r) * n);
}

/* Box-Muller; one of the pair is dropped, which keeps the state simple. */
float policy_rng_normal(struct policy_rng *r)
{
	double u1 = policy_rng_uniform(r), u2 = policy_rng_uniform(r);

	if (u1 < 1e-300)
		u1 = 1e-300;
	return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}
