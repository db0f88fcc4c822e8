/*
 * arachne.c - the learned planner at planning time.
 *
 * 1. K constructions (Algorithm 1) in parallel threads: one greedy, the
 *    rest sampled from the policy, each with its own generator seeded from
 *    (seed, k); the cost model keeps the best plan any of them built.
 * 2. Beyond the paper: a bounded local improvement (improve.c) from the
 *    best distinct ones of those plans and from the best structured plan
 *    (starts.c), then single-layer moves on the priced plan.
 *
 * Everything is bounded by counts, not by the clock, so the same seed
 * gives the same plan; the time budget only cuts a search that would
 * otherwise overrun it.
 */
#define AR_INTERNAL 1
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ar.h"
#include "arachne_private.h"

#define ROLLOUTS		POLICY_BATCH	/* constructions: 1 greedy + 31 sampled */
/*
 * Plans improved: up to seven distinct rollout plans and the structured
 * one.  The work cap, not this count, bounds a large cluster's climb (two
 * or four starts use it up there); on a small one most climbs end in a few
 * thousand units, and more of the policy's plans reach more hills.
 */
#define STARTS		8
/*
 * Work of the local improvement, counted per template filled as the
 * cluster's nodes plus the template's stages times the model's layers
 * (packing walks the nodes, the layer split the stages and layers):
 * about a second of CPU on the development machine whatever the cluster
 * and model, and a count, so the same seed still gives the same plan.
 */
#define IMPROVE_WORK		POLICY_START_WORK	/* per start */
/*
 * All starts: twice one start's, and twice that above 512 GPUs, where a
 * plan may take 3 s rather than 1 s and the climbs from two more starts
 * find a higher hill on 8 of the grid's and the unseen set's 51 cells
 * there (docs/policy.md, "The distributed optimizer in the masks").
 */
#define IMPROVE_WORK_TOTAL	(2 * POLICY_START_WORK)
#define IMPROVE_WORK_TOTAL_LARGE (4 * POLICY_START_WORK)
#define LARGE_CLUSTER_GPUS	512
/*
 * The last climb, from the best plan with its stages' order in the moves:
 * work of its own, so that it takes none from the starts and can only
 * add (half a start's: twice as much gained 0.05 % more on the unseen set).
 */
#define REORDER_WORK		(POLICY_START_WORK / 2)

/* Models that plan with another model's policy (the paper's choice). */
static const struct {
	const char *model;
	const char *policy;
} borrowed[] = {
	{ "qwen3-64b", "qwen3-32b" },
};

static bool file_exists(const char *path)
{
	return access(path, R_OK) == 0;
}

int policy_default_path(const struct costmodel *cm, char *buf, size_t len)
{
	const char *dir = costmodel_profiles_dir(cm);
	const char *model = costmodel_model(cm)->name;
	const char *kind = costmodel_model(cm)->experts > 0 ? "mixtral-8x7b" :
			   "qwen3-32b";

	snprintf(buf, len, "%s/policies/%s.safetensors", dir, model);
	if (file_exists(buf))
		return 0;
	for (size_t i = 0; i < ARRAY_SIZE(borrowed); i++) {
		if (strcmp(borrowed[i].model, model) != 0)
			continue;
		snprintf(buf, len, "%s/policies/%s.safetensors", dir,
			 borrowed[i].policy);
		if (file_exists(buf))
			return 0;
	}
	snprintf(buf, len, "%s/policies/%s.safetensors", dir, kind);
	if (file_exists(buf))
		return 0;
	return ar_seterr(-AR_ENOTFOUND,
			 "no policy for model %s in %s/policies: train one with arachne-train or pass --policy",
			 model, dir);
}

int policy_net_load_for(struct policy_net *net, const struct costmodel *cm,
			const char *path)
{
	char buf[4096];
	int rc;

	if (!path) {
		rc = policy_default_path(cm, buf, sizeof(buf));
		if (rc < 0)
			return rc;
		path = buf;
	}
	rc = policy_net_init(net, 0);
	if (rc < 0)
		return rc;
	rc = policy_weights_load(net, NULL, path);
	if (rc < 0)
		policy_net_fini(net);
	return rc;
}


/*
 * Why nothing fits: fill the template that needs the least memory per GPU
 * (the GPU type with the most memory, its widest TP, as deep as its GPUs
 * and the model allow) and report what the fill says of it.
 */
int policy_explain_infeasible(const struct policy_request *req)
{
	const struct costmodel *cm = req->cm;
	const char *cluster = req->cl->name ? req->cl->name : "the cluster";
	const char *model = costmodel_model(cm)->name;
	struct costmodel_pool pool = { 0 };
	struct costmodel_plan *plan = NULL;
	struct costmodel_shape shape = { 0 };
	int best = -1, tp, rc;

	if (costmodel_pool_init(&pool, req->cl) < 0)
		return -ENOMEM;
	for (int g = 0; g < costmodel_num_gpus(cm); g++)
		if (pool.free_by_type[g] && (best < 0 ||
		    costmodel_gpu(cm, g)->memory_gib > costmodel_gpu(cm, best)->memory_gib))
			best = g;
	tp = best < 0 ? 0 : costmodel_pool_largest_free(&pool, best);
	while (tp > COSTMODEL_MAX_TP || (tp & (tp - 1)))
		tp--;	/* a power of two up to the largest node */
	shape.depth = tp ? pool.free_by_type[best] / tp : 0;
	if (shape.depth > COSTMODEL_MAX_DEPTH)
		shape.depth = COSTMODEL_MAX_DEPTH;
	if (shape.depth > costmodel_model(cm)->blocks)
		shape.depth = costmodel_model(cm)->blocks;
	for (int s = 0; s < shape.depth; s++) {
		shape.gpu[s] = best;
		shape.tp[s] = tp;
	}
	plan = costmodel_plan_create(cm);
	if (!plan) {
		costmodel_pool_fini(&pool);
		return -ENOMEM;
	}
	rc = shape.depth ? costmodel_fill_add(cm, req->cl, &pool, plan, &shape, NULL) :
			   -AR_EINFEASIBLE;
	if (rc < 0 && rc != -ENOMEM && shape.depth)
		rc = ar_seterr(-AR_EINFEASIBLE,
			       "no template fits %s for %s; even %d stage%s of %s at TP %d do%s not: %s",
			       cluster, model, shape.depth,
			       shape.depth == 1 ? "" : "s",
			       costmodel_gpu(cm, best)->name, tp,
			       shape.depth == 1 ? "es" : "", ar_errmsg());
	else if (rc != -ENOMEM)
		rc = ar_seterr(-AR_EINFEASIBLE,
			       "no template the policy built fits %s for %s",
			       cluster, model);
	costmodel_plan_free(plan);
	costmodel_pool_fini(&pool);
	return rc;
}

/* ---------------------------------------------------------------------
 * Construction rollouts.
 * ------------------------------------------------------------------- */

static void batch_task(void *p, int thread, int i)
{
	struct policy_batch *b = p;
	int k = b->first + i;
	struct policy_rollout_opts opts = {
		.draw = !b->net ? POLICY_DRAW_UNIFORM :
			k == 0 ? POLICY_DRAW_GREEDY : POLICY_DRAW_SAMPLE,
		.depth_temperature = POLICY_PLAN_DEPTH_TEMPERATURE,
		.stage_temperature = POLICY_PLAN_STAGE_TEMPERATURE,
	};
	struct policy_episode ep;
	struct policy_work w = { 0 };
	struct policy_rng rng;
	int rc;

	if (i > 0 && b->dl && planner_deadline_passed(b->dl)) {
		b->rc[i] = -AR_ETIMEOUT;
		snprintf(b->err[i], sizeof(b->err[i]), "budget spent");
		return;
	}
	policy_rng_seed(&rng, b->seed, (uint64_t)k + 1);
	rc = b->net ? policy_work_init(&w, 1) : 0;
	if (rc == 0) {
		rc = policy_episode_init(&ep, b->env);
		if (rc == 0) {
			rc = policy_rollout(&ep, b->net, b->net ? &w : NULL, &rng,
					    &opts, &b->trace[i]);
			b->priced[i] = ep.plans_priced;
			if (rc == 0 && b->trace[i].throughput > 0.0 &&
			    !(b->plan[i] = costmodel_plan_clone(ep.best)))
				rc = -ENOMEM;
			policy_episode_fini(&ep);
		}
		if (b->net)
			policy_work_fini(&w);
	}
	b->rc[i] = rc;
	if (rc < 0)
		snprintf(b->err[i], sizeof(b->err[i]), "%s", ar_errmsg());
}

void policy_batch_run(struct policy_batch *b, int threads)
{
	planner_parallel(batch_task, b, b->n, threads);
}

void policy_batch_clear(struct policy_batch *b)
{
	for (int i = 0; i < POLICY_BATCH; i++) {
		policy_trace_fini(&b->trace[i]);
		costmodel_plan_free(b->plan[i]);
		b->plan[i] = NULL;
		b->rc[i] = 0;
		b->priced[i] = 0;
	}
}

int policy_batch_best(const struct policy_batch *b)
{
	int best = -1;

	for (int i = 0; i < b->n; i++)
		if (b->plan[i] && (best < 0 || b->trace[i].throughput >
					       b->trace[best].throughput))
			best = i;
	return best;
}

/*
 * The policy's rollouts; add what they priced to *@priced.  Fails, with
 * the reason, when none built a plan.
 */
static int rollouts_run(const struct policy_request *req, struct policy_batch *b,
			int threads, long *priced)
{
	policy_batch_run(b, threads);
	for (int k = 0; k < b->n; k++)
		*priced += b->priced[k];
	if (policy_batch_best(b) >= 0)
		return 0;
	for (int k = 0; k < b->n; k++)
		if (b->rc[k] < 0)
			return ar_seterr(b->rc[k], "%s", b->err[k]);
	return policy_explain_infeasible(req);
}

/* ---------------------------------------------------------------------
 * The planner.
 * ------------------------------------------------------------------- */

/*
 * The plans the local improvement starts from, in order: the best
 * rollout plan, the best structured one (with the search planners' plans
 * when they seed it), then the next distinct rollout plans.
 */
static int climb_starts(const struct policy_request *req,
			const struct policy_env *env,
			const struct policy_batch *rollouts, int threads,
			struct policy_candidate *starts,
			struct costmodel_plan **rawp, long *priced)
{
	struct policy_candidate structured = { 0 };
	bool ok[POLICY_BATCH];
	int n;

	for (int k = 0; k < rollouts->n; k++)
		ok[k] = rollouts->rc[k] == 0;
	n = policy_rollout_starts(rollouts->trace, ok, rollouts->n, starts, STARTS);
	if (n < 0 || req->rollout_starts_only)
		return n;
	if (policy_structured_start(env, threads, &structured, priced) < 0)
		return -ENOMEM;
	if (req->seed_planners)
		policy_planner_starts(req, env, threads, &structured, rawp, priced);
	if (structured.thr <= 0.0)
		return n;
	if (n == 0) {
		starts[0] = structured;
		return 1;
	}
	if (n == STARTS)
		n--;
	memmove(&starts[2], &starts[1], (n - 1) * sizeof(starts[0]));
	starts[1] = structured;
	return n + 1;
}

/*
 * The climb from @best once more, now with each stage moved elsewhere in
 * its template among the moves (policy_climb.order_moves), on work of
 * its own.
 */
static int reorder(struct policy_climb *climb, struct policy_candidate *best)
{
	struct policy_climb last = *climb;
	int rc;

	last.order_moves = true;
	last.work = 0.0;
	rc = policy_climb_run(&last, best, REORDER_WORK);
	climb->priced = last.priced;
	climb->work += last.work;
	return rc;
}

/*
 * Climb from the starts, each with a bounded share of the work (another
 * start often climbs past the first, and on a small cluster they all
 * fit), climb from the best plan once more with the order of its stages
 * in the moves, then move single layers on it.
 */
static int improve(const struct policy_request *req, const struct policy_env *env,
		   const struct policy_batch *rollouts, struct policy_climb *climb,
		   struct costmodel_plan **planp)
{
	struct policy_candidate *starts = calloc(STARTS, sizeof(*starts)), *best = NULL;
	struct policy_candidate paired = { 0 };
	struct costmodel_plan *plan = NULL, *raw = NULL;
	double total = env->gpus > LARGE_CLUSTER_GPUS ? IMPROVE_WORK_TOTAL_LARGE :
							 IMPROVE_WORK_TOTAL;
	int rc, nstarts;

	if (!starts)
		return -ENOMEM;
	rc = nstarts = climb_starts(req, env, rollouts, climb->threads, starts,
				    &raw, &climb->priced);
	if (rc < 0)
		goto out;
	for (int s = 0; s < nstarts && climb->work < total; s++) {
		rc = policy_climb_run(climb, &starts[s],
				      fmin(IMPROVE_WORK, total - climb->work));
		if (rc < 0)
			goto out;
		if (!best || starts[s].thr > best->thr)
			best = &starts[s];
	}
	/*
	 * Then the best paired plan (starts.c), the one start whose first
	 * template is capped: it stands as priced, and climbs with the work
	 * the others left (much of it on a small cluster, little on a large
	 * one).  Last, so that it takes no work from them and can only add.
	 */
	if (!req->rollout_starts_only && climb->work < total) {
		rc = policy_paired_start(env, climb->threads, &paired, &climb->priced);
		if (rc > 0)
			rc = policy_climb_run(climb, &paired,
					      fmin(IMPROVE_WORK, total - climb->work));
		if (rc < 0)
			goto out;
		if (paired.thr > 0.0 && (!best || paired.thr > best->thr))
			best = &paired;
	}
	if (!best)
		goto out;	/* no plan to climb from: *planp stays NULL */
	rc = reorder(climb, best);
	if (rc < 0)
		goto out;
	rc = policy_candidate_fill(env, best, &plan, NULL);
	if (rc < 0)
		goto out;
	climb->priced += best->n;
	rc = policy_layer_moves(env, &plan, &climb->priced, climb->dl);
	if (rc < 0)
		goto out;
	/* --seed-planners: a search planner's own plan stands when faster */
	if (raw && raw->predicted.samples_per_s > plan->predicted.samples_per_s) {
		rc = policy_layer_moves(env, &raw, &climb->priced, climb->dl);
		if (rc < 0)
			goto out;
		costmodel_plan_free(plan);
		plan = raw;
		raw = NULL;
	}
	*planp = plan;
	plan = NULL;
out:
	free(starts);
	costmodel_plan_free(raw);
	costmodel_plan_free(plan);
	return rc;
}

int planner_arachne(const struct policy_request *req,
			struct costmodel_plan **planp)
{
	struct planner_deadline dl;
	int threads = planner_threads(req);
	struct policy_batch *rollouts = NULL;
	struct policy_net net;
	struct policy_env env;
	struct policy_priced priced_set;
	struct policy_climb climb = { .env = &env, .threads = threads, .dl = &dl,
				      .priced_set = &priced_set,
				      .depth_moves = true };
	struct costmodel_plan *plan = NULL;
	char why[512] = "";
	int rc;

	*planp = NULL;
	policy_priced_init(&priced_set);
	planner_deadline_init(&dl, req);
	rc = policy_net_load_for(&net, req->cm, req->policy_path);
	if (rc < 0)
		return rc;
	rc = policy_env_init(&env, req->cm, req->cl);
	if (rc < 0)
		goto out_net;

	rollouts = calloc(1, sizeof(*rollouts));
	if (!rollouts) {
		rc = -ENOMEM;
		goto out;
	}
	*rollouts = (struct policy_batch){ .env = &env, .net = &net,
					   .seed = req->seed, .n = ROLLOUTS,
					   .dl = &dl };
	rc = rollouts_run(req, rollouts, threads, &climb.priced);
	/*
	 * When no rollout built a plan the structured plans may still fit
	 * (a large MoE model whose experts fit only when tiled over many
	 * replicas): climb from them before giving the rollouts' reason.
	 */
	if (rc < 0 && (rc != -AR_EINFEASIBLE || req->no_climb ||
		       req->rollout_starts_only))
		goto out;
	if (rc < 0)
		snprintf(why, sizeof(why), "%s", ar_errmsg());
	if (req->no_climb) {
		int k = policy_batch_best(rollouts);

		plan = rollouts->plan[k];
		rollouts->plan[k] = NULL;
	} else {
		rc = improve(req, &env, rollouts, &climb, &plan);
		if (rc < 0)
			goto out;
		if (!plan) {
			rc = ar_seterr(-AR_EINFEASIBLE, "%s", why);
			goto out;
		}
	}

	snprintf(plan->planner, sizeof(plan->planner), "arachne");
	plan->plans_priced = climb.priced;
	/* its search is bounded by counts; only the clock can cut it short */
	plan->search_complete = !planner_deadline_passed(&dl);
	plan->planning_s = ar_now() - dl.start;
	*planp = plan;
out:
	if (rollouts)
		policy_batch_clear(rollouts);
	free(rollouts);
	policy_priced_fini(&priced_set);
out_net:
	policy_net_fini(&net);
	return rc;
}
