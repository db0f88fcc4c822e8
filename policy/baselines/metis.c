/*
 * metis.c - the Metis baseline (Um et al., USENIX ATC 2024), as the
 * Arachne paper's §3.1 and Metis's public planner describe it.  The outer
 * loops: an order of the GPU types (stages take device types in that
 * order), the number of stages and how many of them each type gets, the
 * stage device-group size (a power of two) and the micro-batch size.
 * Inside a stage Metis prefers data parallelism: every stage starts at
 * TP = 1, and while the plan does not fit, the stage under the most
 * memory pressure doubles its TP degree (its device group doubles, as
 * Metis halves DP and doubles TP).  Layers go to stages in one shot by
 * compute share (the fill's speed-proportional split).  Metis explores
 * until it has seen every combination or its budget is spent.
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
			rc = metis_counts(&mt, 0, d, d);
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
