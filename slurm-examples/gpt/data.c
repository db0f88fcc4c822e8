/*
 * data.c - the training data: a byte stream read whole into memory.  The
 * sample s of step k is the T + 1 bytes at an offset drawn from (seed, k,
 * s) alone, so every rank finds the same batch without talking to others,
 * whichever part of it the plan gives it.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ar.h"
#include "gpt.h"

int gpt_data_load(struct gpt_data *d, const char *path, int T)
{
	FILE *f;
	long len;
	int rc = 0;

	memset(d, 0, sizeof(*d));
	f = fopen(path, "rb");
	if (!f)
		return ar_seterr(-errno, "%s: %s", path, strerror(errno));
	if (fseek(f, 0, SEEK_END) < 0 || (len = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) < 0) {
		rc = ar_seterr(-errno, "%s: %s", path, strerror(errno));
		goto out;
	}
	if (len < (long)T + 2) {
		rc = ar_seterr(-AR_EINVAL, "%s: %ld bytes; a sample needs %d",
			       path, len, T + 2);
		goto out;
	}
	d->bytes = malloc(len);
	d->path = strdup(path);
	if (!d->bytes || !d->path) {
		rc = -ENOMEM;
		goto out;
	}
	if (fread(d->bytes, 1, len, f) != (size_t)len) {
		rc = ar_seterr(-EIO, "%s: short read", path);
		goto out;
	}
	d->len = len;
out:
	fclose(f);
	if (rc < 0)
		gpt_data_free(d);
	return rc;
}

void gpt_data_free(struct gpt_data *d)
{
	free(d->bytes);
	free(d->path);
	memset(d, 0, sizeof(*d));
}

void gpt_data_sample(const struct gpt_data *d, uint64_t seed, long step,
		     int sample, int T, int *tokens, int *targets)
{
	uint64_t key = gpt_mix64(gpt_mix64(seed ^ 0x5eedda7aULL) ^
				 gpt_mix64(((uint64_t)step << 24) ^ sample));
	size_t off = key % (d->len - T);

	for (int t = 0; t < T; t++) {
		tokens[t] = d->bytes[off + t];
		targets[t] = d->bytes[off + t + 1];
	}
}
