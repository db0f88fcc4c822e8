/*
 * espresso.c - the Espresso baseline, as the Arachne paper's §3.1
 * describes it: no TP search (every stage at TP = 1), a bounded tree
 * search over which GPU type each pipeline stage maps to, and layers
 * split by each stage's compute share.  One pipeline, replicated as often
 * as its GPU types allow; GPUs it cannot use stay idle.
 *
 * The tree: depth d, then stage 0's GPU type, stage 1's, ...; the stages
 * of one type stay next to each other (a child continues its parent's
 * type or opens one not used yet), so the tree has a leaf per ordered
 * split of the stages among the types rather than one per sequence.  A
 * branch is cut when an optimistic bound on any completion cannot beat
 * the best plan priced so far: with layers split by compute share a
 * pipeline runs at no more than the sum of its stages' speeds, and it
 * cannot have more replicas than its scarcest GPU type allows.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ar.h"
#include "baseline.h"

struct espresso {
	struct baseline_search bs;
	int ntypes;
	int type[COSTMODEL_MAX_GPU_TYPES];	/* present types, fastest first */
	int count[COSTMODEL_MAX_GPU_TYPES];	/* GPUs of each */
	double speed[COSTMODEL_MAX_GPU_TYPES];	/* one TP-1 stage, samples/s */
	int depth;
	int seq[COSTMODEL_MAX_DEPTH];		/* slot of each stage's type */
	int used[COSTMODEL_MAX_GPU_TYPES];	/* stages per slot so far */
};

/* Samples/s the best plan so far reaches; 0 before one prices. */
static double espresso_best(const struct espresso *e)
{
	return e->bs.best ? e->bs.best->predicted.samples_per_s : 0;
}

/*
 * espresso_bound() - the most samples/s a completion of the first @k
 * stages could reach: replicas limited by the types already chosen, every
 * remaining stage as fast as the fastest type.
 */
static double espresso_bound(const struct espresso *e, int k)
{
	double sum = 0;
	int replicas = -1;

	for (int s = 0; s < k; s++)
		sum += e->speed[e->seq[s]];
	sum += (e->depth - k) * e->speed[0];
	for (int i = 0; i < e->ntypes; i++) {
		int r;

		if (!e->used[i])
			continue;
		r = e->count[i] / e->used[i];
		if (replicas < 0 || r < replicas)
			replicas = r;
	}
	if (replicas < 0)
		replicas = e->count[0];
	return replicas * sum;
}

static int espresso_leaf(struct espresso *e)
{
	struct costmodel_shape shape = { .depth = e->depth };
	struct costmodel_fill_opts opts;
	struct costmodel_pool pool = { 0 };
	struct costmodel_plan *plan;
	int rc;

	plan = costmodel_plan_create(e->bs.cm);
	if (!plan)
		return -ENOMEM;
	rc = costmodel_pool_init(&pool, e->bs.cl);
	if (rc < 0)
		goto out;
	for (int s = 0; s < e->depth; s++) {
		shape.gpu[s] = e->type[e->seq[s]];
		shape.tp[s] = 1;
	}
	baseline_fill_opts(&opts);
	e->bs.plans_priced++;
	rc = costmodel_fill_add(e->bs.cm, e->bs.cl, &pool, plan, &shape, &opts);
	if (rc == 0)
		rc = baseline_search_offer(&e->bs, plan);
	else if (baseline_rc_rejects(rc))
		rc = 0;
out:
	costmodel_pool_fini(&pool);
	costmodel_plan_free(plan);
	return rc;
}

static int espresso_branch(struct espresso *e, int k)
{
	int rc;

	if (baseline_search_expired(&e->bs))
		return 0;
	if (k == e->depth)
		return espresso_leaf(e);
	for (int i = 0; i < e->ntypes; i++) {
		if (e->used[i] >= e->count[i])
			continue;	/* not one GPU of it left per replica */
		/* A type's stages stay together: continue it or open a new one. */
		if (k && i != e->seq[k - 1] && e->used[i])
			continue;
		e->seq[k] = i;
		e->used[i]++;
		if (espresso_bound(e, k + 1) > espresso_best(e)) {
			rc = espresso_branch(e, k + 1);
			if (rc < 0)
				return rc;
		}
		e->used[i]--;
	}
	return 0;
}

int planner_espresso(const struct policy_request *req,
		     struct costmodel_plan **planp)
{
	struct espresso e = { 0 };
	int count[COSTMODEL_MAX_GPU_TYPES];
	int nlayers, depth_max, rc;

	*planp = NULL;
	rc = baseline_search_init(&e.bs, req, "espresso");
	if (rc < 0)
		return rc;
	baseline_count_gpus(req->cm, req->cl, count);
	for (int g = 0; g < COSTMODEL_MAX_GPU_TYPES; g++) {
		double v = count[g] ? costmodel_stage_speed(req->cm, g, 1) : 0;
		int at;

		if (v <= 0)
			continue;
		/* insertion by speed, fastest first */
		at = e.ntypes++;
		while (at > 0 && e.speed[at - 1] < v) {
			e.type[at] = e.type[at - 1];
			e.count[at] = e.count[at - 1];
			e.speed[at] = e.speed[at - 1];
			at--;
		}
		e.type[at] = g;
		e.count[at] = count[g];
		e.speed[at] = v;
	}
	nlayers = costmodel_num_layers(req->cm);
	depth_max = nlayers - 2 < COSTMODEL_MAX_DEPTH ? nlayers - 2 :
							COSTMODEL_MAX_DEPTH;
	for (int d = 1; d <= depth_max && e.ntypes; d++) {
		e.depth = d;
		memset(e.used, 0, sizeof(e.used));
		rc = espresso_branch(&e, 0);
		if (rc < 0 || baseline_search_expired(&e.bs))
			break;
	}
	if (rc == 0)
		rc = baseline_search_finish(&e.bs, true, planp);
	baseline_search_fini(&e.bs);
	return rc;
}
