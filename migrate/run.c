/*
 * run.c - one rank's execution of a migration: stage 1, then the rounds of
 * stage 2, then an agreement so that success is all-or-nothing.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define AR_INTERNAL
#include "migrate_private.h"

#define DEFAULT_TIMEOUT_S	60.0

int migrate_agree(struct migrate_transport *tp, bool ok, double timeout_s)
{
	if (timeout_s <= 0.0)
		timeout_s = DEFAULT_TIMEOUT_S;
	return tp->ops->agree(tp, ok, timeout_s);
}

int migrate_run(const struct migrate *m, struct migrate_transport *tp,
		const void *old_state, void *new_state,
		const struct migrate_run_opts *opts)
{
	double timeout_s = opts && opts->timeout_s > 0.0 ? opts->timeout_s :
							   DEFAULT_TIMEOUT_S;
	const char *src = old_state;
	char *dst = new_state;
	struct migrate_xfer *xs = NULL;
	int me = tp->rank, nx = 0, rc = 0, agreed;
	size_t cap = 0;
	char first_err[512] = "";
	long i = 0;

	/* Every rank sees the same sizes, so every rank fails alike here. */
	if (tp->size != m->nranks)
		return ar_seterr(-AR_EINVAL,
				 "migrate: the migration has %d ranks but the transport %d",
				 m->nranks, tp->size);

	for (int step = 0; step <= m->stats.nrounds && rc == 0; step++) {
		if (opts && opts->progress)
			opts->progress(opts->progress_arg, step,
				       m->stats.nrounds + 1);
		nx = 0;
		for (; i < m->ntuples && m->tuples[i].round <= step && rc == 0;
		     i++) {
			const struct migrate_tuple *t = &m->tuples[i];

			if (t->from != me && t->to != me)
				continue;
			/* One transfer per block, in order on both sides. */
			for (uint64_t k = 0; k < (uint64_t)t->count; k++) {
				size_t bytes = t->hi - t->lo;
				const char *from = src + t->src_offset +
						   k * t->src_stride;
				char *to = dst + t->dst_offset +
					   k * t->dst_stride;

				if (t->from == t->to) {
					rc = tp->ops->copy(tp, to, from, bytes);
					if (rc < 0)
						break;
					continue;
				}
				if (AR_GROW(xs, cap, nx + 1, 64) < 0) {
					rc = -ENOMEM;
					break;
				}
				xs[nx++] = t->from == me ?
					(struct migrate_xfer){
						.peer = t->to, .bytes = bytes,
						.buf = (void *)from,
						.send = true,
					} :
					(struct migrate_xfer){
						.peer = t->from, .bytes = bytes,
						.buf = to, .send = false,
					};
			}
		}
		if (rc == 0 && nx > 0)
			rc = tp->ops->step(tp, xs, nx, timeout_s);
	}
	free(xs);
	if (rc < 0)
		snprintf(first_err, sizeof(first_err), "%s", ar_errmsg());

	/* A rank that failed still joins, so the others learn it at once. */
	agreed = tp->ops->agree(tp, rc == 0, timeout_s);
	if (rc < 0)
		return ar_seterr(rc, "rank %d: %s", me, first_err);
	return agreed;
}
