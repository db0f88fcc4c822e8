/*
 * espresso.c - the Espresso baseline, as the Arachne paper's §3.1 and
 * Espresso's public allocator and stage placer describe it: no TP search
 * (every stage at TP = 1), a bounded tree search over which GPU type each
 * pipeline stage maps to, layers split by each stage's share of the peak
 * TFLOPS.  One pipeline, replicated as often as its GPU types allow; GPUs
 * it cannot use stay idle.  Espresso's objective is dollars under a time
 * SLO (--objective cost with --min-samples-per-s); the benchmark runs it
 * for throughput like every planner.
 *
 * The tree: depth d, then stage 0's GPU type, stage 1's, ...; the stages
 * of one type stay next to each other (a child continues its parent's
 * type or opens one not used yet), so the tree has a leaf per ordered
 * split of the stages among the types rather than one per sequence.  A
 * branch is cut when an optimistic bound on any completion cannot beat
 * the best plan so far (throughput objective only): a pipeline runs at no
 * more than the sum of its stages' speeds, and it cannot have more
 * replicas than its scarcest GPU type allows.
 *
 * Published steering: Espresso's own estimator with full activation
 * recomputation (its llm-analysis runs with activation_recomputation=2):
 * a layer costs forward twice and backward once, holds its state (16 B a
 * parameter) and only its input per micro-batch in flight.  Shared
 * steering: the fill splits by speed within memory and prices.
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

/* Samples/s the best plan so far reaches (by the steering's estimate). */
static double espresso_best(const struct espresso *e)
{
	if (!e->bs.best)
		return 0;
	if (baseline_published(&e->bs))
		return e->bs.best->global_batch / e->bs.best_estimate_s;
	return e->bs.best->predicted.samples_per_s;
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

/*
 * espresso_published() - Espresso's own plan for the leaf: layers by TFLOPS
 * share, its memory model with full recomputation, its estimate; tried at
 * every micro-batch size.  @plan holds the placed template (one stage per
 * type slot, as many replicas as the types allow).
 */
static int espresso_published(struct espresso *e, struct costmodel_plan *plan)
{
	const struct costmodel *cm = e->bs.cm;
	const struct costmodel_model *m = costmodel_model(cm);
	struct costmodel_template *t = &plan->templates[0];
	int first[COSTMODEL_MAX_DEPTH], last[COSTMODEL_MAX_DEPTH];
	double share[COSTMODEL_MAX_DEPTH];
	int rc = 0;

	for (int s = 0; s < e->depth; s++)
		share[s] = costmodel_gpu(cm, t->stages[s].gpu)->peak_tflops;
	if (baseline_split_share(cm, e->depth, share, first, last) < 0)
		return 0;
	for (int s = 0; s < e->depth; s++) {
		t->stages[s].first_layer = first[s];
		t->stages[s].last_layer = last[s];
	}
	/* the plan runs as Espresso estimated it: recomputing every layer */
	plan->recompute = COSTMODEL_RECOMPUTE_FULL;
	for (int i = 0; i < BASELINE_NUM_MBS && rc == 0; i++) {
		int mbs = baseline_mbs(i);
		int micro_batches = (plan->global_batch + mbs * t->replicas - 1) /
				    (mbs * t->replicas);
		double worst = 0, sum = 0, sync = 0;
		bool fits = true;

		if (mbs > plan->global_batch)
			break;
		e->bs.states++;
		for (int s = 0; s < e->depth && fits; s++) {
			int g = t->stages[s].gpu, inflight = e->depth - s;
			double mem = BASELINE_RUNTIME_OVERHEAD_GIB * 1073741824.0;
			double time = 0, w;

			for (int l = first[s]; l <= last[s]; l++) {
				const struct costmodel_layer_profile *p;
				enum costmodel_layer_type type =
					l == 0 ? COSTMODEL_LAYER_EMBED :
					l == costmodel_num_layers(cm) - 1 ?
					COSTMODEL_LAYER_HEAD : COSTMODEL_LAYER_BLOCK;

				if (costmodel_layer_is_moe(cm, l))
					type = COSTMODEL_LAYER_ATTN;
				p = costmodel_profile(cm, g, 1, mbs, type);
				if (!p || !p->present) {
					fits = false;
					break;
				}
				/* recomputation: the forward runs twice */
				time += baseline_layer_time(cm, g, 1, mbs, l) +
					p->fwd_ms / 1e3;
				mem += baseline_layer_state_bytes(cm, g, 1, l);
			}
			/* only each stage's input stays per micro-batch in flight */
			mem += inflight * (double)mbs * m->seq_len * m->hidden * 2.0 *
			       (last[s] - first[s] + 1);
			if (!fits || mem > costmodel_gpu(cm, g)->memory_gib * 1073741824.0) {
				fits = false;
				break;
			}
			if (s + 1 < e->depth)
				time += 2 * baseline_boundary_bytes(cm) * mbs /
					baseline_type_link_Bps(cm, e->bs.cl, g);
			w = baseline_range_weight_bytes(cm, g, first[s], last[s]);
			worst = fmax(worst, time);
			sum += time;
			sync = fmax(sync, baseline_ring_s(w, t->replicas,
					baseline_type_link_Bps(cm, e->bs.cl, g)));
		}
		if (!fits)
			continue;
		plan->micro_batch = mbs;
		t->micro_batches = micro_batches;
		rc = baseline_search_offer_estimate(&e->bs, plan,
			(micro_batches - 1) * worst + sum + sync);
	}
	return rc;
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
	if (baseline_published(&e->bs)) {
		opts.place_only = true;
		rc = costmodel_fill_add(e->bs.cm, e->bs.cl, &pool, plan, &shape, &opts);
		if (rc == 0)
			rc = espresso_published(e, plan);
		else if (baseline_rc_rejects(rc))
			rc = 0;
		goto out;
	}
	e->bs.plans_priced++;
	e->bs.states++;
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
		/* dollars a sample have no such bound: the tree is searched whole */
		if (e->bs.req->objective == POLICY_OBJECTIVE_COST ||
		    espresso_bound(e, k + 1) > espresso_best(e)) {
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
