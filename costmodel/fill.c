/*
 * fill.c - the arithmetic fill of §5.3: given a structural template
 * (depth, per-stage GPU type and TP), pack it into the free GPUs, take the
 * largest replica count the packing admits, split the layers, tile the
 * experts and choose the micro-batch size, pricing the whole plan.
 *
 * Packing rule (the paper's): a TP group never crosses a node; a group
 * goes to a node whose free GPUs equal its size if one exists, else to the
 * smallest node with room (best fit).  Groups are placed largest first.
 * The replica count is computed on per-type histograms of free GPUs per
 * node, which the best-fit rule makes exact; the placement then follows
 * the same rule node by node.
 *
 * Layer split (beyond the paper, which splits by speed and then tries a
 * fixed list of alternatives): the contiguous split that minimizes the
 * slowest stage subject to every stage's memory, found by bisection on
 * the stage time with a greedy feasibility test, which is exact for
 * contiguous splits.  Then, because a stage's gradient all-reduce grows
 * with its layers and not with its speed, the same search under tighter
 * limits on each stage's all-reduce, keeping the split whose 1F1B
 * iteration is shortest.  Expert tilings are chosen by time and
 * all-reduce together.
 */
#include "config.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define AR_INTERNAL
#include "costmodel_private.h"

/* ------------------------------------------------------------------ */
/* Pools of free GPUs                                                  */

#define POOL_K COSTMODEL_MAX_NODE_GPUS	/* free counts with a bitset: 1..16 */

/* The block of a pool of @nnodes nodes: free_mask, then the bitsets. */
static size_t pool_block_bytes(int nnodes, int *nwords, int *nsum)
{
	size_t mask = ((size_t)nnodes + 3) / 4 * 4 * sizeof(uint16_t);

	*nwords = (nnodes + 63) / 64;
	*nsum = (*nwords + 63) / 64;
	return mask + (size_t)POOL_K * (size_t)(*nwords + *nsum) * sizeof(uint64_t);
}

static void pool_point(struct costmodel_pool *pool)
{
	char *base = (char *)pool->free_mask;

	pool->free_bits = (uint64_t *)(base + ((size_t)pool->nnodes + 3) / 4 * 4 *
				       sizeof(uint16_t));
	pool->free_sum = pool->free_bits + (size_t)POOL_K * (size_t)pool->nwords;
}

/* Node at place @p has @k free GPUs now (@on) or no longer (!@on). */
static void pool_mark(struct costmodel_pool *pool, int k, int p, bool on)
{
	uint64_t *w, *sum;

	if (k < 1)
		return;
	w = &pool->free_bits[(size_t)(k - 1) * (size_t)pool->nwords + (size_t)(p / 64)];
	sum = &pool->free_sum[(size_t)(k - 1) * (size_t)pool->nsum + (size_t)(p / 4096)];
	if (on) {
		*w |= UINT64_C(1) << (p % 64);
		*sum |= UINT64_C(1) << (p / 64 % 64);
	} else {
		*w &= ~(UINT64_C(1) << (p % 64));
		if (!*w)
			*sum &= ~(UINT64_C(1) << (p / 64 % 64));
	}
}

/* The first place in [@lo, @hi) whose node has @k free GPUs, or -1. */
static int pool_first(const struct costmodel_pool *pool, int k, int lo, int hi)
{
	const uint64_t *bits = pool->free_bits + (size_t)(k - 1) * (size_t)pool->nwords;
	const uint64_t *sum = pool->free_sum + (size_t)(k - 1) * (size_t)pool->nsum;
	int w = lo / 64, p = -1;
	uint64_t v;

	if (lo >= hi)
		return -1;
	v = bits[w] & (~UINT64_C(0) << (lo % 64));
	if (v) {
		p = w * 64 + __builtin_ctzll(v);
	} else {
		/* The next non-zero word after w, through the summary. */
		for (int s = (w + 1) / 64, first = (w + 1) % 64;
		     s < pool->nsum && s * 4096 < hi; s++, first = 0) {
			v = sum[s] & (~UINT64_C(0) << first);
			if (v) {
				w = s * 64 + __builtin_ctzll(v);
				p = w * 64 + __builtin_ctzll(bits[w]);
				break;
			}
		}
	}
	return p >= 0 && p < hi ? p : -1;
}

void costmodel_pool_reindex(struct costmodel_pool *pool,
			    const struct costmodel_cluster *cl)
{
	memset(pool->free_by_type, 0, sizeof(pool->free_by_type));
	memset(pool->free_hist, 0, sizeof(pool->free_hist));
	memset(pool->free_bits, 0, (size_t)POOL_K *
	       (size_t)(pool->nwords + pool->nsum) * sizeof(uint64_t));
	for (int i = 0; i < pool->nnodes; i++) {
		int type = cl->nodes[i].gpu;
		int nfree = __builtin_popcount(pool->free_mask[i]);

		pool->free_by_type[type] += nfree;
		pool->free_hist[type][nfree]++;
		pool_mark(pool, nfree, cl->type_pos[i], true);
	}
}

int costmodel_pool_init(struct costmodel_pool *pool,
			const struct costmodel_cluster *cl)
{
	int nwords, nsum;
	size_t bytes = pool_block_bytes((int)cl->nnodes, &nwords, &nsum);

	memset(pool, 0, sizeof(*pool));
	if (cl->nnodes && !cl->type_pos)
		return ar_seterr(-AR_EINVAL, "cluster: not indexed (costmodel_cluster_index())");
	pool->nnodes = (int)cl->nnodes;
	pool->nwords = nwords;
	pool->nsum = nsum;
	pool->free_mask = calloc(1, bytes ? bytes : 1);
	if (!pool->free_mask)
		return -ENOMEM;
	pool_point(pool);
	for (size_t i = 0; i < cl->nnodes; i++)
		pool->free_mask[i] = (uint16_t)((1u << cl->nodes[i].gpus) - 1);
	costmodel_pool_reindex(pool, cl);
	return 0;
}

void costmodel_pool_fini(struct costmodel_pool *pool)
{
	free(pool->free_mask);
	pool->free_mask = NULL;
	pool->free_bits = NULL;
	pool->free_sum = NULL;
}

int costmodel_pool_copy(struct costmodel_pool *dst,
			const struct costmodel_pool *src)
{
	uint16_t *mask = dst->free_mask;
	int nwords, nsum;
	size_t bytes = pool_block_bytes(src->nnodes, &nwords, &nsum);

	if (!mask || dst->nnodes != src->nnodes) {
		mask = realloc(mask, bytes ? bytes : 1);
		if (!mask)
			return -ENOMEM;
	}
	*dst = *src;
	dst->free_mask = mask;
	pool_point(dst);
	memcpy(mask, src->free_mask, bytes);
	return 0;
}

int costmodel_pool_largest_free(const struct costmodel_pool *pool, int type)
{
	if (type < 0 || type >= COSTMODEL_MAX_GPU_TYPES)
		return 0;
	for (int k = COSTMODEL_MAX_NODE_GPUS; k > 0; k--)
		if (pool->free_hist[type][k])
			return k;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Packing                                                             */

/*
 * Place @q groups of @t GPUs best-fit into the histogram @hist of free
 * GPUs per node.  Best fit consumes nodes whole, smallest first: a node's
 * remainder after one group is the new smallest that fits, since every
 * smaller size that fits was used up before.  Returns the groups that
 * did not fit.
 */
static long hist_place(int *hist, int t, long q)
{
	for (int k = t; k <= COSTMODEL_MAX_NODE_GPUS && q > 0; k++) {
		long per_node = k / t, whole;

		if (!hist[k])
			continue;
		whole = q / per_node;
		if (whole > hist[k])
			whole = hist[k];
		hist[k] -= (int)whole;
		hist[k - per_node * t] += (int)whole;
		q -= whole * per_node;
		if (q > 0 && q < per_node && hist[k]) {
			hist[k]--;
			hist[k - q * t]++;
			q = 0;
		}
	}
	return q;
}

/* Stages of @shape by descending TP: the order groups are placed in. */
static void shape_order(const struct costmodel_shape *shape, int *order)
{
	for (int s = 0; s < shape->depth; s++)
		order[s] = s;
	for (int i = 1; i < shape->depth; i++)	/* stable insertion sort */
		for (int j = i; j > 0 && shape->tp[order[j]] > shape->tp[order[j - 1]]; j--) {
			int x = order[j];

			order[j] = order[j - 1];
			order[j - 1] = x;
		}
}

static bool replicas_fit(const struct costmodel_pool *pool,
			 const struct costmodel_shape *shape, const int *order,
			 long r)
{
	int hist[COSTMODEL_MAX_GPU_TYPES][COSTMODEL_MAX_NODE_GPUS + 1];

	memcpy(hist, pool->free_hist, sizeof(hist));
	for (int i = 0; i < shape->depth; i++) {
		int s = order[i];

		if (hist_place(hist[shape->gpu[s]], shape->tp[s], r) > 0)
			return false;
	}
	return true;
}

int costmodel_fill_replicas(const struct costmodel *cm,
			    const struct costmodel_pool *pool,
			    const struct costmodel_shape *shape)
{
	int need[COSTMODEL_MAX_GPU_TYPES] = { 0 };
	int order[COSTMODEL_MAX_DEPTH];
	long lo = 0, hi = LONG_MAX;

	if (shape->depth < 1 || shape->depth > COSTMODEL_MAX_DEPTH)
		return 0;
	for (int s = 0; s < shape->depth; s++) {
		if (shape->gpu[s] < 0 || shape->gpu[s] >= cm->ngpus ||
		    cm_log2(shape->tp[s]) < 0 || shape->tp[s] > COSTMODEL_MAX_TP)
			return 0;
		need[shape->gpu[s]] += shape->tp[s];
	}
	for (int g = 0; g < cm->ngpus; g++)
		if (need[g] && pool->free_by_type[g] / need[g] < hi)
			hi = pool->free_by_type[g] / need[g];
	shape_order(shape, order);
	/* The capacity bound is usually exact; bisect when nodes fragment. */
	if (hi == 0 || replicas_fit(pool, shape, order, hi))
		return (int)hi;
	while (lo + 1 < hi) {
		long mid = lo + (hi - lo) / 2;

		if (replicas_fit(pool, shape, order, mid))
			lo = mid;
		else
			hi = mid;
	}
	return (int)lo;
}

int costmodel_pool_take(const struct costmodel_cluster *cl,
			struct costmodel_pool *pool, int gpu, int t,
			struct costmodel_group *g)
{
	int best = -1, best_free = 0, p = -1;

	if (gpu < 0 || gpu >= COSTMODEL_MAX_GPU_TYPES || t < 1)
		return -AR_EINFEASIBLE;
	/* Best fit: the fewest free GPUs that still hold @t, then the
	 * lowest node index (places keep index order within a type). */
	for (int k = t; k <= POOL_K && p < 0; k++) {
		if (!pool->free_hist[gpu][k])
			continue;
		p = pool_first(pool, k, cl->type_first[gpu], cl->type_first[gpu + 1]);
		best_free = k;
	}
	if (p < 0)
		return -AR_EINFEASIBLE;
	best = cl->by_type[p];
	g->node = best;
	memset(g->gpu, 0, sizeof(g->gpu));
	for (int k = 0, taken = 0; taken < t; k++) {
		if (pool->free_mask[best] & (1u << k)) {
			pool->free_mask[best] &= (uint16_t)~(1u << k);
			g->gpu[taken++] = (uint8_t)k;
		}
	}
	pool_mark(pool, best_free, p, false);
	pool_mark(pool, best_free - t, p, true);
	pool->free_hist[gpu][best_free]--;
	pool->free_hist[gpu][best_free - t]++;
	pool->free_by_type[gpu] -= t;
	return 0;
}

static int place_template(const struct costmodel_cluster *cl,
			  struct costmodel_pool *pool,
			  const struct costmodel_shape *shape,
			  enum costmodel_placement placement,
			  struct costmodel_template *t)
{
	int order[COSTMODEL_MAX_DEPTH], rc;
	bool by_stage = placement != COSTMODEL_PLACE_BY_REPLICA;

	shape_order(shape, order);
	/* By descending TP, so the large groups find their nodes before the
	 * small ones fragment them; within one size, in @placement's order. */
	for (int i = 0; i < shape->depth;) {
		int tp = shape->tp[order[i]], j = i, n;

		while (j < shape->depth && shape->tp[order[j]] == tp)
			j++;
		n = j - i;
		for (int x = 0; x < n * t->replicas; x++) {
			int r = by_stage ? x % t->replicas : x / n;
			int s = order[i + (by_stage ? x / t->replicas : x % n)];

			rc = costmodel_pool_take(cl, pool, shape->gpu[s], tp,
						 &t->placement[r * t->nstages + s]);
			if (rc < 0)
				return rc;
		}
		i = j;
	}
	return 0;
}

/*
 * Whether the two placement orders of @shape's @replicas differ at all:
 * only where two stages take groups of one size from one GPU type's nodes.
 */
static bool placement_orders_differ(const struct costmodel_shape *shape,
				    int replicas)
{
	if (replicas < 2)
		return false;
	for (int s = 0; s < shape->depth; s++)
		for (int u = s + 1; u < shape->depth; u++)
			if (shape->tp[s] == shape->tp[u] &&
			    shape->gpu[s] == shape->gpu[u])
				return true;
	return false;
}

/* ------------------------------------------------------------------ */
/* Layer split and expert tiling                                       */

/* Candidate expert layouts of one stage. */
struct tiling {
	int ep, etp;
	double time, fwd, mem;		/* per MoE layer, memory with in-flight */
	double state, act;		/* mem: state + in-flight x act */
	double sync, gather, step;	/* per MoE layer: dense and expert */
	double params;			/* dense parameters per GPU */
};

#define MAX_STAGE_LAYOUTS 8

/* What one stage costs per layer of each type, for the split. */
struct stage_rates {
	double fixed_s, fixed_fwd_s;	/* p2p per micro-batch, its forward half */
	double time[COSTMODEL_NUM_LAYER_TYPES];	/* per layer */
	double fwd[COSTMODEL_NUM_LAYER_TYPES];	/* of which the forward */
	double mem[COSTMODEL_NUM_LAYER_TYPES];	/* per layer, in-flight included */
	double sync[COSTMODEL_NUM_LAYER_TYPES];	/* per layer: gradient reduction */
	double gather[COSTMODEL_NUM_LAYER_TYPES]; /* distributed optimizer's gather */
	double step[COSTMODEL_NUM_LAYER_TYPES];	/* optimizer step */
	double params[COSTMODEL_NUM_LAYER_TYPES]; /* dense parameters per GPU */
	double cap;			/* bytes left after the overhead */
	/*
	 * MoE stages: the expert layouts the stage may end with, those no
	 * other layout beats in time, sync, step and memory at once,
	 * cheapest over an iteration first.  Which one a stage gets depends
	 * on how many blocks it holds and on the other stages: the split's
	 * estimate chooses it (split_estimate()).  The per-layer rates above
	 * hold the cheapest layout's time and sync and the leanest's memory,
	 * an optimistic stage that split_refine() corrects.
	 */
	struct tiling moe[MAX_STAGE_LAYOUTS];
	int nmoe;
};

/* What the split estimates an iteration with. */
struct split_ctx {
	int pipelines;			/* replicas of every template */
	bool across_templates;		/* other templates' replicas: the network */
	int micro_batches;		/* per replica, if the batch split evenly */
	enum costmodel_recompute recompute;
	bool dist;			/* distributed optimizer */
	bool overlap_grad_reduce, overlap_param_gather;
	double bucket;			/* parameters per gradient bucket */
	bool refine;			/* split_refine() the split */
};

/*
 * The data-parallel group of a stage as the split sees it: its own
 * replicas where it is the only template, else also one rank on a node
 * of its own for every other pipeline (the pricing knows better).
 */
static struct cm_group split_group(const struct cm_stage_links *lk,
				   const struct split_ctx *ctx, int replicas)
{
	struct cm_group g = cm_stage_group(lk, replicas);

	if (ctx->across_templates) {
		g.nodes += ctx->pipelines - replicas;
		g.n = ctx->pipelines;
		g.local = 1;
	}
	return g;
}

/*
 * One layer's share of its stage's gradient collectives over @g for
 * @params parameters per GPU: bandwidth, and the latency of the buckets
 * it fills a part of; the distributed optimizer's gather; its step.
 */
static void layer_sync(const struct costmodel *cm, const struct split_ctx *ctx,
		       const struct cm_group *g, double params, double hbm_Bps,
		       double *rs, double *ag, double *step)
{
	double g_bytes = cm->model.grad_bytes_per_param;
	double lat = cm_allreduce_lat_s(g) * params / ctx->bucket;

	if (ctx->dist) {
		*rs += 0.5 * (cm_allreduce_bw_s(g, params * g_bytes) + lat);
		*ag += 0.5 * (cm_allreduce_bw_s(g, params * 2) + lat);
	} else {
		*rs += cm_allreduce_bw_s(g, params * g_bytes) + lat;
	}
	*step += (params / (ctx->dist && g->n > 1 ? g->n : 1) * OPT_STEP_BYTES +
		  params * g_bytes) / hbm_Bps;
}

#define MAX_TILINGS 64

static int stage_tilings(const struct costmodel *cm, int gpu, int tp, int W,
			 int mbs, int inflight, const struct cm_stage_links *lk,
			 const struct split_ctx *ctx, int replicas, bool pinned,
			 struct tiling *out)
{
	double hbm_Bps = cm->gpus[gpu].hbm_GBps * 1e9 * HBM_EFFICIENCY;
	struct cm_group dense = split_group(lk, ctx, replicas);
	int n = 0;

	for (int etp = 1; etp <= tp; etp *= 2) {
		if (pinned && etp != tp)
			continue;
		/* ep divides the experts: no more of them */
		for (int ep = 1; ep <= W / etp && ep <= cm->model.experts &&
				n < MAX_TILINGS; ep++) {
			struct cm_layer_cost c;
			struct cm_group expert = dense;
			int local = lk->gpus_per_node_min / (ep * etp);

			if ((W / etp) % ep || cm->model.experts % ep)
				continue;
			if (pinned && ep != 1)
				continue;
			if (cm_layer_cost(cm, gpu, tp, mbs, COSTMODEL_LAYER_ATTN,
					  ep, etp, ctx->recompute, lk, &c) < 0)
				continue;
			expert.n = W / (ep * etp);
			expert.nodes = lk->nodes;
			expert.local = local < 1 ? 1 : local;
			memset(&out[n], 0, sizeof(out[n]));
			out[n].ep = ep;
			out[n].etp = etp;
			out[n].time = c.time_s;
			out[n].fwd = c.fwd_s;
			out[n].params = c.params;
			out[n].state = cm_state_bytes(cm, c.params, ctx->dist ? dense.n : 1) +
				       cm_state_bytes(cm, c.expert_params,
						      ctx->dist ? expert.n : 1);
			out[n].act = c.act_bytes;
			out[n].mem = out[n].state + inflight * out[n].act;
			layer_sync(cm, ctx, &dense, c.params, hbm_Bps,
				   &out[n].sync, &out[n].gather, &out[n].step);
			layer_sync(cm, ctx, &expert, c.expert_params, hbm_Bps,
				   &out[n].sync, &out[n].gather, &out[n].step);
			n++;
		}
	}
	return n;
}

/* Limits on one stage in a split: its time per micro-batch and its sync. */
struct split_limits {
	double T, S;
};

/* A stage's running totals while it takes layers. */
struct stage_sum {
	double t, m, y;			/* time, memory, sync */
};

/* At most @n whole blocks, and no more than @room of them. */
static inline long blocks_within(long n, double room)
{
	if (!(room < (double)n))
		return n;
	return room < 1 ? 0 : (long)room;	/* truncation is floor here */
}

/*
 * Take blocks of one kind from @first to at most @last into a stage whose
 * totals so far are *@sum, within the limits and the stage's memory;
 * returns the last block taken (@first - 1 for none).
 */
static int take_blocks(const struct stage_rates *sr, enum costmodel_layer_type type,
		       int first, int last, const struct split_limits *lim,
		       struct stage_sum *sum)
{
	double dt = sr->time[type], dm = sr->mem[type], dy = sr->sync[type];
	long n = last - first + 1;

	if (n <= 0)
		return first - 1;
	/* The room left, guarding time and sync against rounding at the edge;
	 * the hottest loop of planning, hence no libm calls. */
	if (dt > 0)
		n = blocks_within(n, (lim->T - sum->t) / dt * (1 + 1e-12));
	if (dm > 0)
		n = blocks_within(n, (sr->cap - sum->m) / dm);
	if (dy > 0)
		n = blocks_within(n, (lim->S - sum->y) / dy * (1 + 1e-12));
	if (n <= 0)
		return first - 1;
	sum->t += n * dt;
	sum->m += n * dm;
	sum->y += n * dy;
	return first + (int)n - 1;
}

/*
 * The furthest layer a stage starting at @a can reach within @T and its
 * memory, not past @limit: layer kinds lie in runs (embedding, dense
 * blocks, MoE blocks, head), so each run is one division.
 */
static int stage_reach(const struct costmodel *cm, const struct stage_rates *sr,
		       int a, int limit, const struct split_limits *lim)
{
	int L = cm->nlayers, last_dense, e;
	struct stage_sum sum = { .t = sr->fixed_s };

	last_dense = cm->model.experts > 0 ? cm->model.dense_layers : L - 2;
	if (a == 0) {
		sum.t += sr->time[COSTMODEL_LAYER_EMBED];
		sum.m += sr->mem[COSTMODEL_LAYER_EMBED];
		sum.y += sr->sync[COSTMODEL_LAYER_EMBED];
		if (sum.t > lim->T || sum.m > sr->cap || sum.y > lim->S)
			return -1;
		a = 1;
	}
	e = a - 1;
	if (a <= last_dense) {
		e = take_blocks(sr, COSTMODEL_LAYER_BLOCK, a,
				limit < last_dense ? limit : last_dense, lim, &sum);
		if (e < (limit < last_dense ? limit : last_dense))
			return e;
	}
	if (e < L - 2 && e < limit) {
		int to = limit < L - 2 ? limit : L - 2;
		int got = take_blocks(sr, COSTMODEL_LAYER_ATTN, e + 1, to, lim, &sum);

		if (got < to)
			return got;
		e = got;
	}
	if (limit == L - 1 && e == L - 2 &&
	    sum.t + sr->time[COSTMODEL_LAYER_HEAD] <= lim->T &&
	    sum.m + sr->mem[COSTMODEL_LAYER_HEAD] <= sr->cap &&
	    sum.y + sr->sync[COSTMODEL_LAYER_HEAD] <= lim->S)
		e = L - 1;
	return e;
}

/*
 * Greedy feasibility of stage time @T: each stage in turn takes as many
 * layers as fit under T and its memory, keeping at least one block for
 * itself and for every later stage; the split exists iff the last stage
 * can hold what is left.  Fills @last[] when @last is not NULL.
 */
static bool split_fits(const struct costmodel *cm, const struct stage_rates *sr,
		       int d, const struct split_limits *lim, int *last)
{
	int L = cm->nlayers, a = 0;

	for (int s = 0; s < d; s++) {
		int limit = s == d - 1 ? L - 1 : (L - 2) - (d - 1 - s);
		int min_end = s == d - 1 ? L - 1 : (s == 0 ? 1 : a);
		int e;

		if (a > limit)
			return false;
		e = stage_reach(cm, &sr[s], a, limit, lim);
		if (e < min_end)
			return false;
		if (last)
			last[s] = e;
		a = e + 1;
	}
	return true;
}

#define SPLIT_PRECISION	1e-4	/* of the stage time: finer changes no split */
#define SWEEP_PRECISION	1e-3	/* while the sync limits are compared */

/*
 * The split of least stage time under sync limit @S, by bisection on the
 * stage time with the greedy test to @precision of the stage time.  Some
 * split fits under *@hi, which is left at the time of the split in @last;
 * none under *@lo, which is left at the largest time found not to fit.
 */
static void split_bisect(const struct costmodel *cm, const struct stage_rates *sr,
			 int d, double S, double precision, double *lo,
			 double *hi, int *last)
{
	struct split_limits lim = { .S = S };

	for (int it = 0; it < 60 && *hi - *lo > precision * *hi; it++) {
		lim.T = 0.5 * (*lo + *hi);
		if (split_fits(cm, sr, d, &lim, NULL))
			*hi = lim.T;
		else
			*lo = lim.T;
	}
	lim.T = *hi;
	split_fits(cm, sr, d, &lim, last);
}

/* A split's 1F1B iteration as the pricing sees it, the batch split evenly. */
struct split_cost {
	double slowest;			/* stage time per micro-batch */
	double slowest_sync;		/* stage gradient reduction */
	double exposed;			/* what of the collectives 1F1B leaves out */
	double iter;			/* the slowest stage once per micro-batch
					   but one, every stage once, what the
					   overlap does not hide, the step */
};

/* One stage of a split: the totals of its layers but its MoE blocks. */
struct stage_load {
	double t, f, y, g, step, params, mem;
	int nmoe;			/* MoE blocks, priced by the layout */
};

/* Add (@sign 1) or take (-1) one layer of @type to or from stage @ld. */
static void load_move(struct stage_load *ld, const struct stage_rates *sr,
		      enum costmodel_layer_type type, int sign)
{
	if (type == COSTMODEL_LAYER_ATTN && sr->nmoe) {
		ld->nmoe += sign;
		return;
	}
	ld->t += sign * sr->time[type];
	ld->f += sign * sr->fwd[type];
	ld->y += sign * sr->sync[type];
	ld->g += sign * sr->gather[type];
	ld->step += sign * sr->step[type];
	ld->params += sign * sr->params[type];
	ld->mem += sign * sr->mem[type];
}

/* The stages of the split @last, layer by layer. */
static void split_loads(const struct costmodel *cm, const struct stage_rates *sr,
			int d, const int *last, struct stage_load *ld)
{
	for (int s = 0, a = 0; s < d; s++) {
		ld[s] = (struct stage_load){ .t = sr[s].fixed_s, .f = sr[s].fixed_fwd_s };
		for (int l = a; l <= last[s]; l++)
			load_move(&ld[s], &sr[s], cm_layer_type(cm, l), 1);
		a = last[s] + 1;
	}
}

/* Whether layout @i of stage @sr holds the stage's blocks in memory. */
static bool layout_fits(const struct stage_rates *sr, const struct stage_load *ld,
			int i)
{
	return ld->mem + ld->nmoe * sr->moe[i].mem <= sr->cap;
}

/* Whether the stage fits in memory at all: in its leanest layout. */
static bool load_fits(const struct stage_rates *sr, const struct stage_load *ld)
{
	return sr->nmoe ? layout_fits(sr, ld, sr->nmoe - 1) : ld->mem <= sr->cap;
}

/*
 * The cheapest layout that holds the stage's blocks, else the leanest;
 * -1 for a stage of no MoE blocks.
 */
static int cheapest_layout(const struct stage_rates *sr, const struct stage_load *ld)
{
	if (!ld->nmoe)
		return -1;
	for (int i = 0; i < sr->nmoe - 1; i++)
		if (layout_fits(sr, ld, i))
			return i;
	return sr->nmoe - 1;
}

/* fmax() without the call: the estimate runs for every move of the split. */
static inline double max2(double a, double b)
{
	return a > b ? a : b;
}

/* One stage's totals in its layout, as the estimate takes them. */
struct stage_total {
	double t, f, y, g, step;
	double keep;			/* of its own last pass that hides its sync */
};

/* Stage @ld's totals with its MoE blocks in layout @layout. */
static void stage_total(const struct stage_rates *sr, const struct stage_load *ld,
			int layout, const struct split_ctx *ctx,
			struct stage_total *tt)
{
	double params = ld->params;

	tt->t = ld->t;
	tt->f = ld->f;
	tt->y = ld->y;
	tt->g = ld->g;
	tt->step = ld->step;
	if (ld->nmoe) {
		const struct tiling *r = &sr->moe[layout];

		tt->t += ld->nmoe * r->time;
		tt->f += ld->nmoe * r->fwd;
		tt->y += ld->nmoe * r->sync;
		tt->g += ld->nmoe * r->gather;
		tt->step += ld->nmoe * r->step;
		params += ld->nmoe * r->params;
	}
	/* (1 - 1/buckets) of the stage's own last pass hides its collectives */
	tt->keep = 1 - 1 / max2(1, ceil(params / ctx->bucket));
}

/*
 * The estimate's running state over the stages so far: a move of the
 * split changes a run of stages, and the estimate resumes at its first.
 */
struct estimate_scan {
	double tmax, tsum, ymax, exposed, step_max;
	double bwd_before, fwd_before;	/* the passes that hide later syncs */
};

static void scan_stage(struct estimate_scan *sc, const struct stage_total *tt,
		       const struct split_ctx *ctx)
{
	double y = tt->y, g = tt->g;

	sc->ymax = max2(sc->ymax, y);
	/* what the stage's own last pass and the stages before it leave */
	if (ctx->overlap_grad_reduce)
		y = max2(0, y - tt->keep * (tt->t - tt->f) - sc->bwd_before);
	if (ctx->overlap_param_gather)
		g = max2(0, g - tt->keep * tt->f - sc->fwd_before);
	sc->bwd_before += tt->t - tt->f;
	sc->fwd_before += tt->f;
	sc->tmax = max2(sc->tmax, tt->t);
	sc->tsum += tt->t;
	sc->exposed = max2(sc->exposed, y);
	sc->step_max = max2(sc->step_max, tt->step + g);
}

/* before[u] for every stage u after @from: the state after the stages before u. */
static void scan_prefixes(struct estimate_scan *before, const struct stage_total *tt,
			  int from, int d, const struct split_ctx *ctx)
{
	for (int u = from + 1; u < d; u++) {
		before[u] = before[u - 1];
		scan_stage(&before[u], &tt[u - 1], ctx);
	}
}

/* The iteration of stages @from on in @tt, after the stages in *@before. */
static struct split_cost scan_estimate(const struct estimate_scan *before,
				       const struct stage_total *tt, int from,
				       int d, const struct split_ctx *ctx)
{
	struct estimate_scan sc = *before;

	for (int s = from; s < d; s++)
		scan_stage(&sc, &tt[s], ctx);
	return (struct split_cost){
		.slowest = sc.tmax,
		.slowest_sync = sc.ymax,
		.exposed = sc.exposed,
		.iter = (ctx->micro_batches - 1) * sc.tmax + sc.tsum + sc.exposed +
			sc.step_max,
	};
}

/*
 * The split @last's iteration as the pricing sees it, with each MoE
 * stage's expert layout chosen: first the cheapest that fits, then, stage
 * by stage, whichever fitting layout the estimate finds fastest given the
 * others (a layout's sync weighs what the overlap leaves of it, which no
 * per-layer cost knows).  The layouts go to @layout when it is not NULL:
 * the cheapest for a stage of no MoE blocks, -1 where none fits.
 */
static struct split_cost split_estimate(const struct costmodel *cm,
					const struct stage_rates *sr, int d,
					const int *last, const struct split_ctx *ctx,
					int *layout)
{
	struct stage_load ld[COSTMODEL_MAX_DEPTH];
	/* zeroed only for -Wmaybe-uninitialized: every stage is set below */
	struct stage_total tt[COSTMODEL_MAX_DEPTH] = { 0 };
	struct estimate_scan before = { 0 };	/* the stages already chosen */
	int choice[COSTMODEL_MAX_DEPTH] = { 0 };
	struct split_cost best;

	split_loads(cm, sr, d, last, ld);
	for (int s = 0; s < d; s++) {
		choice[s] = cheapest_layout(&sr[s], &ld[s]);
		stage_total(&sr[s], &ld[s], choice[s], ctx, &tt[s]);
	}
	best = scan_estimate(&before, tt, 0, d, ctx);
	for (int s = 0; layout && s < d; s++) {
		struct stage_total kept_total = tt[s];
		int kept = choice[s];

		for (int i = kept + 1; ld[s].nmoe && i < sr[s].nmoe; i++) {
			struct split_cost c;

			if (!layout_fits(&sr[s], &ld[s], i))
				continue;
			stage_total(&sr[s], &ld[s], i, ctx, &tt[s]);
			c = scan_estimate(&before, tt, s, d, ctx);
			if (c.iter < best.iter) {
				best = c;
				kept = i;
				kept_total = tt[s];
			}
		}
		choice[s] = kept;
		tt[s] = kept_total;
		scan_stage(&before, &tt[s], ctx);
	}
	if (layout)
		for (int s = 0; s < d; s++)
			layout[s] = !ld[s].nmoe ? 0 :
				    layout_fits(&sr[s], &ld[s], choice[s]) ? choice[s] : -1;
	return best;
}

#define SYNC_SHARE	0.01	/* sync this share of the iteration matters */
#define SYNC_STEP	0.9	/* each tighter sync limit, of the slowest sync */
#define SYNC_STEPS	8

/*
 * Beyond the min-max split: a stage's gradient all-reduce grows with its
 * layers, not its speed, so the split that balances compute piles the
 * sync onto the fast stages.  Where the sync is a real share of the
 * iteration, split again under tighter limits on each stage's sync and
 * keep whichever split the estimate finds fastest; @last holds the
 * min-max split on entry, @hi a stage time every split fits under.
 */
static void split_balance_sync(const struct costmodel *cm,
			       const struct stage_rates *sr, int d, double hi,
			       const struct split_ctx *ctx, int *last)
{
	struct split_cost first = split_estimate(cm, sr, d, last, ctx, NULL);
	double best = first.iter;
	/*
	 * The least stage time only grows as the sync limit tightens, so
	 * each search starts where the last one ended: below the min-max
	 * split's time (rounded down by the bisection's precision) nothing fits.
	 */
	double lo = first.slowest * (1 - SPLIT_PRECISION);
	/* the best limit's search, bisected to the sweep's precision */
	double best_S = 0, best_lo = 0, best_hi = 0;
	int trial[COSTMODEL_MAX_DEPTH], worse = 0;

	if (first.exposed <= SYNC_SHARE * first.iter)
		return;
	for (int k = 1; k <= SYNC_STEPS && worse < 2; k++) {
		struct split_limits lim = { .S = first.slowest_sync * pow(SYNC_STEP, k) };
		double iter;

		/* gallop up from @lo to a stage time that fits, then bisect */
		for (lim.T = lo * 1.0625; lim.T < hi && !split_fits(cm, sr, d, &lim, NULL);
		     lim.T *= 1.25)
			lo = lim.T;
		if (lim.T >= hi) {
			lim.T = hi;
			if (!split_fits(cm, sr, d, &lim, NULL))
				break;	/* tighter limits fit no better */
		}
		split_bisect(cm, sr, d, lim.S, SWEEP_PRECISION, &lo, &lim.T, trial);
		iter = split_estimate(cm, sr, d, trial, ctx, NULL).iter;
		if (iter < best) {
			best = iter;
			memcpy(last, trial, d * sizeof(*last));
			best_S = lim.S;
			best_lo = lo;
			best_hi = lim.T;
			worse = 0;
		} else {
			worse++;	/* two steps past the best: the rest are worse */
		}
	}
	if (best_S > 0) {
		/* the chosen limit's split to the full precision */
		split_bisect(cm, sr, d, best_S, SPLIT_PRECISION, &best_lo, &best_hi, trial);
		if (split_estimate(cm, sr, d, trial, ctx, NULL).iter <= best)
			memcpy(last, trial, d * sizeof(*last));
	}
}

#define REFINE_ROUNDS	64	/* a bound; a round that moves nothing ends it */

/*
 * Shift the boundaries after stages @s to @e of the split @last by @step
 * (-1: each of those stages hands its last layer on, stage @e + 1 gains
 * one; +1: the reverse), updating @ld and @choice.  False, with nothing
 * changed, where a stage would be left without its block or a stage
 * would not fit in memory.
 */
static bool split_shift(const struct costmodel *cm, const struct stage_rates *sr,
			int d, int s, int e, int step, int *last,
			struct stage_load *ld, int *choice)
{
	int L = cm->nlayers, first = s ? last[s - 1] + 1 : 1;
	struct stage_load was[COSTMODEL_MAX_DEPTH];

	/* stage s keeps a block (stage 0 the embedding and one), stage
	 * e + 1 one; the last stage keeps its head and a block */
	if (last[s] + step < first || last[e] + step >= last[e + 1] ||
	    (e + 1 == d - 1 && last[e] + step > L - 3))
		return false;
	memcpy(&was[s], &ld[s], (e - s + 2) * sizeof(*ld));
	for (int u = s; u <= e; u++) {
		int l = step < 0 ? last[u] : last[u] + 1;
		int from = step < 0 ? u : u + 1, to = step < 0 ? u + 1 : u;
		enum costmodel_layer_type type = cm_layer_type(cm, l);

		load_move(&ld[from], &sr[from], type, -1);
		load_move(&ld[to], &sr[to], type, 1);
	}
	for (int u = s; u <= e + 1; u++) {
		if (!load_fits(&sr[u], &ld[u])) {
			memcpy(&ld[s], &was[s], (e - s + 2) * sizeof(*ld));
			return false;
		}
	}
	for (int u = s; u <= e; u++)
		last[u] += step;
	for (int u = s; u <= e + 1; u++)
		choice[u] = cheapest_layout(&sr[u], &ld[u]);
	return true;
}

/* The stage of the longest time per micro-batch. */
static int slowest_stage(const struct stage_total *tt, int d)
{
	int k = 0;

	for (int s = 1; s < d; s++)
		if (tt[s].t > tt[k].t)
			k = s;
	return k;
}

/*
 * The searches above choose by the slowest stage and by the sync; the
 * iteration also counts every stage once (the 1F1B fill and drain) and
 * the layouts' sync under the overlap, and a stage whose blocks need a
 * slower layout to fit is slower than the split assumed.  Take one layer
 * out of the slowest stage at a time, handed down the stages after it or
 * up the stages before it as far as any of them (a run of boundaries
 * shifted by one), wherever the estimate says the iteration gets shorter.
 */
static void split_refine(const struct costmodel *cm, const struct stage_rates *sr,
			 int d, const struct split_ctx *ctx, int *last)
{
	struct stage_load ld[COSTMODEL_MAX_DEPTH], was[COSTMODEL_MAX_DEPTH];
	struct stage_total tt[COSTMODEL_MAX_DEPTH], was_total[COSTMODEL_MAX_DEPTH];
	/* before[s]: the estimate's state after the stages before s */
	struct estimate_scan before[COSTMODEL_MAX_DEPTH] = { 0 };
	int choice[COSTMODEL_MAX_DEPTH] = { 0 }, was_choice[COSTMODEL_MAX_DEPTH];
	double best;

	split_loads(cm, sr, d, last, ld);
	for (int s = 0; s < d; s++) {
		choice[s] = cheapest_layout(&sr[s], &ld[s]);
		stage_total(&sr[s], &ld[s], choice[s], ctx, &tt[s]);
	}
	scan_prefixes(before, tt, 0, d, ctx);
	best = scan_estimate(&before[0], tt, 0, d, ctx).iter;
	for (int round = 0; round < REFINE_ROUNDS; round++) {
		bool moved = false;
		int k = slowest_stage(tt, d);

		for (int s = 0; s < d - 1; s++) {
			for (int e = s; e < d - 1; e++) {
				for (int step = -1; step <= 1; step += 2) {
					int n = e - s + 2;	/* stages s to e + 1 move */
					double iter;

					/* runs out of the slowest stage only:
					 * down from it, or up from it */
					if (step < 0 ? s != k : e + 1 != k)
						continue;
					memcpy(&was[s], &ld[s], n * sizeof(*ld));
					memcpy(&was_choice[s], &choice[s], n * sizeof(*choice));
					if (!split_shift(cm, sr, d, s, e, step, last, ld, choice))
						continue;
					memcpy(&was_total[s], &tt[s], n * sizeof(*tt));
					for (int u = s; u <= e + 1; u++)
						stage_total(&sr[u], &ld[u], choice[u], ctx, &tt[u]);
					iter = scan_estimate(&before[s], tt, s, d, ctx).iter;
					if (iter < best * (1 - 1e-9)) {
						best = iter;
						moved = true;
						scan_prefixes(before, tt, s, d, ctx);
						continue;
					}
					for (int u = s; u <= e; u++)
						last[u] -= step;
					memcpy(&ld[s], &was[s], n * sizeof(*ld));
					memcpy(&choice[s], &was_choice[s], n * sizeof(*choice));
					memcpy(&tt[s], &was_total[s], n * sizeof(*tt));
				}
			}
		}
		if (!moved)
			break;
	}
}

static void split_uniform(const struct costmodel *cm, int d, int *last)
{
	int n = cm->nlayers, base = n / d, longer = n % d;
	int l = -1;

	/*
	 * Sailor's rule (its get_stages()): every layer of the list, the
	 * embedding and head included, dealt evenly, the remainder to the
	 * last stages "to alleviate memory pressure".
	 */
	for (int s = 0; s < d; s++) {
		l += base + (s >= d - longer);
		last[s] = l;
	}
}

static int uniform_fits(const struct costmodel *cm, const struct stage_rates *sr,
			int d, const int *last)
{
	int a = 0;

	for (int s = 0; s < d; s++) {
		double m = 0;

		for (int l = a; l <= last[s]; l++)
			m += sr[s].mem[cm_layer_type(cm, l)];
		if (m > sr[s].cap)
			return 0;
		a = last[s] + 1;
	}
	return 1;
}

/* Whether tiling @a is no better than @b in time, sync, step and memory. */
static bool tiling_dominated(const struct tiling *a, const struct tiling *b)
{
	return b->time <= a->time && b->sync <= a->sync && b->mem <= a->mem &&
	       b->gather + b->step <= a->gather + a->step &&
	       (b->time < a->time || b->sync < a->sync || b->mem < a->mem ||
		b->gather + b->step < a->gather + a->step);
}

/*
 * The tilings of @tiles a stage may end with into @sr->moe: those no other
 * dominates, cheapest over an iteration (@sync_weight) first.
 */
static void stage_layouts(const struct tiling *tiles, int ntiles,
			  double sync_weight, struct stage_rates *sr)
{
	bool out[MAX_TILINGS] = { false };

	for (int i = 0; i < ntiles; i++)
		for (int j = 0; j < ntiles && !out[i]; j++)
			out[i] = tiling_dominated(&tiles[i], &tiles[j]);
	sr->nmoe = 0;
	while (sr->nmoe < MAX_STAGE_LAYOUTS) {
		double cheapest = DBL_MAX;
		int next = -1;

		for (int i = 0; i < ntiles; i++) {
			double cost = tiles[i].time + sync_weight * tiles[i].sync;

			if (!out[i] && cost < cheapest) {
				cheapest = cost;
				next = i;
			}
		}
		if (next < 0)
			break;
		out[next] = true;
		sr->moe[sr->nmoe++] = tiles[next];
	}
}

/*
 * A template's stage rates and its split before the refinement: the
 * refined fill of a (micro-batch, recomputation) choice starts from what
 * the first pass found for it.
 */
struct split_state {
	struct stage_rates sr[COSTMODEL_MAX_DEPTH];
	int last[COSTMODEL_MAX_DEPTH];
};

/*
 * Whether stages @a and @b of one template cost the same per layer: one
 * GPU type and TP degree on links alike.  The link to the next stage is
 * left out (only the stage's fixed p2p time reads it), and the
 * micro-batches a stage holds in flight only scale its activations.
 */
static bool same_stage_kind(const struct costmodel_stage *a,
			    const struct cm_stage_links *la,
			    const struct costmodel_stage *b,
			    const struct cm_stage_links *lb)
{
	return a->gpu == b->gpu && a->tp == b->tp &&
	       la->net_Bps == lb->net_Bps && la->intra_Bps == lb->intra_Bps &&
	       la->intra_step_s == lb->intra_step_s &&
	       la->tp_comm_scale == lb->tp_comm_scale &&
	       la->nodes == lb->nodes && la->local_min == lb->local_min &&
	       la->gpus_per_node_min == lb->gpus_per_node_min;
}

/*
 * The rates of @t's stages for micro-batch @mbs with @micro_batches per
 * replica expected (for the in-flight counts), and the split of its
 * layers that balances them, into @state.
 */
static int template_split(const struct costmodel *cm,
			  const struct costmodel_cluster *cl,
			  const struct costmodel_template *t, int mbs,
			  const struct split_ctx *ctx,
			  const struct costmodel_fill_opts *opts,
			  struct split_state *state)
{
	struct cm_stage_links lk[COSTMODEL_MAX_DEPTH];
	struct stage_rates *sr = state->sr;
	struct tiling tiles[COSTMODEL_MAX_DEPTH][MAX_TILINGS];
	int ntiles[COSTMODEL_MAX_DEPTH] = { 0 };
	/* like[s]: the first stage of stage s's kind, whose rates it takes */
	int like[COSTMODEL_MAX_DEPTH];
	/* what a dense layer's memory is made of, and the transient of a
	 * recomputed one: set for the first stage of each kind, which the
	 * others take them from */
	double state_bytes[COSTMODEL_MAX_DEPTH][COSTMODEL_NUM_LAYER_TYPES];
	double act_bytes[COSTMODEL_MAX_DEPTH][COSTMODEL_NUM_LAYER_TYPES];
	double dense_transient[COSTMODEL_MAX_DEPTH] = { 0 };
	int d = t->nstages, *last = state->last;
	bool moe = cm->model.experts > 0;
	/* 1F1B runs the slowest stage once per micro-batch but one, the sync once */
	double sync_weight = 1.0 / (ctx->micro_batches > 2 ? ctx->micro_batches - 1 : 1);

	if (d > cm->model.blocks)
		return ar_seterr(-AR_EINFEASIBLE, "%d stages for %d blocks",
				 d, cm->model.blocks);
	cm_template_links(cm, cl, t, lk);
	for (int s = 0; s < d; s++) {
		const struct costmodel_stage *st = &t->stages[s];
		int inflight = d - s;
		double cheapest = DBL_MAX, leanest = DBL_MAX, transient;
		double hbm_Bps = cm->gpus[st->gpu].hbm_GBps * 1e9 * HBM_EFFICIENCY;
		struct cm_group group = split_group(&lk[s], ctx, t->replicas);
		int ci = -1, li = -1;

		memset(&sr[s], 0, sizeof(sr[s]));
		if (lk[s].p2p_Bps > 0) {
			sr[s].fixed_fwd_s = (double)mbs / lk[s].p2p_shards *
					    cm->model.seq_len * cm->model.hidden * 2.0 /
					    lk[s].p2p_Bps + lk[s].p2p_lat;
			sr[s].fixed_s = 2 * sr[s].fixed_fwd_s;
		}
		like[s] = s;
		for (int j = 0; j < s && like[s] == s; j++)
			if (same_stage_kind(&t->stages[j], &lk[j], st, &lk[s]))
				like[s] = j;
		for (int type = 0; type < COSTMODEL_NUM_LAYER_TYPES; type++) {
			struct cm_layer_cost c;
			int j = like[s];

			/* MoE blocks are priced per tiling below. */
			if (type == COSTMODEL_LAYER_EXPERT || type == COSTMODEL_LAYER_ATTN ||
			    (type == COSTMODEL_LAYER_BLOCK && moe &&
			     cm->model.dense_layers == 0))
				continue;
			if (j < s) {
				sr[s].time[type] = sr[j].time[type];
				sr[s].fwd[type] = sr[j].fwd[type];
				sr[s].params[type] = sr[j].params[type];
				sr[s].sync[type] = sr[j].sync[type];
				sr[s].gather[type] = sr[j].gather[type];
				sr[s].step[type] = sr[j].step[type];
				sr[s].mem[type] = state_bytes[j][type] +
						  inflight * act_bytes[j][type];
				continue;
			}
			if (cm_layer_cost(cm, st->gpu, st->tp, mbs, type, 1, st->tp,
					  ctx->recompute, &lk[s], &c) < 0)
				return -AR_ENOPROFILE;
			sr[s].time[type] = c.time_s;
			sr[s].fwd[type] = c.fwd_s;
			sr[s].params[type] = c.params;
			state_bytes[s][type] = cm_state_bytes(cm, c.params,
							      ctx->dist ? group.n : 1);
			act_bytes[s][type] = c.act_bytes;
			sr[s].mem[type] = state_bytes[s][type] + inflight * c.act_bytes;
			layer_sync(cm, ctx, &group, c.params, hbm_Bps, &sr[s].sync[type],
				   &sr[s].gather[type], &sr[s].step[type]);
			if (ctx->recompute != COSTMODEL_RECOMPUTE_NONE)
				dense_transient[s] = fmax(dense_transient[s],
							  c.act_full_bytes - c.act_bytes);
		}
		transient = dense_transient[like[s]];
		if (moe && like[s] < s) {
			ntiles[s] = ntiles[like[s]];
			for (int i = 0; i < ntiles[s]; i++) {
				tiles[s][i] = tiles[like[s]][i];
				tiles[s][i].mem = tiles[s][i].state +
						  inflight * tiles[s][i].act;
			}
		} else if (moe) {
			ntiles[s] = stage_tilings(cm, st->gpu, st->tp,
						  st->tp * t->replicas, mbs, inflight,
						  &lk[s], ctx, t->replicas,
						  opts->no_expert_tiling, tiles[s]);
		}
		if (moe) {
			if (!ntiles[s])
				return -AR_ENOPROFILE;
			for (int i = 0; i < ntiles[s]; i++) {
				double cost = tiles[s][i].time + sync_weight * tiles[s][i].sync;

				if (cost < cheapest) {
					cheapest = cost;
					ci = i;
				}
				if (tiles[s][i].mem < leanest) {
					leanest = tiles[s][i].mem;
					li = i;
				}
			}
			stage_layouts(tiles[s], ntiles[s], sync_weight, &sr[s]);
			/*
			 * For the bounds and the memory checks outside the
			 * split: the cheapest layout's time and sync, the
			 * leanest's memory.  The tiling is chosen once the
			 * split is known.
			 */
			sr[s].time[COSTMODEL_LAYER_ATTN] = tiles[s][ci].time;
			sr[s].fwd[COSTMODEL_LAYER_ATTN] = tiles[s][ci].fwd;
			sr[s].mem[COSTMODEL_LAYER_ATTN] = tiles[s][li].mem;
			sr[s].sync[COSTMODEL_LAYER_ATTN] = tiles[s][ci].sync;
			sr[s].gather[COSTMODEL_LAYER_ATTN] = tiles[s][ci].gather;
			sr[s].step[COSTMODEL_LAYER_ATTN] = tiles[s][ci].step;
			sr[s].params[COSTMODEL_LAYER_ATTN] = tiles[s][ci].params;
			if (ctx->recompute != COSTMODEL_RECOMPUTE_NONE) {
				struct cm_layer_cost c;

				if (cm_layer_cost(cm, st->gpu, st->tp, mbs,
						  COSTMODEL_LAYER_ATTN, tiles[s][li].ep,
						  tiles[s][li].etp, ctx->recompute,
						  &lk[s], &c) == 0)
					transient = fmax(transient,
							 c.act_full_bytes - c.act_bytes);
			}
		}
		/* A recomputed layer's activations live while it runs backward. */
		sr[s].cap = cm->gpus[st->gpu].memory_gib * GIB - cm->overhead_bytes -
			    transient;
	}

	if (opts->uniform_layers) {
		split_uniform(cm, d, last);
		if (!uniform_fits(cm, sr, d, last))
			return ar_seterr(-AR_EINFEASIBLE, "an even layer split does not fit in memory");
	} else {
		double hi = 0;

		for (int s = 0; s < d; s++) {
			double most = 0;

			for (int type = 0; type < COSTMODEL_NUM_LAYER_TYPES; type++)
				most = fmax(most, sr[s].time[type]);
			hi = fmax(hi, sr[s].fixed_s + most * cm->nlayers);
		}
		struct split_limits all = { .T = hi, .S = DBL_MAX };
		double lo = 0, top = hi;

		if (!split_fits(cm, sr, d, &all, NULL)) {
			return ar_seterr(-AR_EINFEASIBLE, "the layers do not fit the memory of %d stage%s",
					 d, d == 1 ? "" : "s");
		}
		split_bisect(cm, sr, d, DBL_MAX, SPLIT_PRECISION, &lo, &top, last);
		split_balance_sync(cm, sr, d, hi, ctx, last);
	}
	return 0;
}

/*
 * Refine @state's split where @ctx says, tile @t's MoE stages and write
 * both to its stages.  Sets *@tight when some stage could not take one
 * more block for its memory: there more recomputation may pay.
 */
static int template_finish(const struct costmodel *cm,
			   struct costmodel_template *t,
			   const struct split_ctx *ctx,
			   const struct costmodel_fill_opts *opts,
			   struct split_state *state, bool *tight)
{
	const struct stage_rates *sr = state->sr;
	int d = t->nstages, *last = state->last, layout[COSTMODEL_MAX_DEPTH];
	bool moe = cm->model.experts > 0;

	if (ctx->refine && !opts->uniform_layers)
		split_refine(cm, sr, d, ctx, last);
	if (moe)
		split_estimate(cm, sr, d, last, ctx, layout);
	for (int s = 0, a = 0; s < d; s++) {
		struct costmodel_stage *st = &t->stages[s];
		double used = 0;
		double block = fmax(sr[s].mem[COSTMODEL_LAYER_BLOCK],
				    sr[s].mem[COSTMODEL_LAYER_ATTN]);

		st->first_layer = a;
		st->last_layer = last[s];
		a = last[s] + 1;
		for (int l = st->first_layer; l <= st->last_layer; l++)
			used += sr[s].mem[cm_layer_type(cm, l)];
		if (used + block > sr[s].cap)
			*tight = true;
		st->ep = 1;
		st->etp = st->tp;
		st->edp = t->replicas;
		if (!moe)
			continue;
		if (layout[s] < 0)
			return ar_seterr(-AR_EINFEASIBLE, "no expert layout fits stage %d", s);
		st->ep = sr[s].moe[layout[s]].ep;
		st->etp = sr[s].moe[layout[s]].etp;
		st->edp = st->tp * t->replicas / (st->ep * st->etp);
	}
	return 0;
}

/*
 * Split, tile and price @plan at micro-batch @mbs under its recomputation
 * and optimizer options, each template's split in @states; *@tight as
 * template_finish() says.  With @refine the split is refined, from the
 * states the unrefined fill of the same choice left.
 */
static int plan_fill_at(const struct costmodel *cm,
			const struct costmodel_cluster *cl,
			struct costmodel_plan *plan, int mbs, bool refine,
			const struct costmodel_fill_opts *opts,
			struct split_state *states, bool *tight)
{
	struct split_ctx ctx = {
		.across_templates = plan->ntemplates > 1,
		.recompute = plan->recompute,
		.dist = plan->distributed_optimizer,
		.overlap_grad_reduce = plan->overlap_grad_reduce,
		.overlap_param_gather = plan->overlap_param_gather,
		.refine = refine,
	};
	int rc;

	for (int j = 0; j < plan->ntemplates; j++)
		ctx.pipelines += plan->templates[j].replicas;
	ctx.micro_batches = (plan->global_batch + mbs * ctx.pipelines - 1) /
			    (mbs * ctx.pipelines);
	ctx.bucket = cm_bucket_params(cm, ctx.pipelines);
	plan->micro_batch = mbs;
	*tight = false;
	for (int j = 0; j < plan->ntemplates; j++) {
		if (!refine) {
			rc = template_split(cm, cl, &plan->templates[j], mbs, &ctx,
					    opts, &states[j]);
			if (rc < 0)
				return rc;
		}
		rc = template_finish(cm, &plan->templates[j], &ctx, opts,
				     &states[j], tight);
		if (rc < 0)
			return rc;
		plan->templates[j].micro_batches = 0;
	}
	return costmodel_plan_price(cm, cl, plan);
}

/*
 * Try every micro-batch size and recomputation mode on @plan; keep the
 * fastest in @plan.  Recomputation only buys memory, so a mode is tried
 * only where the cheaper one did not fit or was short of memory somewhere
 * (a stage could not take one more block).  The distributed optimizer is
 * on unless @opts turns it off: it moves 6 bytes a parameter where the
 * all-reduce moves 8, steps over 1/DP of the state and holds 12/DP of it,
 * so it is never slower here.
 *
 * The split's refinement (split_refine()) costs as much as the rest of a
 * split, so it runs only on the REFINED fastest choices of the first pass,
 * from the rates and splits that pass found for them.
 */
#define REFINED	2

static int plan_fill_best(const struct costmodel *cm,
			  const struct costmodel_cluster *cl,
			  struct costmodel_plan *plan,
			  const struct costmodel_fill_opts *opts)
{
	struct costmodel_plan trial = { 0 }, best = { 0 };
	/* the fastest choices of the first pass, fastest first, and their splits */
	struct {
		int mbs, recompute;
		double samples_per_s;
		struct split_state *states;
	} top[REFINED] = { 0 };
	struct split_state *buffers, *states;	/* the trial's */
	char why[512] = "";
	int rc = 0, first_rc = 0, nt = plan->ntemplates;
	bool found = false;

	/* The split and tiling assume one TP group a stage and replica. */
	for (int j = 0; j < plan->ntemplates; j++)
		if (costmodel_template_slots(&plan->templates[j]) !=
		    plan->templates[j].nstages)
			return ar_seterr(-AR_EINVAL, "template %d has a stage with data parallelism of its own (dp > 1), which the fill does not complete",
					 j);
	/* (a plan of no templates fails in the pricing, not here) */
	buffers = malloc((REFINED + 1) * (nt ? nt : 1) * sizeof(*buffers));
	if (!buffers)
		return -ENOMEM;
	for (int k = 0; k < REFINED; k++)
		top[k].states = &buffers[k * nt];
	states = &buffers[REFINED * nt];
	plan->distributed_optimizer = !opts->no_distributed_optimizer;
	for (int mbs = 1; mbs <= COSTMODEL_MAX_MBS; mbs *= 2) {
		if (opts->fixed_micro_batch > 0 && mbs != opts->fixed_micro_batch)
			continue;
		if (mbs > plan->global_batch)
			break;
		for (int r = 0; r < COSTMODEL_NUM_RECOMPUTE; r++) {
			bool tight = false;

			if (opts->recompute_modes && !(opts->recompute_modes & (1u << r)))
				continue;
			rc = costmodel_plan_copy(&trial, plan);
			if (rc < 0)
				goto out;
			trial.recompute = (enum costmodel_recompute)r;
			rc = plan_fill_at(cm, cl, &trial, mbs, false, opts, states,
					  &tight);
			if (rc == -ENOMEM)
				goto out;
			if (rc < 0) {
				if (!first_rc) {
					first_rc = rc;
					snprintf(why, sizeof(why), "%s", ar_errmsg());
				}
				continue;
			}
			for (int k = 0; k < REFINED; k++) {
				if (trial.predicted.samples_per_s > top[k].samples_per_s) {
					/* the trial's splits move in, the
					 * dropped choice's buffers out */
					struct split_state *dropped = top[REFINED - 1].states;

					memmove(&top[k + 1], &top[k],
						(REFINED - 1 - k) * sizeof(top[0]));
					top[k].mbs = mbs;
					top[k].recompute = r;
					top[k].samples_per_s = trial.predicted.samples_per_s;
					top[k].states = states;
					states = dropped;
					break;
				}
			}
			if (!found || trial.predicted.samples_per_s >
				      best.predicted.samples_per_s) {
				rc = costmodel_plan_copy(&best, &trial);
				if (rc < 0)
					goto out;
				found = true;
			}
			if (!tight)
				break;	/* more recomputation buys nothing here */
		}
	}
	if (!found) {
		rc = ar_seterr(first_rc ? first_rc : -AR_EINFEASIBLE, "%s",
			       why[0] ? why : "no micro-batch size fits");
		goto out;
	}
	for (int k = 0; k < REFINED && top[k].mbs; k++) {
		bool tight;

		rc = costmodel_plan_copy(&trial, plan);
		if (rc < 0)
			goto out;
		trial.recompute = (enum costmodel_recompute)top[k].recompute;
		rc = plan_fill_at(cm, cl, &trial, top[k].mbs, true, opts,
				  top[k].states, &tight);
		if (rc == -ENOMEM)
			goto out;
		if (rc == 0 && trial.predicted.samples_per_s >
			       best.predicted.samples_per_s) {
			rc = costmodel_plan_copy(&best, &trial);
			if (rc < 0)
				goto out;
		}
	}
	rc = costmodel_plan_copy(plan, &best);
out:
	free(buffers);
	costmodel_plan_copy(&trial, &(struct costmodel_plan){ 0 });
	costmodel_plan_copy(&best, &(struct costmodel_plan){ 0 });
	return rc;
}

/*
 * @trial's last template is placed by stage and filled; @pool is the pool
 * before it was placed, @newpool after.  Price the same split placed by
 * replica, and only where that alone is faster, fill it afresh: one
 * pricing where the stage order holds, a second fill where it may not.
 * The faster plan ends in @trial and its pool in @newpool.
 */
static int try_by_replica(const struct costmodel *cm,
			  const struct costmodel_cluster *cl,
			  const struct costmodel_pool *pool,
			  const struct costmodel_shape *shape,
			  const struct costmodel_fill_opts *opts,
			  struct costmodel_plan *trial,
			  struct costmodel_pool *newpool)
{
	struct costmodel_plan *alt = costmodel_plan_clone(trial);
	struct costmodel_pool altpool = { 0 };
	struct costmodel_template *t;
	int rc;

	if (!alt || costmodel_pool_copy(&altpool, pool) < 0) {
		rc = -ENOMEM;
		goto out;
	}
	t = &alt->templates[alt->ntemplates - 1];
	rc = place_template(cl, &altpool, shape, COSTMODEL_PLACE_BY_REPLICA, t);
	if (rc < 0) {
		rc = ar_seterr(rc, "the placement by replica disagrees with the packing count");
		goto out;
	}
	for (int j = 0; j < alt->ntemplates; j++)
		alt->templates[j].micro_batches = 0;
	/* The split fits either way: memory does not depend on the nodes. */
	if (costmodel_plan_price(cm, cl, alt) < 0 ||
	    alt->predicted.samples_per_s <= trial->predicted.samples_per_s) {
		rc = 0;
		goto out;
	}
	rc = plan_fill_best(cm, cl, alt, opts);
	if (rc == 0 && alt->predicted.samples_per_s > trial->predicted.samples_per_s) {
		if ((rc = costmodel_plan_copy(trial, alt)) == 0)
			rc = costmodel_pool_copy(newpool, &altpool);
	} else if (rc != -ENOMEM) {
		rc = 0;		/* the plan placed by stage stands */
	}
out:
	costmodel_plan_free(alt);
	costmodel_pool_fini(&altpool);
	return rc;
}

int costmodel_fill_add(const struct costmodel *cm,
		       const struct costmodel_cluster *cl,
		       struct costmodel_pool *pool,
		       struct costmodel_plan *plan,
		       const struct costmodel_shape *shape,
		       const struct costmodel_fill_opts *opts)
{
	static const struct costmodel_fill_opts defaults;
	struct costmodel_pool newpool = { 0 };
	struct costmodel_plan *trial = NULL;
	struct costmodel_template *t, *grown;
	int r, rc;

	if (!opts)
		opts = &defaults;
	if (shape->depth < 1 || shape->depth > COSTMODEL_MAX_DEPTH)
		return ar_seterr(-AR_EINVAL, "depth %d is not 1 to %d",
				 shape->depth, COSTMODEL_MAX_DEPTH);
	if (shape->depth > cm->model.blocks)
		return ar_seterr(-AR_EINFEASIBLE, "depth %d exceeds the model's %d blocks",
				 shape->depth, cm->model.blocks);
	for (int s = 0; s < shape->depth; s++) {
		int g = shape->gpu[s], tp = shape->tp[s];

		if (g < 0 || g >= cm->ngpus)
			return ar_seterr(-AR_EINVAL, "stage %d: bad GPU type %d", s, g);
		if (cm_log2(tp) < 0 || tp > COSTMODEL_MAX_TP)
			return ar_seterr(-AR_EINVAL, "stage %d: tp %d is not 1, 2, 4 or 8",
					 s, tp);
		if (tp > costmodel_pool_largest_free(pool, g))
			return ar_seterr(-AR_EINFEASIBLE, "stage %d: no %s node has %d free GPUs",
					 s, cm->gpus[g].name, tp);
	}
	r = costmodel_fill_replicas(cm, pool, shape);
	if (opts->max_replicas > 0 && r > opts->max_replicas)
		r = opts->max_replicas;
	if (r < 1)
		return ar_seterr(-AR_EINFEASIBLE, "not one replica of the template fits the free GPUs");

	trial = costmodel_plan_clone(plan);
	if (!trial || (rc = costmodel_pool_copy(&newpool, pool)) < 0) {
		rc = -ENOMEM;
		goto out;
	}
	grown = realloc(trial->templates,
			(size_t)(trial->ntemplates + 1) * sizeof(*grown));
	if (!grown) {
		rc = -ENOMEM;
		goto out;
	}
	trial->templates = grown;
	t = &trial->templates[trial->ntemplates++];
	memset(t, 0, sizeof(*t));
	t->nstages = shape->depth;
	t->replicas = r;
	for (int s = 0; s < shape->depth; s++) {
		t->stages[s].gpu = shape->gpu[s];
		t->stages[s].tp = shape->tp[s];
	}
	if ((rc = cm_template_alloc_placement(t)) < 0)
		goto out;
	if ((rc = place_template(cl, &newpool, shape, opts->placement, t)) < 0) {
		ar_seterr(rc, "the placement disagrees with the packing count");
		goto out;
	}
	if (opts->place_only) {
		for (int s = 0; s < t->nstages; s++) {
			t->stages[s].ep = 1;
			t->stages[s].etp = t->stages[s].tp;
			t->stages[s].edp = t->replicas;
		}
		rc = 0;
	} else {
		rc = plan_fill_best(cm, cl, trial, opts);
		if (rc == 0 && opts->placement == COSTMODEL_PLACE_BEST &&
		    placement_orders_differ(shape, r))
			rc = try_by_replica(cm, cl, pool, shape, opts, trial, &newpool);
	}
	if (rc < 0)
		goto out;
	if ((rc = costmodel_plan_copy(plan, trial)) < 0)
		goto out;
	rc = costmodel_pool_copy(pool, &newpool);
out:
	costmodel_plan_free(trial);
	costmodel_pool_fini(&newpool);
	return rc;
}

int costmodel_plan_refill(const struct costmodel *cm,
			  const struct costmodel_cluster *cl,
			  struct costmodel_plan *plan,
			  const struct costmodel_fill_opts *opts)
{
	static const struct costmodel_fill_opts defaults;

	return plan_fill_best(cm, cl, plan, opts ? opts : &defaults);
}

/* ------------------------------------------------------------------ */
/* Optimistic rates for bounds and features                            */

double costmodel_stage_speed(const struct costmodel *cm, int gpu, int tp)
{
	static const struct cm_stage_links no_links = {
		.intra_Bps = 1, .net_Bps = 1, .gpus_per_node_min = 1,
		.tp_comm_scale = 1,
	};
	double best = 0;

	for (int mbs = 1; mbs <= COSTMODEL_MAX_MBS; mbs *= 2) {
		double total = 0;
		bool ok = true;

		for (int l = 0; l < cm->nlayers && ok; l++) {
			struct cm_layer_cost c;

			ok = cm_layer_cost(cm, gpu, tp, mbs, cm_layer_type(cm, l),
					   1, tp, COSTMODEL_RECOMPUTE_NONE,
					   &no_links, &c) == 0;
			total += c.time_s;
		}
		if (ok && total > 0 && mbs / total > best)
			best = mbs / total;
	}
	return best;
}

double costmodel_block_state_bytes(const struct costmodel *cm, int gpu, int tp,
				   int dp)
{
	static const struct cm_stage_links no_links = {
		.intra_Bps = 1, .net_Bps = 1, .gpus_per_node_min = 1,
		.tp_comm_scale = 1,
	};
	struct cm_layer_cost c;
	int layer = cm->nlayers > 2 ? cm->nlayers - 2 : 0;

	if (cm_layer_cost(cm, gpu, tp, 1, cm_layer_type(cm, layer), 1, tp,
			  COSTMODEL_RECOMPUTE_NONE, &no_links, &c) < 0)
		return 0;
	return cm_state_bytes(cm, c.params + c.expert_params, dp);
}
