/*
 * priced.c - the candidate plans a planning run has priced, with their
 * throughput.  The climb meets the same plan again: the move back from
 * its last move, a shape two moves reach, two starts' climbs that end on
 * one hill.  A candidate's fill depends on its templates alone, so the
 * number its fill gave stands.
 *
 * Entries are kept in the order they were added (an index into them
 * stays valid while the table grows) and found through an open-addressed
 * index of their hashes; a key is the candidate's templates in a few
 * bytes each, compared whole, so two candidates are the same entry only
 * when every template is the same.
 */
#define AR_INTERNAL 1
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ar.h"
#include "arachne_private.h"

/* The bytes of a key: the template count, then per template its depth,
 * its replica cap (4 bytes) and each stage's GPU type and TP degree. */
#define KEY_MAX	(1 + POLICY_MAX_TEMPLATES * (1 + 4 + 2 * POLICY_DMAX))

static size_t candidate_key(const struct policy_candidate *x, uint8_t *key)
{
	size_t len = 0;

	key[len++] = (uint8_t)x->n;
	for (int i = 0; i < x->n; i++) {
		const struct policy_template *t = &x->t[i];
		uint32_t cap = (uint32_t)t->max_replicas;

		key[len++] = (uint8_t)t->depth;
		memcpy(&key[len], &cap, sizeof(cap));
		len += sizeof(cap);
		for (int s = 0; s < t->depth; s++) {
			key[len++] = (uint8_t)t->stage[s].gpu;
			key[len++] = (uint8_t)t->stage[s].tp;
		}
	}
	return len;
}

/* FNV-1a, never 0 (0 marks an empty slot of the index). */
static uint64_t key_hash(const uint8_t *key, size_t len)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < len; i++)
		h = (h ^ key[i]) * 1099511628211ull;
	return h ? h : 1;
}

void policy_priced_init(struct policy_priced *p)
{
	memset(p, 0, sizeof(*p));
}

void policy_priced_fini(struct policy_priced *p)
{
	free(p->slot_hash);
	free(p->slot_entry);
	free(p->entry);
	free(p->keys);
	memset(p, 0, sizeof(*p));
}

/* Entry @e into the index, which has room. */
static void index_put(struct policy_priced *p, uint64_t h, int e)
{
	size_t i = h & (p->nslots - 1);

	while (p->slot_hash[i])
		i = (i + 1) & (p->nslots - 1);
	p->slot_hash[i] = h;
	p->slot_entry[i] = e;
}

/* Keep the index at most half full. */
static int index_grow(struct policy_priced *p)
{
	size_t n = p->nslots ? 2 * p->nslots : 1024;
	uint64_t *old_hash = p->slot_hash;
	int *old_entry = p->slot_entry;
	size_t old_n = p->nslots;

	if (2 * ((size_t)p->nentries + 1) <= p->nslots)
		return 0;
	p->slot_hash = calloc(n, sizeof(*p->slot_hash));
	p->slot_entry = malloc(n * sizeof(*p->slot_entry));
	if (!p->slot_hash || !p->slot_entry) {
		free(p->slot_hash);
		free(p->slot_entry);
		p->slot_hash = old_hash;
		p->slot_entry = old_entry;
		return -ENOMEM;
	}
	p->nslots = n;
	for (size_t i = 0; i < old_n; i++)
		if (old_hash[i])
			index_put(p, old_hash[i], old_entry[i]);
	free(old_hash);
	free(old_entry);
	return 0;
}

/* Room for one more entry and its key. */
static int entries_grow(struct policy_priced *p)
{
	if (p->nentries == p->entry_cap) {
		int cap = p->entry_cap ? 2 * p->entry_cap : 1024;
		struct policy_priced_entry *e = realloc(p->entry, cap * sizeof(*e));

		if (!e)
			return -ENOMEM;
		p->entry = e;
		p->entry_cap = cap;
	}
	if (p->keys_len + KEY_MAX > p->keys_cap) {
		size_t cap = p->keys_cap ? 2 * p->keys_cap : 64 * KEY_MAX;
		uint8_t *k = realloc(p->keys, cap);

		if (!k)
			return -ENOMEM;
		p->keys = k;
		p->keys_cap = cap;
	}
	return 0;
}

int policy_priced_find(struct policy_priced *p, const struct policy_candidate *x,
		       bool *added)
{
	uint8_t key[KEY_MAX];
	size_t len = candidate_key(x, key), i;
	uint64_t h = key_hash(key, len);
	struct policy_priced_entry *e;
	int rc;

	*added = false;
	for (i = p->nslots ? h & (p->nslots - 1) : 0; p->nslots && p->slot_hash[i];
	     i = (i + 1) & (p->nslots - 1)) {
		e = &p->entry[p->slot_entry[i]];
		if (p->slot_hash[i] == h && e->key_len == len &&
		    !memcmp(&p->keys[e->key_off], key, len))
			return p->slot_entry[i];
	}
	if ((rc = index_grow(p)) < 0 || (rc = entries_grow(p)) < 0)
		return rc;
	e = &p->entry[p->nentries];
	e->key_off = p->keys_len;
	e->key_len = len;
	e->thr = 0.0;
	e->known = false;
	memcpy(&p->keys[p->keys_len], key, len);
	p->keys_len += len;
	index_put(p, h, p->nentries);
	*added = true;
	return p->nentries++;
}
