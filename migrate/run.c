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
	int me = tp->rank, nx = 0, cap = 0, rc = 0, agreed;
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
		for (; i < m->ntuples && m->tuples[i].round <= step; i++) {
			const struct migrate_tuple *t = &m->tuples[i];
			size_t bytes = t->hi - t->lo;

			if (t->from != me && t->to != me)
				continue;
			if (t->from == t->to) {
				rc = tp->ops->copy(tp, dst + t->dst_offset,
						   src + t->src_offset, bytes);
				if (rc < 0)
					break;
				continue;
			}
			if (nx == cap) {
				int c = cap ? 2 * cap : 64;
				struct migrate_xfer *v = realloc(xs,
							c * sizeof(*v));

				if (!v) {
					rc = -ENOMEM;
					break;
				}
				xs = v;
				cap = c;
			}
			xs[nx++] = t->from == me ?
				(struct migrate_xfer){
					.peer = t->to, .bytes = bytes,
					.buf = (void *)(src + t->src_offset),
					.send = true,
				} :
				(struct migrate_xfer){
					.peer = t->from, .bytes = bytes,
					.buf = dst + t->dst_offset,
					.send = false,
				};
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
