/*
 * metis.c - the Metis baseline (Um et al., USENIX ATC 2024), as the
 * Arachne paper's §3.1 and Metis's public planner describe it.  The outer
 * loops: an order of the GPU types (stages take device types in that
 * order), the number of stages and how many of them each type gets, the
 * stages' device groups and the micro-batches.  Inside a stage Metis
 * prefers data parallelism and trades it for TP under memory pressure.
 * Metis explores until it has seen every combination or its budget is
 * spent.
 *
 * Published steering (below metis_pub): each stage a device group of its
 * own size, data parallel inside (the plan's per-stage "dp"), Metis's
 * layer balancer, memory model and cost estimate choosing.  Shared
 * steering (metis_try): this project's earlier reading, one replica count
 * for every stage, TP raised on the stage under the most memory pressure,
 * layers split and plans priced by the cost model's fill.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ar.h"
#include "baseline.h"

struct metis {
	struct baseline_search bs;
	int ntypes;
	int type[COSTMODEL_MAX_GPU_TYPES];	/* present types */
	int count[COSTMODEL_MAX_GPU_TYPES];	/* GPUs of each */
	int largest[COSTMODEL_MAX_GPU_TYPES];	/* largest node of each */
	int order[COSTMODEL_MAX_GPU_TYPES];	/* slots in stage order */
	int per_type[COSTMODEL_MAX_GPU_TYPES];	/* stages of order[i] */
	int nlayers;
	int global_batch;
	bool complete;
};

/*
 * metis_pressure() - the stage whose memory is tightest under Metis's
 * compute-share split that can still double its TP degree (-1: none).
 */
static int metis_pressure(const struct metis *mt,
			  const struct costmodel_shape *shape, const int *slot,
			  int replicas, int mbs)
{
	const struct costmodel *cm = mt->bs.cm;
	int first[COSTMODEL_MAX_DEPTH], last[COSTMODEL_MAX_DEPTH];
	double share[COSTMODEL_MAX_DEPTH];
	int taken[COSTMODEL_MAX_GPU_TYPES] = { 0 };
	double worst = INFINITY;
	int pick = -1;

	for (int s = 0; s < shape->depth; s++) {
		share[s] = costmodel_stage_speed(cm, shape->gpu[s], shape->tp[s]);
		taken[slot[s]] += replicas * shape->tp[s];
	}
	if (baseline_split_share(cm, shape->depth, share, first, last) < 0)
		return -1;
	for (int s = 0; s < shape->depth; s++) {
		double room;
		int i = slot[s];

		if (shape->tp[s] * 2 > mt->largest[i] ||
		    shape->tp[s] * 2 > COSTMODEL_MAX_TP ||
		    taken[i] + replicas * shape->tp[s] > mt->count[i])
			continue;
		baseline_stage_fits(cm, shape->gpu[s], shape->tp[s], mbs,
				    first[s], last[s], shape->depth - s, &room);
		if (room < worst) {
			worst = room;
			pick = s;
		}
	}
	return pick;
}

/*
 * metis_try() - one outer-loop point: stages typed by the current order
 * and per-type counts, @replicas copies, micro-batch @mbs.  TP starts at
 * 1 and is raised stage by stage under memory pressure.
 */
static int metis_try(struct metis *mt, int depth, int replicas, int mbs)
{
	struct costmodel_shape shape = { .depth = depth };
	struct costmodel_fill_opts opts;
	int slot[COSTMODEL_MAX_DEPTH];
	int need[COSTMODEL_MAX_GPU_TYPES] = { 0 };
	int s = 0, rc = 0;

	for (int i = 0; i < mt->ntypes; i++) {
		for (int k = 0; k < mt->per_type[i]; k++, s++) {
			slot[s] = mt->order[i];
			shape.gpu[s] = mt->type[mt->order[i]];
			shape.tp[s] = 1;
			need[mt->order[i]] += replicas;
		}
	}
	for (int i = 0; i < mt->ntypes; i++)
		if (need[i] > mt->count[i])
			return 0;
	baseline_fill_opts(&opts);
	opts.max_replicas = replicas;
	opts.fixed_micro_batch = mbs;
	for (;;) {
		struct costmodel_pool pool = { 0 };
		struct costmodel_plan *plan;
		int raise;

		if (baseline_search_expired(&mt->bs))
			return 0;
		plan = costmodel_plan_create(mt->bs.cm);
		if (!plan)
			return -ENOMEM;
		rc = costmodel_pool_init(&pool, mt->bs.cl);
		if (rc == 0) {
			mt->bs.plans_priced++;
			mt->bs.states++;
			rc = costmodel_fill_add(mt->bs.cm, mt->bs.cl, &pool,
						plan, &shape, &opts);
		}
		costmodel_pool_fini(&pool);
		if (rc == 0) {
			/* Metis's device groups are exact: all replicas. */
			if (plan->ntemplates == 1 &&
			    plan->templates[0].replicas == replicas)
				rc = baseline_search_offer(&mt->bs, plan);
			costmodel_plan_free(plan);
			return rc;
		}
		costmodel_plan_free(plan);
		if (rc != -AR_EINFEASIBLE)
			return baseline_rc_rejects(rc) ? 0 : rc;
		raise = metis_pressure(mt, &shape, slot, replicas, mbs);
		if (raise < 0)
			return 0;
		shape.tp[raise] *= 2;
	}
}

/* Every split of the stages among the ordered types, each at least one. */
static int metis_counts(struct metis *mt, int i, int left, int depth)
{
	int rc;

	if (i == mt->ntypes - 1) {
		mt->per_type[i] = left;
		for (int r = 1;; r *= 2) {
			bool room = true;

			for (int k = 0; k < mt->ntypes; k++)
				if (mt->per_type[k] * r > mt->count[mt->order[k]])
					room = false;
			if (!room)
				break;
			for (int b = 0; b < BASELINE_NUM_MBS; b++) {
				int mbs = baseline_mbs(b);

				if (r * mbs > mt->global_batch)
					break;
				if (baseline_search_expired(&mt->bs))
					return 0;
				rc = metis_try(mt, depth, r, mbs);
				if (rc < 0)
					return rc;
			}
		}
		return 0;
	}
	for (int k = 1; k <= left - (mt->ntypes - 1 - i); k++) {
		mt->per_type[i] = k;
		rc = metis_counts(mt, i + 1, left - k, depth);
		if (rc < 0 || mt->bs.expired)
			return rc;
	}
	return 0;
}

/* Next permutation of @a[0..n) in lexicographic order; false at the end. */
static bool metis_next_order(int *a, int n)
{
	int i = n - 2, j = n - 1;

	while (i >= 0 && a[i] >= a[i + 1])
		i--;
	if (i < 0)
		return false;
	while (a[j] <= a[i])
		j--;
	int t = a[i];

	a[i] = a[j];
	a[j] = t;
	for (int l = i + 1, r = n - 1; l < r; l++, r--) {
		t = a[l];
		a[l] = a[r];
		a[r] = t;
	}
	return true;
}

/* ---------------------------------------------------------------------
 * Published steering: Metis's own search space, balancer and estimator.
 *
 * A stage is a device group of its own size (a power of two, at least
 * METIS_GROUP_VARIANCE of the average), data parallel inside (dp_s x tp_s
 * GPUs, every micro-batch split dp_s ways); the groups of a type's stages
 * use all of that type's GPUs.  For each number of micro-batches, every
 * stage starts at TP 1, layers are balanced by the stages' compute
 * performance and moved off stages over their memory, and while no
 * balance fits, the stage with the least memory left halves its DP and
 * doubles its TP.  Its cost estimate ranks the plans found.
 * ------------------------------------------------------------------- */

/* Metis's min_group_scale_variance and its balancer's attempts. */
#define METIS_GROUP_VARIANCE	0.5
#define METIS_BALANCE_ATTEMPTS	3

struct metis_pub {
	int depth;
	int type[COSTMODEL_MAX_DEPTH];		/* GPU type of each stage */
	int group[COSTMODEL_MAX_DEPTH];		/* GPUs of each stage */
	int dp[COSTMODEL_MAX_DEPTH], tp[COSTMODEL_MAX_DEPTH];
	int first[COSTMODEL_MAX_DEPTH], last[COSTMODEL_MAX_DEPTH];
	double room[COSTMODEL_MAX_DEPTH];	/* memory left, bytes */
	int mbs;				/* samples of one micro-batch */
	int batches;				/* micro-batches per iteration */
};

/* Memory stage @s needs under split @x: state, in-flight activations. */
static double metis_stage_demand(const struct metis *mt,
				 const struct metis_pub *x, int s)
{
	const struct costmodel *cm = mt->bs.cm;
	int inflight = x->depth - s < x->batches ? x->depth - s : x->batches;
	double need = BASELINE_RUNTIME_OVERHEAD_GIB * 1073741824.0;

	for (int l = x->first[s]; l <= x->last[s]; l++)
		need += baseline_layer_state_bytes(cm, x->type[s], x->tp[s], l) +
			inflight * baseline_layer_act_bytes(cm, x->type[s], x->tp[s],
							    x->mbs / x->dp[s], l);
	return need;
}

/*
 * metis_balance() - Metis's LayerLoadBalancer: layers in proportion to
 * each stage's compute performance; a stage over its memory has its
 * share lowered to what fits (times 0.9) and the rest goes to the stages
 * with memory to spare, up to three times.  True when a split fits; the
 * memory left of each stage is in x->room either way.
 */
static bool metis_balance(const struct metis *mt, struct metis_pub *x)
{
	const struct costmodel *cm = mt->bs.cm;
	double perf[COSTMODEL_MAX_DEPTH];

	for (int s = 0; s < x->depth; s++) {
		/* a micro-batch a second through one block: its dp groups
		 * each take their share at once */
		double t = baseline_range_time(cm, x->type[s], x->tp[s],
					       x->mbs / x->dp[s], 1, 1);

		perf[s] = t > 0 ? 1 / t : 0;
	}
	for (int attempt = 0; attempt < METIS_BALANCE_ATTEMPTS; attempt++) {
		double cap, extra = 0, spare = 0, demand[COSTMODEL_MAX_DEPTH];
		double avail[COSTMODEL_MAX_DEPTH];
		bool over = false;

		if (baseline_split_share(cm, x->depth, perf, x->first, x->last) < 0)
			return false;
		for (int s = 0; s < x->depth; s++) {
			cap = costmodel_gpu(cm, x->type[s])->memory_gib * 1073741824.0;
			demand[s] = metis_stage_demand(mt, x, s);
			x->room[s] = cap - demand[s];
			if (!isfinite(demand[s]))
				return false;
			if (demand[s] > cap)
				over = true;
		}
		if (!over)
			return true;
		for (int s = 0; s < x->depth; s++) {
			cap = costmodel_gpu(cm, x->type[s])->memory_gib * 1073741824.0;
			if (demand[s] > cap) {
				double lowered = perf[s] * cap / demand[s] * 0.9;

				extra += perf[s] - lowered;
				perf[s] = lowered;
				avail[s] = 0;
			} else {
				avail[s] = perf[s] * cap / demand[s] - perf[s];
				spare += avail[s];
			}
		}
		if (spare < extra)
			return false;	/* "memory issues persist" */
		for (int s = 0; s < x->depth; s++)
			if (avail[s] > 0)
				perf[s] += extra * avail[s] / spare;
	}
	return false;
}

/* A device group's ring: inside a node when it fits one, else a GPU's
 * share of the network. */
static double metis_group_Bps(const struct metis *mt, int type, int gpus)
{
	int node = baseline_largest_node(mt->bs.cl, type);

	if (gpus <= node)
		return baseline_intra_Bps(mt->bs.cm, mt->bs.cl, type);
	return baseline_type_link_Bps(mt->bs.cm, mt->bs.cl, type) / node;
}

/* Stage @s to @s+1 of @x: the smaller side's groups send at once, each at
 * a GPU's share of the slower network. */
static double metis_p2p_Bps(const struct metis *mt, const struct metis_pub *x,
			    int s)
{
	const struct costmodel_cluster *cl = mt->bs.cl;
	double a = baseline_type_link_Bps(mt->bs.cm, cl, x->type[s]) /
		   baseline_largest_node(cl, x->type[s]);
	double b = baseline_type_link_Bps(mt->bs.cm, cl, x->type[s + 1]) /
		   baseline_largest_node(cl, x->type[s + 1]);
	int streams = x->dp[s] < x->dp[s + 1] ? x->dp[s] : x->dp[s + 1];

	return fmin(a, b) * streams;
}

/*
 * metis_estimate() - Metis's cost estimate of @x: the pipeline over its
 * micro-batches at the slowest stage, each stage's time at its share of
 * the micro-batch with its activation send, then the slowest stage's
 * all-reduce among its DP groups.
 */
static double metis_estimate(const struct metis *mt, const struct metis_pub *x)
{
	const struct costmodel *cm = mt->bs.cm;
	double worst = 0, sum = 0, sync = 0;

	for (int s = 0; s < x->depth; s++) {
		double t = baseline_range_time(cm, x->type[s], x->tp[s],
					       x->mbs / x->dp[s], x->first[s],
					       x->last[s]);
		double w = baseline_range_weight_bytes(cm, x->type[s], x->first[s],
						       x->last[s]) / x->tp[s];

		if (t < 0)
			return INFINITY;
		if (s + 1 < x->depth)
			t += 2 * baseline_boundary_bytes(cm) * x->mbs /
			     metis_p2p_Bps(mt, x, s);
		worst = fmax(worst, t);
		sum += t;
		sync = fmax(sync, baseline_ring_s(w, x->dp[s],
				metis_group_Bps(mt, x->type[s], x->group[s])));
	}
	return (x->batches - 1) * worst + sum + sync;
}

/* Place @x's groups on the cluster and offer the plan with its estimate. */
static int metis_offer(struct metis *mt, const struct metis_pub *x, double iter_s)
{
	struct costmodel_pool pool = { 0 };
	struct costmodel_plan *plan;
	struct costmodel_template *t;
	int rc;

	plan = costmodel_plan_create(mt->bs.cm);
	if (!plan)
		return -ENOMEM;
	plan->micro_batch = x->mbs;
	t = baseline_template_alloc(plan, x->depth, 1);
	if (!t) {
		rc = -ENOMEM;
		goto out;
	}
	for (int s = 0; s < x->depth; s++) {
		struct costmodel_stage *st = &t->stages[s];

		st->gpu = x->type[s];
		st->tp = x->tp[s];
		st->dp = x->dp[s];
		st->first_layer = x->first[s];
		st->last_layer = x->last[s];
		st->ep = 1;
		st->etp = st->tp;
		st->edp = st->dp;
	}
	t->micro_batches = x->batches;
	free(t->placement);
	t->placement = calloc((size_t)costmodel_template_slots(t), sizeof(*t->placement));
	rc = t->placement ? costmodel_pool_init(&pool, mt->bs.cl) : -ENOMEM;
	for (int s = 0; s < x->depth && rc == 0; s++)
		for (int k = 0; k < x->dp[s] && rc == 0; k++)
			rc = costmodel_pool_take(mt->bs.cl, &pool, x->type[s], x->tp[s],
						 costmodel_template_group(t, 0, s, k));
	if (rc == 0)
		rc = baseline_search_offer_estimate(&mt->bs, plan, iter_s);
	else if (baseline_rc_rejects(rc))
		rc = 0;		/* the groups do not pack into the nodes */
	costmodel_pool_fini(&pool);
out:
	costmodel_plan_free(plan);
	return rc;
}

/*
 * metis_intra() - Metis's IntraStagePlanGenerator for the device groups
 * and micro-batches of @x: strategies from all-DP, each balanced and
 * estimated; it stops at the first that fits without rebalancing.
 */
static int metis_intra(struct metis *mt, struct metis_pub *x)
{
	for (int s = 0; s < x->depth; s++) {
		x->dp[s] = x->group[s];
		x->tp[s] = 1;
	}
	for (;;) {
		bool valid = true, fits;
		int pick = -1;

		if (baseline_search_expired(&mt->bs))
			return 0;
		for (int s = 0; s < x->depth; s++) {
			int share = x->mbs / x->dp[s];

			if (x->mbs % x->dp[s] || share < 1 || share > COSTMODEL_MAX_MBS ||
			    x->tp[s] > COSTMODEL_MAX_TP ||
			    x->tp[s] > baseline_largest_node(mt->bs.cl, x->type[s]))
				valid = false;
		}
		if (valid) {
			mt->bs.states++;
			fits = metis_balance(mt, x);
			if (fits) {
				int rc = metis_offer(mt, x, metis_estimate(mt, x));

				if (rc < 0)
					return rc;
				return 0;
			}
		}
		/* The stage with the least memory left halves its DP. */
		for (int s = 0; s < x->depth; s++)
			if (x->dp[s] > 1 && (pick < 0 || x->room[s] < x->room[pick]))
				pick = s;
		if (pick < 0)
			return 0;
		x->dp[pick] /= 2;
		x->tp[pick] *= 2;
	}
}

/* Every number of micro-batches: micro-batches of a power of two. */
static int metis_batches(struct metis *mt, struct metis_pub *x)
{
	for (int mbs = 1; mbs <= mt->global_batch; mbs *= 2) {
		int rc;

		if (mt->global_batch % mbs)
			break;
		x->mbs = mbs;
		x->batches = mt->global_batch / mbs;
		rc = metis_intra(mt, x);
		if (rc < 0 || mt->bs.expired)
			return rc;
	}
	return 0;
}

/*
 * metis_groups() - every ordered way to cut the GPUs of the type in
 * order slot @i into its stages' device groups (powers of two of at
 * least @least GPUs that use them all), from stage @s on.
 */
static int metis_groups(struct metis *mt, struct metis_pub *x, int i, int s,
			int left, int stages_left, int least)
{
	int rc;

	/* The cuts alone can outlast any budget (10,000 node groups of
	 * eight types: 40 s for a 10 s budget), leaf or none. */
	if (baseline_search_expired(&mt->bs))
		return 0;
	if (stages_left == 0) {
		if (left)
			return 0;
		if (i + 1 == mt->ntypes)
			return metis_batches(mt, x);
		return metis_groups(mt, x, i + 1, s, mt->count[mt->order[i + 1]],
				    mt->per_type[i + 1], least);
	}
	for (int g = 1; g <= left; g *= 2) {
		if (g < least || (stages_left == 1 && g != left))
			continue;
		x->type[s] = mt->type[mt->order[i]];
		x->group[s] = g;
		rc = metis_groups(mt, x, i, s + 1, left - g, stages_left - 1, least);
		if (rc < 0 || mt->bs.expired)
			return rc;
	}
	return 0;
}

/* Every split of the stages among the ordered types, each at least one. */
static int metis_pub_counts(struct metis *mt, struct metis_pub *x, int i,
			    int left, int total)
{
	int rc;

	if (baseline_search_expired(&mt->bs))
		return 0;
	if (i == mt->ntypes - 1) {
		int gpus = 0;

		mt->per_type[i] = left;
		for (int k = 0; k < mt->ntypes; k++)
			gpus += mt->count[k];
		return metis_groups(mt, x, 0, 0, mt->count[mt->order[0]],
				    mt->per_type[0],
				    (int)(METIS_GROUP_VARIANCE * gpus / total));
	}
	for (int k = 1; k <= left - (mt->ntypes - 1 - i); k++) {
		mt->per_type[i] = k;
		rc = metis_pub_counts(mt, x, i + 1, left - k, total);
		if (rc < 0 || mt->bs.expired)
			return rc;
	}
	return 0;
}

int planner_metis(const struct policy_request *req,
		  struct costmodel_plan **planp)
{
	struct metis mt = { 0 };
	int count[COSTMODEL_MAX_GPU_TYPES];
	int depth_max, rc;

	*planp = NULL;
	rc = baseline_search_init(&mt.bs, req, "metis");
	if (rc < 0)
		return rc;
	baseline_count_gpus(req->cm, req->cl, count);
	for (int g = 0; g < COSTMODEL_MAX_GPU_TYPES; g++) {
		if (!count[g])
			continue;
		mt.type[mt.ntypes] = g;
		mt.count[mt.ntypes] = count[g];
		mt.largest[mt.ntypes] = baseline_largest_node(req->cl, g);
		mt.order[mt.ntypes] = mt.ntypes;
		mt.ntypes++;
	}
	mt.nlayers = costmodel_num_layers(req->cm);
	mt.global_batch = baseline_global_batch(req->cm);
	depth_max = mt.nlayers - 2 < COSTMODEL_MAX_DEPTH ? mt.nlayers - 2 :
							   COSTMODEL_MAX_DEPTH;
	do {
		for (int d = mt.ntypes; d <= depth_max; d++) {
			struct metis_pub x = { .depth = d };

			rc = baseline_published(&mt.bs) ?
			     metis_pub_counts(&mt, &x, 0, d, d) :
			     metis_counts(&mt, 0, d, d);
			if (rc < 0 || mt.bs.expired)
				break;
		}
	} while (rc == 0 && !mt.bs.expired && mt.ntypes &&
		 metis_next_order(mt.order, mt.ntypes));
	if (rc == 0)
		rc = baseline_search_finish(&mt.bs, true, planp);
	baseline_search_fini(&mt.bs);
	return rc;
}
