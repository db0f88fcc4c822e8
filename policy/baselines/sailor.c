/*
 * sailor.c - the Sailor baseline (Strati et al., 2025), as the Arachne
 * paper's §3.1 and Sailor's public planner describe it.  For every
 * pipeline depth and micro-batch size: split the layers evenly; give each
 * (GPU type, stage) one TP degree, the larger of the smallest that fits
 * the stage in memory and the largest whose speed-up over the previous
 * degree still reaches Sailor's threshold; then for DP degrees from the
 * largest down, choose by dynamic programming over the stages how many of
 * each stage's replicas every GPU type serves, and stop lowering the DP
 * degree once the estimated iteration time stops improving.  Each
 * configuration found is completed by the fill with Sailor's restrictions
 * (even layers, the micro-batch fixed) and priced by libarachne.
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

struct sailor_memo_entry {
	bool used;
	bool solved;			/* false: no assignment fits */
	uint8_t stage;
	uint16_t rem[SAILOR_MAX_TYPES];	/* GPUs left per type */
	uint16_t combo[SAILOR_MAX_TYPES]; /* replicas per type at this stage */
	double max_s;			/* slowest stage from here on */
	double sum_s;			/* stage times from here on */
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
	struct sailor_memo_entry *memo;
	size_t memo_cap;
	size_t memo_len;
	long steps;			/* combinations looked at */
};

static uint64_t sailor_hash(const struct sailor *sl, int stage,
			    const uint16_t *rem)
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
						  const uint16_t *rem)
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
	uint16_t combo[SAILOR_MAX_TYPES];
	double max_s;
	double sum_s;
	double prev_t;			/* last stage time looked at */
};

static int sailor_solve(struct sailor *sl, int stage, const uint16_t *rem,
			struct sailor_memo_entry *out);

static double sailor_iter(const struct sailor *sl, double max_s, double sum_s)
{
	return (sl->micro_batches - 1) * max_s + sum_s;
}

/*
 * sailor_combo_done() - price one assignment @c of the stage's replicas to
 * GPU types against the best assignment of the later stages.
 */
static int sailor_combo_done(struct sailor *sl, int stage, const uint16_t *rem,
			     const uint16_t *c, struct sailor_best *best)
{
	struct sailor_memo_entry rest;
	uint16_t left[SAILOR_MAX_TYPES];
	double t = 0, max_s, sum_s;
	int rc;

	for (int i = 0; i < sl->ntypes; i++)
		if (c[i] && sl->time[i][stage] > t)
			t = sl->time[i][stage];
	/*
	 * Sailor skips an assignment whose stage time equals the one it
	 * looked at just before: the rest would be solved for a look-alike.
	 */
	if (stage < sl->depth - 1 && t == best->prev_t)
		return 0;
	best->prev_t = t;
	if (stage == sl->depth - 1) {
		max_s = t;
		sum_s = t;
	} else {
		for (int i = 0; i < sl->ntypes; i++)
			left[i] = rem[i] - c[i] * sl->tp[i][stage];
		rc = sailor_solve(sl, stage + 1, left, &rest);
		if (rc < 0)
			return rc;
		if (!rest.solved)
			return 0;
		max_s = t > rest.max_s ? t : rest.max_s;
		sum_s = t + rest.sum_s;
	}
	if (!best->found || sailor_iter(sl, max_s, sum_s) <
			    sailor_iter(sl, best->max_s, best->sum_s)) {
		best->found = true;
		memcpy(best->combo, c, sizeof(*c) * sl->ntypes);
		best->max_s = max_s;
		best->sum_s = sum_s;
	}
	return 0;
}

/* Every way to give @left more replicas to the types from slot @i on. */
static int sailor_combos(struct sailor *sl, int stage, const uint16_t *rem,
			 int i, int left, uint16_t *c, struct sailor_best *best)
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
static int sailor_solve(struct sailor *sl, int stage, const uint16_t *rem,
			struct sailor_memo_entry *out)
{
	struct sailor_memo_entry *e = sailor_memo_slot(sl, stage, rem);
	struct sailor_best best = { .found = false, .prev_t = -1 };
	uint16_t c[SAILOR_MAX_TYPES] = { 0 };
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
	out->max_s = best.max_s;
	out->sum_s = best.sum_s;
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
				if (baseline_stage_fits(cm, g, tp, sl->mbs,
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
 * out type by type), complete them with the fill and offer the plan.
 */
static int sailor_price(struct sailor *sl)
{
	int seq[COSTMODEL_MAX_DEPTH];
	int *per_replica = NULL;
	int *done = NULL;
	uint16_t rem[SAILOR_MAX_TYPES];
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
		rem[i] = (uint16_t)sl->count[i];
	for (int s = 0; s < D; s++) {
		struct sailor_memo_entry e;
		int r = 0;

		rc = sailor_solve(sl, s, rem, &e);
		if (rc < 0)
			goto out;
		if (!e.solved)
			goto out;	/* cut short by the budget */
		for (int i = 0; i < sl->ntypes; i++) {
			for (int k = 0; k < e.combo[i]; k++)
				per_replica[(r++) * D + s] = i;
			rem[i] -= e.combo[i] * sl->tp[i][s];
		}
	}
	baseline_fill_opts(&opts);
	opts.uniform_layers = true;
	opts.fixed_micro_batch = sl->mbs;
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
		uint16_t rem[SAILOR_MAX_TYPES];

		if (baseline_search_expired(&sl->bs))
			return 0;
		sl->replicas = dp[k];
		sl->micro_batches = (sl->global_batch + sl->mbs * dp[k] - 1) /
				    (sl->mbs * dp[k]);
		if (sl->memo_len)
			sailor_memo_clear(sl);
		for (int i = 0; i < sl->ntypes; i++)
			rem[i] = (uint16_t)sl->count[i];
		rc = sailor_solve(sl, 0, rem, &e);
		if (rc < 0)
			return rc;
		if (!e.solved)
			continue;
		rc = sailor_price(sl);
		if (rc < 0)
			return rc;
		/* Sailor's stopping rule: fewer replicas stopped helping. */
		if (sailor_iter(sl, e.max_s, e.sum_s) >= prev_iter)
			break;
		prev_iter = sailor_iter(sl, e.max_s, e.sum_s);
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
		if (sl->ntypes == SAILOR_MAX_TYPES || count[g] > UINT16_MAX) {
			rc = ar_seterr(-AR_EINVAL,
				       "sailor: at most %d GPU types of at most %d GPUs each",
				       SAILOR_MAX_TYPES, UINT16_MAX);
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
