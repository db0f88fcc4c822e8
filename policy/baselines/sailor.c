/*
 * sailor.c - the Sailor baseline (Strati et al., 2025), as the Arachne
 * paper's §3.1 and Sailor's public planner (planner.cpp, planner_utils.cpp)
 * describe it.  For every pipeline depth and micro-batch size: split the
 * layer list evenly, the remainder to the last stages; give each (GPU
 * type, stage) one TP degree, the larger of the smallest that fits the
 * stage in memory and the largest whose speed-up over the previous degree
 * still reaches Sailor's threshold; then for DP degrees from the largest
 * down, choose by dynamic programming over the stages how many of each
 * stage's replicas every GPU type serves, minimizing Sailor's estimate of
 * the iteration (straggler stage with its activation send, all stage and
 * send times, the slowest stage's bucketed gradient all-reduce), and stop
 * lowering the DP degree once that estimate stops improving.
 *
 * Published steering: Sailor's own estimate and memory model (24 bytes a
 * parameter, Megatron's 2-3 GB) choose among the configurations found;
 * only the chosen one is priced.  Shared steering: each configuration is
 * completed by the fill with Sailor's restrictions (even layers, the
 * micro-batch fixed) and the fastest priced one wins.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ar.h"
#include "baseline.h"

/* Speed-up a doubled TP degree must bring for Sailor to take it. */
#define SAILOR_TP_SPEEDUP	1.5
#define SAILOR_MAX_TYPES	8
/* The memo stops growing here (entries); the search goes on without it. */
#define SAILOR_MEMO_MAX		(1u << 18)
/* Sailor's memory model: bytes a parameter (optimizer 8, model copy 4,
 * gradients 4, communication 4, additional 4), Megatron's own memory. */
#define SAILOR_BYTES_PER_PARAM	24.0
#define SAILOR_MEGATRON_TP1	2e9
#define SAILOR_MEGATRON_TP	3e9
/* Gradients all-reduced in buckets (PyTorch DDP's 25 MB). */
#define SAILOR_BUCKET_BYTES	25e6
#define SAILOR_AR_LATENCY_S	20e-6

/*
 * The estimate of stages @stage.. as Sailor's PipelineInfo keeps it: the
 * straggler (slowest stage with its send), the first stage with its send,
 * all stage times and all sends, and the slowest all-reduce.
 */
struct sailor_info {
	double straggler;
	double first;
	double comp;
	double comm;
	double sync;
};

struct sailor_memo_entry {
	bool used;
	bool solved;			/* false: no assignment fits */
	uint8_t stage;
	uint32_t rem[SAILOR_MAX_TYPES];	/* GPUs left per type */
	uint32_t combo[SAILOR_MAX_TYPES]; /* replicas per type at this stage */
	struct sailor_info info;	/* from this stage on */
};

struct sailor {
	struct baseline_search bs;
	int ntypes;
	int type[SAILOR_MAX_TYPES];	/* GPU type index of each slot */
	int count[SAILOR_MAX_TYPES];	/* GPUs of that type */
	int node_gpus;			/* uniform node size, or 1 */
	int nlayers;
	int global_batch;
	/* The (depth, micro-batch, DP degree) being solved. */
	int depth;
	int mbs;
	int replicas;
	int micro_batches;
	int first[COSTMODEL_MAX_DEPTH], last[COSTMODEL_MAX_DEPTH];
	int tp[SAILOR_MAX_TYPES][COSTMODEL_MAX_DEPTH];	 /* 0: unusable */
	double time[SAILOR_MAX_TYPES][COSTMODEL_MAX_DEPTH]; /* per micro-batch */
	double link[SAILOR_MAX_TYPES][COSTMODEL_MAX_DEPTH]; /* a TP group's network */
	double weights[SAILOR_MAX_TYPES][COSTMODEL_MAX_DEPTH]; /* gradient bytes a GPU */
	struct sailor_memo_entry *memo;
	size_t memo_cap;
	size_t memo_len;
	long steps;			/* combinations looked at */
};

static uint64_t sailor_hash(const struct sailor *sl, int stage,
			    const uint32_t *rem)
{
	uint64_t h = 1469598103934665603ull ^ (uint64_t)stage;

	for (int i = 0; i < sl->ntypes; i++) {
		h ^= rem[i];
		h *= 1099511628211ull;
	}
	return h;
}

/* The memo slot of (@stage, @rem): found, or empty to fill; NULL if full. */
static struct sailor_memo_entry *sailor_memo_slot(struct sailor *sl, int stage,
						  const uint32_t *rem)
{
	size_t mask = sl->memo_cap - 1;
	size_t i = sailor_hash(sl, stage, rem) & mask;

	for (;;) {
		struct sailor_memo_entry *e = &sl->memo[i];

		if (!e->used)
			return sl->memo_len * 2 < sl->memo_cap ? e : NULL;
		if (e->stage == stage &&
		    !memcmp(e->rem, rem, sizeof(*rem) * sl->ntypes))
			return e;
		i = (i + 1) & mask;
	}
}

static void sailor_memo_clear(struct sailor *sl)
{
	memset(sl->memo, 0, sizeof(*sl->memo) * sl->memo_cap);
	sl->memo_len = 0;
}

/* Grow the memo up to SAILOR_MEMO_MAX; 0 when it stays as it is. */
static int sailor_memo_grow(struct sailor *sl)
{
	struct sailor_memo_entry *old = sl->memo, *n;
	size_t oldcap = sl->memo_cap;

	if (sl->memo_cap >= SAILOR_MEMO_MAX)
		return 0;
	n = calloc(oldcap * 2, sizeof(*n));
	if (!n)
		return 0;
	sl->memo = n;
	sl->memo_cap = oldcap * 2;
	sl->memo_len = 0;
	for (size_t i = 0; i < oldcap; i++) {
		struct sailor_memo_entry *e;

		if (!old[i].used)
			continue;
		e = sailor_memo_slot(sl, old[i].stage, old[i].rem);
		*e = old[i];
		sl->memo_len++;
	}
	free(old);
	return 0;
}

struct sailor_best {
	bool found;
	uint32_t combo[SAILOR_MAX_TYPES];
	struct sailor_info info;
	double prev_t;			/* last single-stage estimate looked at */
};

static int sailor_solve(struct sailor *sl, int stage, const uint32_t *rem,
			struct sailor_memo_entry *out);

/* Sailor's Tpp: bubbles at the straggler, every stage and send, the sync. */
static double sailor_iter(const struct sailor *sl, const struct sailor_info *x)
{
	return (sl->micro_batches - 1) * x->straggler + x->comp + x->comm +
	       x->sync;
}

/* Bucketed ring all-reduce of @bytes over @n replicas at @Bps. */
static double sailor_allreduce(double bytes, int n, double Bps)
{
	double t = 0;

	if (n < 2)
		return 0;
	for (double left = bytes; left > 0; left -= SAILOR_BUCKET_BYTES) {
		double b = left < SAILOR_BUCKET_BYTES ? left : SAILOR_BUCKET_BYTES;

		t += baseline_ring_s(b, n, Bps) + 2.0 * (n - 1) * SAILOR_AR_LATENCY_S;
	}
	return t;
}

/*
 * The activation send from stage @stage (replicas per type @c) to the
 * next (@next): replica k of each is the k-th slot when the replicas are
 * laid out type by type; the slowest pair sets the time, as Sailor takes
 * the slowest of its dp pairs.
 */
static double sailor_send(const struct sailor *sl, int stage, const uint32_t *c,
			  const uint32_t *next)
{
	double bytes = baseline_boundary_bytes(sl->bs.cm) * sl->mbs, worst = 0;
	int i = 0, j = 0, left_i, left_j;

	while (i < sl->ntypes && !c[i])
		i++;
	while (j < sl->ntypes && !next[j])
		j++;
	left_i = i < sl->ntypes ? c[i] : 0;
	left_j = j < sl->ntypes ? next[j] : 0;
	while (i < sl->ntypes && j < sl->ntypes) {
		double bw = fmin(sl->link[i][stage], sl->link[j][stage + 1]);
		int k = left_i < left_j ? left_i : left_j;

		if (bytes / bw > worst)
			worst = bytes / bw;
		left_i -= k;
		left_j -= k;
		if (!left_i) {
			while (++i < sl->ntypes && !c[i])
				;
			left_i = i < sl->ntypes ? c[i] : 0;
		}
		if (!left_j) {
			while (++j < sl->ntypes && !next[j])
				;
			left_j = j < sl->ntypes ? next[j] : 0;
		}
	}
	return worst;
}

/*
 * sailor_combo_done() - estimate one assignment @c of the stage's
 * replicas to GPU types, merged with the best assignment of the later
 * stages as Sailor's merge_stages_get_time() merges them.
 */
static int sailor_combo_done(struct sailor *sl, int stage, const uint32_t *rem,
			     const uint32_t *c, struct sailor_best *best)
{
	struct sailor_memo_entry rest;
	struct sailor_info x;
	uint32_t left[SAILOR_MAX_TYPES];
	double t = 0, bw = INFINITY, bytes = 0, single, send;
	int rc;

	sl->bs.states++;
	for (int i = 0; i < sl->ntypes; i++) {
		if (!c[i])
			continue;
		if (sl->time[i][stage] > t)
			t = sl->time[i][stage];
		if (sl->link[i][stage] < bw) {
			bw = sl->link[i][stage];
			bytes = sl->weights[i][stage];
		}
	}
	x.straggler = x.first = x.comp = t;
	x.comm = 0;
	x.sync = sailor_allreduce(bytes, sl->replicas, bw);
	/*
	 * Sailor skips an assignment whose single-stage estimate equals the
	 * one it looked at just before: the rest would be solved for a
	 * look-alike.
	 */
	single = sl->micro_batches * t + x.sync;
	if (stage < sl->depth - 1 && single == best->prev_t)
		return 0;
	best->prev_t = single;
	if (stage < sl->depth - 1) {
		for (int i = 0; i < sl->ntypes; i++)
			left[i] = rem[i] - c[i] * sl->tp[i][stage];
		rc = sailor_solve(sl, stage + 1, left, &rest);
		if (rc < 0)
			return rc;
		if (!rest.solved)
			return 0;
		send = sailor_send(sl, stage, c, rest.combo);
		x.straggler = fmax(fmax(t + send, rest.info.first + send),
				   rest.info.straggler);
		x.first = t + send;
		x.comp = t + rest.info.comp;
		x.comm = rest.info.comm + 2 * send;
		x.sync = fmax(x.sync, rest.info.sync);
	}
	if (!best->found || sailor_iter(sl, &x) < sailor_iter(sl, &best->info)) {
		best->found = true;
		memcpy(best->combo, c, sizeof(*c) * sl->ntypes);
		best->info = x;
	}
	return 0;
}

/* Every way to give @left more replicas to the types from slot @i on. */
static int sailor_combos(struct sailor *sl, int stage, const uint32_t *rem,
			 int i, int left, uint32_t *c, struct sailor_best *best)
{
	int most;
	int rc;

	if ((++sl->steps & 1023) == 0 && baseline_search_expired(&sl->bs))
		return 0;
	if (sl->bs.expired)
		return 0;
	if (i == sl->ntypes)
		return left ? 0 : sailor_combo_done(sl, stage, rem, c, best);
	most = sl->tp[i][stage] ? rem[i] / sl->tp[i][stage] : 0;
	if (most > left)
		most = left;
	if (i == sl->ntypes - 1) {
		if (most < left)
			return 0;
		c[i] = left;
		return sailor_combos(sl, stage, rem, i + 1, 0, c, best);
	}
	for (int k = 0; k <= most; k++) {
		c[i] = k;
		rc = sailor_combos(sl, stage, rem, i + 1, left - k, c, best);
		if (rc < 0)
			return rc;
	}
	c[i] = 0;
	return 0;
}

/*
 * sailor_solve() - the best assignment of stages @stage.. given the GPUs
 * @rem left, memoized on (@stage, @rem) as Sailor's planner does.
 */
static int sailor_solve(struct sailor *sl, int stage, const uint32_t *rem,
			struct sailor_memo_entry *out)
{
	struct sailor_memo_entry *e = sailor_memo_slot(sl, stage, rem);
	struct sailor_best best = { .found = false, .prev_t = -1 };
	uint32_t c[SAILOR_MAX_TYPES] = { 0 };
	int rc;

	if (e && e->used) {
		*out = *e;
		return 0;
	}
	rc = sailor_combos(sl, stage, rem, 0, sl->replicas, c, &best);
	if (rc < 0)
		return rc;
	memset(out, 0, sizeof(*out));
	out->used = true;
	out->stage = (uint8_t)stage;
	memcpy(out->rem, rem, sizeof(*rem) * sl->ntypes);
	out->solved = best.found;
	memcpy(out->combo, best.combo, sizeof(best.combo));
	out->info = best.info;
	if (sl->bs.expired)
		return 0;		/* a cut-short answer is not remembered */
	e = sailor_memo_slot(sl, stage, rem);
	if (!e) {
		sailor_memo_grow(sl);
		e = sailor_memo_slot(sl, stage, rem);
	}
	if (e && !e->used) {
		*e = *out;
		sl->memo_len++;
	}
	return 0;
}

/* Sailor's check_stage_fits(): 24 B a parameter, activations, Megatron. */
static bool sailor_stage_fits(const struct sailor *sl, int gpu, int tp, int s)
{
	const struct costmodel *cm = sl->bs.cm;
	double need = tp == 1 ? SAILOR_MEGATRON_TP1 : SAILOR_MEGATRON_TP;

	for (int l = sl->first[s]; l <= sl->last[s]; l++) {
		double w = baseline_range_weight_bytes(cm, gpu, l, l);
		double a = baseline_layer_act_bytes(cm, gpu, tp, sl->mbs, l);

		if (!(w > 0) || !isfinite(a))
			return false;
		need += w / 2 / tp * SAILOR_BYTES_PER_PARAM +
			a * (sl->depth - s);
	}
	return need <= costmodel_gpu(cm, gpu)->memory_gib * 1073741824.0;
}

/*
 * sailor_tp_degrees() - each (type, stage)'s TP degree for the current
 * depth and micro-batch; a type that fits some stage at no degree is left
 * out (tp 0), as Sailor drops it.  Returns the number of usable types.
 */
static int sailor_tp_degrees(struct sailor *sl)
{
	const struct costmodel *cm = sl->bs.cm;
	int usable = 0;

	for (int i = 0; i < sl->ntypes; i++) {
		int g = sl->type[i];
		int tp_max = sl->node_gpus < COSTMODEL_MAX_TP ?
				     sl->node_gpus : COSTMODEL_MAX_TP;
		bool ok = true;

		for (int s = 0; s < sl->depth && ok; s++) {
			int tp_mem = 0, tp_speed = 0;
			double prev = INFINITY;

			for (int tp = 1; tp <= tp_max; tp *= 2) {
				if (baseline_published(&sl->bs) ?
				    sailor_stage_fits(sl, g, tp, s) :
				    baseline_stage_fits(cm, g, tp, sl->mbs,
							sl->first[s], sl->last[s],
							sl->depth - s, NULL)) {
					tp_mem = tp;
					break;
				}
			}
			for (int tp = 1; tp <= tp_max; tp *= 2) {
				double t = baseline_range_time(cm, g, tp,
							       sl->mbs,
							       sl->first[s],
							       sl->last[s]);

				if (t <= 0 || prev / t < SAILOR_TP_SPEEDUP)
					break;
				tp_speed = tp;
				prev = t;
			}
			sl->tp[i][s] = tp_mem > tp_speed ? tp_mem : tp_speed;
			sl->time[i][s] = baseline_range_time(cm, g,
							     sl->tp[i][s],
							     sl->mbs,
							     sl->first[s],
							     sl->last[s]);
			/* A TP group's share of its node's link, as Sailor
			 * measures between VMs of tp GPUs. */
			sl->link[i][s] = baseline_type_link_Bps(cm, sl->bs.cl, g) *
					 (sl->tp[i][s] ? sl->tp[i][s] : 1) /
					 sl->node_gpus;
			sl->weights[i][s] = baseline_range_weight_bytes(cm, g,
						sl->first[s], sl->last[s]) /
					    (sl->tp[i][s] ? sl->tp[i][s] : 1);
			if (!tp_mem || sl->time[i][s] < 0)
				ok = false;
		}
		if (!ok) {
			for (int s = 0; s < sl->depth; s++)
				sl->tp[i][s] = 0;
			continue;
		}
		usable++;
	}
	return usable;
}

/*
 * sailor_price() - turn the solved assignment into templates (replica r
 * takes, at every stage, the r-th slot when the stage's replicas are laid
 * out type by type) and offer the plan: placed with Sailor's split and
 * its estimate @iter_s (published), or completed by the fill and priced
 * (shared).
 */
static int sailor_price(struct sailor *sl, double iter_s)
{
	int seq[COSTMODEL_MAX_DEPTH];
	int *per_replica = NULL;
	int *done = NULL;
	uint32_t rem[SAILOR_MAX_TYPES];
	struct costmodel_fill_opts opts;
	struct costmodel_pool pool = { 0 };
	struct costmodel_plan *plan = NULL;
	int R = sl->replicas, D = sl->depth;
	int rc;

	per_replica = calloc((size_t)R * D, sizeof(*per_replica));
	done = calloc(R, sizeof(*done));
	plan = costmodel_plan_create(sl->bs.cm);
	if (!per_replica || !done || !plan) {
		rc = -ENOMEM;
		goto out;
	}
	rc = costmodel_pool_init(&pool, sl->bs.cl);
	if (rc < 0)
		goto out;
	for (int i = 0; i < sl->ntypes; i++)
		rem[i] = (uint32_t)sl->count[i];
	for (int s = 0; s < D; s++) {
		struct sailor_memo_entry e;
		int r = 0;

		rc = sailor_solve(sl, s, rem, &e);
		if (rc < 0)
			goto out;
		if (!e.solved)
			goto out;	/* cut short by the budget */
		for (int i = 0; i < sl->ntypes; i++) {
			for (uint32_t k = 0; k < e.combo[i]; k++)
				per_replica[(r++) * D + s] = i;
			rem[i] -= e.combo[i] * sl->tp[i][s];
		}
	}
	baseline_fill_opts(&opts);
	opts.uniform_layers = true;
	opts.fixed_micro_batch = sl->mbs;
	opts.place_only = baseline_published(&sl->bs);
	for (int r = 0; r < R; r++) {
		struct costmodel_shape shape = { .depth = D };
		int same = 0;

		if (done[r])
			continue;
		memcpy(seq, &per_replica[r * D], sizeof(*seq) * D);
		for (int q = r; q < R; q++) {
			if (!done[q] && !memcmp(seq, &per_replica[q * D],
						sizeof(*seq) * D)) {
				done[q] = 1;
				same++;
			}
		}
		for (int s = 0; s < D; s++) {
			shape.gpu[s] = sl->type[seq[s]];
			shape.tp[s] = sl->tp[seq[s]][s];
		}
		opts.max_replicas = same;
		if (!opts.place_only)
			sl->bs.plans_priced++;
		rc = costmodel_fill_add(sl->bs.cm, sl->bs.cl, &pool, plan,
					&shape, &opts);
		if (rc < 0) {
			if (baseline_rc_rejects(rc))
				rc = 0;
			goto out;
		}
	}
	/*
	 * Sailor gives every replica the same share of the batch, where the
	 * fill shares it by speed: price it Sailor's way.
	 */
	for (int j = 0; j < plan->ntemplates; j++)
		plan->templates[j].micro_batches = sl->micro_batches;
	if (opts.place_only) {
		plan->micro_batch = sl->mbs;
		for (int j = 0; j < plan->ntemplates; j++) {
			for (int st = 0; st < D; st++) {
				plan->templates[j].stages[st].first_layer = sl->first[st];
				plan->templates[j].stages[st].last_layer = sl->last[st];
			}
		}
		rc = baseline_search_offer_estimate(&sl->bs, plan, iter_s);
		goto out;
	}
	sl->bs.plans_priced++;
	rc = costmodel_plan_price(sl->bs.cm, sl->bs.cl, plan);
	if (rc == 0)
		rc = baseline_search_offer(&sl->bs, plan);
	else if (baseline_rc_rejects(rc))
		rc = 0;
out:
	costmodel_pool_fini(&pool);
	costmodel_plan_free(plan);
	free(per_replica);
	free(done);
	return rc;
}

/* The DP degrees Sailor tries for a micro-batch, largest first. */
static int sailor_dp_degrees(const struct sailor *sl, int most, int *dp)
{
	int n = 0, prev_m = -1;

	for (int d = 1; d <= most; d++) {
		int m = (sl->global_batch + sl->mbs * d - 1) / (sl->mbs * d);

		if (m != prev_m)
			dp[n++] = d;
		prev_m = m;
	}
	/* reverse: the largest degree first */
	for (int i = 0; i < n / 2; i++) {
		int t = dp[i];

		dp[i] = dp[n - 1 - i];
		dp[n - 1 - i] = t;
	}
	return n;
}

static int sailor_depth_mbs(struct sailor *sl, int *dp)
{
	double prev_iter = INFINITY;
	int most = 0, ndp;
	int rc;

	if (baseline_split_even(sl->bs.cm, sl->depth, sl->first, sl->last) < 0)
		return 0;
	if (!sailor_tp_degrees(sl))
		return 0;
	for (int i = 0; i < sl->ntypes; i++) {
		int smallest = 0;

		for (int s = 0; s < sl->depth; s++)
			if (sl->tp[i][s] && (!smallest || sl->tp[i][s] < smallest))
				smallest = sl->tp[i][s];
		if (smallest)
			most += sl->count[i] / smallest;
	}
	if (most > sl->global_batch / sl->mbs)
		most = sl->global_batch / sl->mbs;
	ndp = sailor_dp_degrees(sl, most, dp);
	for (int k = 0; k < ndp; k++) {
		struct sailor_memo_entry e;
		uint32_t rem[SAILOR_MAX_TYPES];

		if (baseline_search_expired(&sl->bs))
			return 0;
		sl->replicas = dp[k];
		sl->micro_batches = (sl->global_batch + sl->mbs * dp[k] - 1) /
				    (sl->mbs * dp[k]);
		if (sl->memo_len)
			sailor_memo_clear(sl);
		for (int i = 0; i < sl->ntypes; i++)
			rem[i] = (uint32_t)sl->count[i];
		rc = sailor_solve(sl, 0, rem, &e);
		if (rc < 0)
			return rc;
		if (!e.solved)
			continue;
		/*
		 * Sailor's stopping rule: once fewer replicas stop improving
		 * its estimate, it stops lowering the DP degree (and does not
		 * keep that configuration).
		 */
		if (sailor_iter(sl, &e.info) >= prev_iter)
			break;
		prev_iter = sailor_iter(sl, &e.info);
		rc = sailor_price(sl, prev_iter);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int planner_sailor(const struct policy_request *req,
		   struct costmodel_plan **planp)
{
	struct sailor *sl;
	int count[COSTMODEL_MAX_GPU_TYPES];
	int *dp = NULL;
	int rc, depth_max;

	*planp = NULL;
	sl = calloc(1, sizeof(*sl));
	if (!sl)
		return -ENOMEM;
	rc = baseline_search_init(&sl->bs, req, "sailor");
	if (rc < 0)
		goto out;
	baseline_count_gpus(req->cm, req->cl, count);
	for (int g = 0; g < COSTMODEL_MAX_GPU_TYPES; g++) {
		if (!count[g])
			continue;
		if (sl->ntypes == SAILOR_MAX_TYPES) {
			rc = ar_seterr(-AR_EINVAL, "sailor: at most %d GPU types",
				       SAILOR_MAX_TYPES);
			goto out;
		}
		sl->type[sl->ntypes] = g;
		sl->count[sl->ntypes++] = count[g];
	}
	sl->node_gpus = baseline_node_gpus(req->cl);
	sl->nlayers = costmodel_num_layers(req->cm);
	sl->global_batch = baseline_global_batch(req->cm);
	sl->memo_cap = 4096;
	sl->memo = calloc(sl->memo_cap, sizeof(*sl->memo));
	dp = calloc(costmodel_cluster_total_gpus(req->cl) + 1, sizeof(*dp));
	if (!sl->memo || !dp) {
		rc = -ENOMEM;
		goto out;
	}
	depth_max = sl->nlayers - 2 < COSTMODEL_MAX_DEPTH ? sl->nlayers - 2 :
							COSTMODEL_MAX_DEPTH;
	for (int depth = 1; depth <= depth_max && rc == 0; depth++) {
		for (int i = 0; i < BASELINE_NUM_MBS && rc == 0; i++) {
			if (baseline_search_expired(&sl->bs))
				break;
			sl->depth = depth;
			sl->mbs = baseline_mbs(i);
			rc = sailor_depth_mbs(sl, dp);
		}
	}
	if (rc == 0)
		rc = baseline_search_finish(&sl->bs, true, planp);
out:
	free(dp);
	free(sl->memo);
	baseline_search_fini(&sl->bs);
	free(sl);
	return rc;
}
