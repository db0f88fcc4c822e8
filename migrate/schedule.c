/*
 * schedule.c - the two-stage schedule of §5.6, its predicted time, and the
 * invariant check.
 *
 * Stage 1 (round 0) holds the copies inside one GPU and the transfers
 * whose two GPUs share a pipeline (old or new): each pipeline's ranks post
 * them all at once, so pipelines proceed in parallel.  Stage 2 holds the
 * cross-pipeline transfers, cut into chunks of about one round's length
 * and packed greedily into rounds in which every GPU sends to at most one
 * peer and receives from at most one: both ends of an exchange know its
 * peer and size from the tuple list alone, so no pair can wait on the
 * other out of order.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AR_INTERNAL
#include "migrate_private.h"

/* Rounds stage 2 aims for, and the shortest round worth synchronizing. */
#define TARGET_ROUNDS		32
#define MIN_ROUND_S		1e-3
#define DEFAULT_MIN_CHUNK	(1ull << 20)
/* Fixed cost of one step (posting, matching, completion), per step. */
#define STEP_LATENCY_S		50e-6

int migrate_tuple_cmp(const void *a, const void *b)
{
	const struct migrate_tuple *x = a, *y = b;

	if (x->round != y->round)
		return x->round < y->round ? -1 : 1;
	if (x->from != y->from)
		return x->from < y->from ? -1 : 1;
	if (x->to != y->to)
		return x->to < y->to ? -1 : 1;
	if (x->layer != y->layer)
		return x->layer < y->layer ? -1 : 1;
	if (x->tensor != y->tensor)
		return x->tensor < y->tensor ? -1 : 1;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static bool same_pipeline(const struct migrate *m, int a, int b)
{
	const struct migrate_rank *x = &m->ranks[a], *y = &m->ranks[b];

	return (x->old_pipe >= 0 && x->old_pipe == y->old_pipe) ||
	       (x->new_pipe >= 0 && x->new_pipe == y->new_pipe);
}

/* Per-direction loads (seconds) of every link resource in one step. */
struct step_load {
	double *gpu_out, *gpu_in;	/* intra-node ports [nranks] */
	double *nic_out, *nic_in;	/* [nnodes] */
};

static int step_load_init(struct step_load *sl, const struct migrate *m)
{
	sl->gpu_out = calloc(m->nranks + 1, sizeof(double));
	sl->gpu_in = calloc(m->nranks + 1, sizeof(double));
	sl->nic_out = calloc(m->topo->nnodes, sizeof(double));
	sl->nic_in = calloc(m->topo->nnodes, sizeof(double));
	if (!sl->gpu_out || !sl->gpu_in || !sl->nic_out || !sl->nic_in)
		return -ENOMEM;
	return 0;
}

static void step_load_fini(struct step_load *sl)
{
	free(sl->gpu_out);
	free(sl->gpu_in);
	free(sl->nic_out);
	free(sl->nic_in);
}

static void step_load_clear(struct step_load *sl, const struct migrate *m)
{
	memset(sl->gpu_out, 0, m->nranks * sizeof(double));
	memset(sl->gpu_in, 0, m->nranks * sizeof(double));
	memset(sl->nic_out, 0, m->topo->nnodes * sizeof(double));
	memset(sl->nic_in, 0, m->topo->nnodes * sizeof(double));
}

/* Adds @bytes from rank @from to rank @to. */
static void step_load_add(struct step_load *sl, const struct migrate *m,
			  int from, int to, double bytes)
{
	int nf = m->ranks[from].node, nt = m->ranks[to].node;

	switch (migrate_link_of(m, from, to)) {
	case MIGRATE_LINK_LOCAL:
		break;
	case MIGRATE_LINK_INTRA:
		sl->gpu_out[from] +=
			bytes / (m->topo->nodes[nf].intra_GBps * 1e9);
		sl->gpu_in[to] +=
			bytes / (m->topo->nodes[nt].intra_GBps * 1e9);
		break;
	case MIGRATE_LINK_NET:
		sl->nic_out[nf] += bytes / (m->topo->nodes[nf].nic_GBps * 1e9);
		sl->nic_in[nt] += bytes / (m->topo->nodes[nt].nic_GBps * 1e9);
		break;
	}
}

static double step_load_max(const struct step_load *sl,
			    const struct migrate *m)
{
	double worst = 0.0;

	for (int r = 0; r < m->nranks; r++) {
		if (sl->gpu_out[r] > worst)
			worst = sl->gpu_out[r];
		if (sl->gpu_in[r] > worst)
			worst = sl->gpu_in[r];
	}
	for (int n = 0; n < m->topo->nnodes; n++) {
		if (sl->nic_out[n] > worst)
			worst = sl->nic_out[n];
		if (sl->nic_in[n] > worst)
			worst = sl->nic_in[n];
	}
	return worst;
}

void migrate_predict(struct migrate *m)
{
	struct migrate_stats *st = &m->stats;
	struct step_load all = { 0 }, step = { 0 };
	int round = -1;

	st->bytes_moved = 0;
	st->ntuples = 0;
	st->stage1_s = st->stage2_s = st->lower_bound_s = 0.0;
	if (step_load_init(&all, m) < 0 || step_load_init(&step, m) < 0)
		goto out;

	for (long i = 0, j; i <= m->ntuples; i = j) {
		const struct migrate_tuple *t = i < m->ntuples ?
						&m->tuples[i] : NULL;
		uint64_t bytes = 0;

		if (!t || t->round != round) {
			double busiest = step_load_max(&step, m);

			if (round == 0)
				st->stage1_s = busiest > 0 ?
					       busiest + STEP_LATENCY_S : 0.0;
			else if (round > 0)
				st->stage2_s += busiest + STEP_LATENCY_S;
			step_load_clear(&step, m);
			if (!t)
				break;
			round = t->round;
		}
		/* A pair's tuples of one step load the same links: add once. */
		for (j = i; j < m->ntuples && m->tuples[j].round == round &&
		     m->tuples[j].from == t->from && m->tuples[j].to == t->to;
		     j++)
			bytes += migrate_tuple_bytes(&m->tuples[j]);
		if (t->from == t->to)
			continue;
		st->bytes_moved += bytes;
		st->ntuples += j - i;
		step_load_add(&step, m, t->from, t->to, (double)bytes);
		step_load_add(&all, m, t->from, t->to, (double)bytes);
	}
	st->lower_bound_s = step_load_max(&all, m);
	st->time_s = st->stage1_s + st->stage2_s;
out:
	step_load_fini(&all);
	step_load_fini(&step);
}

/*
 * A stage-2 chunk: about one round's worth of the bytes one sender owes
 * one receiver, made of pieces of one or more tuples.  Bundling the small
 * tuples of a pair (one expert, one layer's gradients...) keeps rounds of
 * even length, which is what keeps the schedule near its bound.
 */
struct chunk {
	int from, to;
	double time;			/* on its per-GPU link share */
	int round;
	long tuple;			/* its first byte: in this tuple */
	uint64_t at;			/* at this byte of the tuple's blocks */
	uint64_t bytes;
	long npieces;			/* tuples it is made of */
};

/*
 * Bytes [@a, @b) of block @k of @t and the @nblocks - 1 blocks after it
 * (whole blocks when there are several), as one tuple in *@o.
 */
static void tuple_part(const struct migrate_tuple *t, uint64_t k,
		       uint64_t a, uint64_t b, uint64_t nblocks,
		       struct migrate_tuple *o)
{
	*o = *t;
	o->lo = t->lo + k * t->stride + a;
	o->hi = o->lo + (b - a);
	o->src_offset += k * t->src_stride + a;
	o->dst_offset += k * t->dst_stride + a;
	o->count = (int32_t)nblocks;
	if (nblocks == 1)
		o->stride = o->src_stride = o->dst_stride = 0;
}

/*
 * Bytes [@x0, @x1) of @t's blocks taken end to end, as at most 3 tuples:
 * the end of a first block, whole blocks, the start of a last block.
 * Writes them to @out unless it is NULL; returns how many.
 */
static int tuple_slice(const struct migrate_tuple *t, uint64_t x0,
		       uint64_t x1, struct migrate_tuple *out)
{
	uint64_t len = t->hi - t->lo;
	uint64_t k0 = x0 / len, r0 = x0 % len, k1 = x1 / len, r1 = x1 % len;
	int n = 0;

	if (k0 == k1) {
		if (out)
			tuple_part(t, k0, r0, r1, 1, out);
		return 1;
	}
	if (r0) {
		if (out)
			tuple_part(t, k0, r0, len, 1, &out[n]);
		n++;
		k0++;
	}
	if (k1 > k0) {
		if (out)
			tuple_part(t, k0, 0, len, k1 - k0, &out[n]);
		n++;
	}
	if (r1) {
		if (out)
			tuple_part(t, k1, 0, r1, 1, &out[n]);
		n++;
	}
	return n;
}

/*
 * Greedy rounds, busiest first: each round serves the receivers in order
 * of their remaining load, and each takes, among its chunks whose sender
 * is still free this round, the one whose sender has the most left (list
 * scheduling of an open shop, which stays close to the busiest GPU's
 * load).  On return every chunk has its round, 1 and up, in place.
 */
static int pack_rounds(struct migrate *m, struct chunk *cs, long nc,
		       int *nroundsp)
{
	double *rem_out = calloc(m->nranks + 1, sizeof(double));
	double *rem_in = calloc(m->nranks + 1, sizeof(double));
	char *busy_out = calloc(m->nranks + 1, 1);
	long *start = calloc(m->nranks + 2, sizeof(long));
	long *left = calloc(m->nranks + 1, sizeof(long));
	struct chunk **byrecv = malloc((nc + 1) * sizeof(*byrecv));
	int *order = malloc((m->nranks + 1) * sizeof(int));
	size_t nranks = m->nranks > 0 ? (size_t)m->nranks : 0;
	long done = 0;
	int round = 0, rc = 0;

	if (!rem_out || !rem_in || !busy_out || !start || !left || !byrecv ||
	    !order) {
		rc = -ENOMEM;
		goto out;
	}
	for (long i = 0; i < nc; i++) {
		rem_out[cs[i].from] += cs[i].time;
		rem_in[cs[i].to] += cs[i].time;
		start[cs[i].to + 1]++;
	}
	for (int r = 0; r < m->nranks; r++)
		start[r + 1] += start[r];
	for (long i = 0; i < nc; i++) {
		int to = cs[i].to;

		byrecv[start[to] + left[to]++] = &cs[i];
	}

	while (done < nc) {
		int norder = 0;

		round++;
		for (int r = 0; r < m->nranks; r++)
			if (left[r])
				order[norder++] = r;
		/* Insertion sort by remaining receive load (few receivers). */
		for (int i = 1; i < norder; i++) {
			int r = order[i], j = i;

			while (j > 0 && rem_in[order[j - 1]] < rem_in[r]) {
				order[j] = order[j - 1];
				j--;
			}
			order[j] = r;
		}
		memset(busy_out, 0, nranks);
		for (int i = 0; i < norder; i++) {
			int r = order[i];
			struct chunk **mine = &byrecv[start[r]];
			long pick = -1;

			for (long j = 0; j < left[r]; j++) {
				const struct chunk *c = mine[j], *b;

				if (busy_out[c->from])
					continue;
				if (pick < 0) {
					pick = j;
					continue;
				}
				/* Whole chunks first, partial ones last. */
				b = mine[pick];
				if (c->time > b->time * (1 + 1e-9) ||
				    (c->time >= b->time * (1 - 1e-9) &&
				     rem_out[c->from] > rem_out[b->from]))
					pick = j;
			}
			if (pick < 0)
				continue;
			struct chunk *c = mine[pick];
			int from = c->from;

			busy_out[from] = 1;
			rem_out[from] -= c->time;
			rem_in[r] -= c->time;
			c->round = round;
			mine[pick] = mine[--left[r]];
			done++;
		}
	}
	*nroundsp = round;
out:
	free(rem_out);
	free(rem_in);
	free(busy_out);
	free(start);
	free(left);
	free(byrecv);
	free(order);
	return rc;
}

/*
 * Stable counting sort of @m's tuples by sender, in O(n): migrate_diff()
 * emits tuples receiver by receiver in shard order, so this gives
 * (from, to, layer, tensor, lo).  The unsorted array is handed back in
 * *@sparep for place_chunks() to reuse: its pages are already mapped.
 */
static int tuples_sort_by_sender(struct migrate *m,
				 struct migrate_tuple **sparep)
{
	struct migrate_tuple *out;
	long *pos = calloc((size_t)m->nranks + 1, sizeof(long));

	out = malloc((m->ntuples + 1) * sizeof(*out));
	if (!pos || !out) {
		free(pos);
		free(out);
		return -ENOMEM;
	}
	for (long i = 0; i < m->ntuples; i++)
		pos[m->tuples[i].from + 1]++;
	for (int r = 0; r < m->nranks; r++)
		pos[r + 1] += pos[r];
	for (long i = 0; i < m->ntuples; i++)
		out[pos[m->tuples[i].from]++] = m->tuples[i];
	*sparep = m->tuples;
	m->tuples = out;
	free(pos);
	return 0;
}

/*
 * Cuts the stage-2 tuples of each (sender, receiver) pair, in list order,
 * into chunks of @round_s on the pair's link share (at least @min_chunk).
 * Stores the number of stage-1 tuples in *@nstage1p.
 */
static int make_chunks(struct migrate *m, double round_s, uint64_t min_chunk,
		       struct chunk **csp, long *ncp, long *nstage1p)
{
	struct chunk *cs = NULL;
	long nc = 0, nstage1 = 0;
	size_t ccap = 0;

	for (long i = 0; i < m->ntuples;) {
		const struct migrate_tuple *t = &m->tuples[i];
		int from = t->from, to = t->to;
		uint64_t size, room = 0;
		double bps;
		long j = i;

		while (j < m->ntuples && m->tuples[j].from == from &&
		       m->tuples[j].to == to)
			j++;
		if (from == to || same_pipeline(m, from, to)) {
			nstage1 += j - i;
			i = j;
			continue;
		}
		bps = migrate_share_Bps(m, from, to);
		size = (uint64_t)(round_s * bps);
		if (size < min_chunk)
			size = min_chunk;
		for (; i < j; i++) {
			uint64_t bytes;

			t = &m->tuples[i];
			bytes = migrate_tuple_bytes(t);
			for (uint64_t a = 0; a < bytes;) {
				uint64_t take;

				if (room == 0) {
					if (AR_GROW(cs, ccap, nc + 1, 1024) < 0) {
						free(cs);
						return -ENOMEM;
					}
					cs[nc++] = (struct chunk){
						.from = from, .to = to,
						.tuple = i, .at = a,
					};
					room = size;
				}
				take = bytes - a < room ? bytes - a : room;
				cs[nc - 1].bytes += take;
				cs[nc - 1].npieces +=
					tuple_slice(t, a, a + take, NULL);
				cs[nc - 1].time += (double)take / bps;
				room -= take;
				a += take;
			}
		}
	}
	*csp = cs;
	*ncp = nc;
	*nstage1p = nstage1;
	return 0;
}

/*
 * The final list, in *@sparep's memory, from the tuples sorted by sender
 * and their chunks, each with its round: stage 1's tuples as they are,
 * then every chunk's pieces, each written straight to its place.  Chunks
 * come by sender and a sender has one chunk per round, so each round's
 * part stays sorted.
 */
static int place_chunks(struct migrate *m, const struct chunk *cs, long nc,
			long nstage1, int nrounds, struct migrate_tuple **sparep)
{
	long *pos = calloc((size_t)nrounds + 2, sizeof(long));
	struct migrate_tuple *out;
	long total = nstage1;

	for (long c = 0; c < nc; c++)
		total += cs[c].npieces;
	out = pos ? realloc(*sparep, (total + 1) * sizeof(*out)) : NULL;
	if (!out) {
		free(pos);
		return -ENOMEM;
	}
	*sparep = NULL;
	pos[1] = nstage1;
	for (long c = 0; c < nc; c++)
		pos[cs[c].round + 1] += cs[c].npieces;
	for (int r = 1; r <= nrounds; r++)
		pos[r + 1] += pos[r];

	for (long i = 0; i < m->ntuples; i++) {
		const struct migrate_tuple *t = &m->tuples[i];

		if (t->from == t->to || same_pipeline(m, t->from, t->to))
			out[pos[0]++] = *t;
	}
	for (long c = 0; c < nc; c++) {
		uint64_t left = cs[c].bytes;
		long *at = &pos[cs[c].round];

		for (long i = cs[c].tuple; left > 0; i++) {
			const struct migrate_tuple *t = &m->tuples[i];
			uint64_t a = i == cs[c].tuple ? cs[c].at : 0;
			uint64_t e = migrate_tuple_bytes(t) - a < left ?
				     migrate_tuple_bytes(t) : a + left;
			int n = tuple_slice(t, a, e, &out[*at]);

			for (int k = 0; k < n; k++)
				out[*at + k].round = cs[c].round;
			*at += n;
			left -= e - a;
		}
	}
	free(m->tuples);
	m->tuples = out;
	m->ntuples = total;
	free(pos);
	return 0;
}

int migrate_schedule(struct migrate *m, const struct migrate_opts *opts)
{
	uint64_t min_chunk = opts->min_chunk_bytes ? opts->min_chunk_bytes :
						     DEFAULT_MIN_CHUNK;
	struct migrate_tuple *spare = NULL;
	struct chunk *cs = NULL;
	long nc = 0, nstage1 = 0;
	double round_s = opts->round_s;
	int nrounds = 0, rc = 0;

	if (round_s <= 0.0) {
		round_s = m->stats.lower_bound_s / TARGET_ROUNDS;
		if (round_s < MIN_ROUND_S)
			round_s = MIN_ROUND_S;
	}
	/* Pairs together, in the order both sides will post them. */
	rc = tuples_sort_by_sender(m, &spare);
	if (rc < 0)
		goto out;

	rc = make_chunks(m, round_s, min_chunk, &cs, &nc, &nstage1);
	if (rc < 0)
		goto out;
	if (nc) {
		rc = pack_rounds(m, cs, nc, &nrounds);
		if (rc < 0)
			goto out;
		rc = place_chunks(m, cs, nc, nstage1, nrounds, &spare);
		if (rc < 0)
			goto out;
	}
	m->stats.nrounds = nrounds;
	migrate_predict(m);
out:
	free(spare);
	free(cs);
	return rc;
}

const struct migrate_shard *
migrate_shard_find(const struct migrate_shard *sh, int n, int layer,
		 int tensor, uint64_t lo, uint64_t hi)
{
	int a = 0, b = n;

	/* Last shard that starts at or before (layer, tensor, lo). */
	while (a < b) {
		int mid = (a + b) / 2;
		const struct migrate_shard *s = &sh[mid];
		bool before = s->layer < layer ||
			      (s->layer == layer &&
			       (s->tensor < tensor ||
				(s->tensor == tensor && s->lo <= lo)));

		if (before)
			a = mid + 1;
		else
			b = mid;
	}
	if (a == 0)
		return NULL;
	sh = &sh[a - 1];
	if (sh->layer != layer || sh->tensor != tensor || sh->hi < hi)
		return NULL;
	return sh;
}

/* A block of a tuple, for the tiling check. */
struct block {
	int32_t to, layer, tensor;
	uint64_t lo, hi;
};

/* By (receiver, layer, tensor, lo). */
static int block_cmp(const void *a, const void *b)
{
	const struct block *x = a, *y = b;

	if (x->to != y->to)
		return x->to < y->to ? -1 : 1;
	if (x->layer != y->layer)
		return x->layer < y->layer ? -1 : 1;
	if (x->tensor != y->tensor)
		return x->tensor < y->tensor ? -1 : 1;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

bool migrate_is_fresh(const struct migrate *m)
{
	for (int r = 0; r < m->nranks; r++)
		if (m->n_old[r])
			return false;
	return true;
}

/*
 * Ranks, layer and tensor exist, and the blocks are in order, apart and
 * inside the tensor.
 */
static bool tuple_is_wellformed(const struct migrate *m,
				const struct migrate_tuple *t)
{
	uint64_t len = t->hi - t->lo, bytes;

	if (t->from < 0 || t->from >= m->nranks || t->to < 0 ||
	    t->to >= m->nranks || t->layer < 0 ||
	    t->layer >= m->layout->nlayers || t->tensor < 0 ||
	    t->tensor >= MIGRATE_NUM_TENSORS || t->lo >= t->hi ||
	    t->count < 1)
		return false;
	bytes = m->layout->layers[t->layer].bytes[t->tensor];
	if (t->hi > bytes)
		return false;
	if (t->count == 1)
		return true;
	return t->stride >= len && t->src_stride >= len &&
	       t->dst_stride >= len &&
	       (uint64_t)(t->count - 1) <= (bytes - t->hi) / t->stride;
}

/*
 * Block @k of tuple @i (@t) lies in a shard of its sender's old state and
 * of its receiver's new state, at the offsets the tuple gives.
 */
static int block_check(const struct migrate *m, long i,
		       const struct migrate_tuple *t, uint64_t k)
{
	uint64_t lo = t->lo + k * t->stride, hi = lo + (t->hi - t->lo);
	uint64_t src = t->src_offset + k * t->src_stride;
	uint64_t dst = t->dst_offset + k * t->dst_stride;
	const struct migrate_shard *s;

	s = migrate_shard_find(m->old_shards[t->from], m->n_old[t->from],
			       t->layer, t->tensor, lo, hi);
	if (!s || s->offset + (lo - s->lo) != src)
		return ar_seterr(-AR_EINVAL,
				 "tuple %ld: rank %d does not hold layer %d tensor %d [%llu, %llu) at offset %llu",
				 i, t->from, t->layer, t->tensor,
				 (unsigned long long)lo,
				 (unsigned long long)hi,
				 (unsigned long long)src);
	s = migrate_shard_find(m->new_shards[t->to], m->n_new[t->to],
			       t->layer, t->tensor, lo, hi);
	if (!s || s->offset + (lo - s->lo) != dst)
		return ar_seterr(-AR_EINVAL,
				 "tuple %ld: rank %d needs no layer %d tensor %d [%llu, %llu) at offset %llu",
				 i, t->to, t->layer, t->tensor,
				 (unsigned long long)lo,
				 (unsigned long long)hi,
				 (unsigned long long)dst);
	return 0;
}

int migrate_check(const struct migrate *m)
{
	struct block *blocks = NULL;
	int *peer_out = NULL, *peer_in = NULL;
	long nblocks = 0, j = 0;
	int rc = 0;

	for (long i = 0; i < m->ntuples; i++) {
		const struct migrate_tuple *t = &m->tuples[i];

		if (!tuple_is_wellformed(m, t)) {
			rc = ar_seterr(-AR_EINVAL, "tuple %ld is malformed", i);
			goto out;
		}
		if (i && migrate_tuple_cmp(&m->tuples[i - 1], t) > 0) {
			rc = ar_seterr(-AR_EINVAL, "tuple %ld is out of order", i);
			goto out;
		}
		nblocks += t->count;
	}
	blocks = malloc((nblocks + 1) * sizeof(*blocks));
	peer_out = malloc((m->nranks + 1) * sizeof(int));
	peer_in = malloc((m->nranks + 1) * sizeof(int));
	if (!blocks || !peer_out || !peer_in) {
		rc = -ENOMEM;
		goto out;
	}
	nblocks = 0;
	for (long i = 0; i < m->ntuples; i++) {
		const struct migrate_tuple *t = &m->tuples[i];

		for (uint64_t k = 0; k < (uint64_t)t->count; k++) {
			rc = block_check(m, i, t, k);
			if (rc < 0)
				goto out;
			blocks[nblocks++] = (struct block){
				.to = t->to, .layer = t->layer,
				.tensor = t->tensor,
				.lo = t->lo + k * t->stride,
				.hi = t->hi + k * t->stride,
			};
		}
	}

	/*
	 * Every new byte exactly once: receivers' blocks tile their shards.
	 * A job that starts (no old state anywhere) has nothing to tile.
	 */
	qsort(blocks, nblocks, sizeof(*blocks), block_cmp);
	for (int r = 0; r < m->nranks && !migrate_is_fresh(m); r++) {
		for (int i = 0; i < m->n_new[r]; i++) {
			const struct migrate_shard *s = &m->new_shards[r][i];
			uint64_t at = s->lo;

			while (at < s->hi) {
				const struct block *b =
					j < nblocks ? &blocks[j] : NULL;

				if (!b || b->to != r || b->layer != s->layer ||
				    b->tensor != s->tensor || b->lo != at) {
					rc = ar_seterr(-AR_EINVAL,
						       "rank %d layer %d tensor %d: byte %llu has %s source",
						       r, s->layer, s->tensor,
						       (unsigned long long)at,
						       b && b->to == r &&
						       b->layer == s->layer &&
						       b->tensor == s->tensor &&
						       b->lo < at ? "more than one" : "no");
					goto out;
				}
				at = b->hi;
				j++;
			}
		}
		if (j < nblocks && blocks[j].to == r) {
			rc = ar_seterr(-AR_EINVAL,
				       "rank %d receives bytes outside its new shards",
				       r);
			goto out;
		}
	}

	/* Stage-2 rounds: one send peer and one receive peer per rank. */
	for (long i = 0; i < m->ntuples;) {
		int round = m->tuples[i].round;

		for (int r = 0; r < m->nranks; r++)
			peer_out[r] = peer_in[r] = -1;
		for (; i < m->ntuples && m->tuples[i].round == round; i++) {
			const struct migrate_tuple *t = &m->tuples[i];

			if (round == 0 || t->from == t->to)
				continue;
			int po = peer_out[t->from], pi = peer_in[t->to];

			if ((po >= 0 && po != t->to) ||
			    (pi >= 0 && pi != t->from)) {
				rc = ar_seterr(-AR_EINVAL,
					       "round %d: rank %d or %d has two peers",
					       round, t->from, t->to);
				goto out;
			}
			peer_out[t->from] = t->to;
			peer_in[t->to] = t->from;
		}
	}
out:
	free(blocks);
	free(peer_out);
	free(peer_in);
	return rc;
}
