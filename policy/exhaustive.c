/*
 * exhaustive.c - the reference planner: every sequence of structural
 * templates, each completed by the fill, with branch-and-bound.
 *
 * The search space (docs/planners.md):
 *  - a template is a multiset of stage options (GPU type, TP degree) of
 *    size 1..max depth, its stages grouped by GPU type (larger TP first
 *    inside a group), in every order of the groups;
 *  - a plan is a sequence of up to EXH_MAX_TEMPLATES templates in
 *    non-decreasing canonical order (the fill packs each into what the
 *    earlier ones left);
 *  - a template is only added when it makes the plan faster, and a branch
 *    is cut when even an optimistic bound on what its free GPUs could add
 *    (each GPU at its best profiled per-GPU rate, no bubbles, and no more
 *    gradient synchronization than the plan already pays) cannot beat the
 *    best plan found.
 * The first level is shared among the threads of planner_parallel();
 * each explores its subtrees depth first.  The budget is checked before every fill.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "policy_private.h"

#define EXH_MAX_DEPTH 8		/* the paper's D for its search-space count */
#define EXH_MAX_TEMPLATES 4
#define EXH_MAX_OPTIONS (COSTMODEL_MAX_GPU_TYPES * COSTMODEL_NUM_TP)

struct exh_option {
	int gpu, tp;
};

/*
 * The most templates the search keeps.  A 4-type cluster has 1.5 million;
 * 10,000 node groups of eight types had 20 million after 2.5 s of a 5 s
 * budget (720 MB of keys whose free() alone overran the budget by 75 ms),
 * far more than any budget can fill.  Past the cap the search says it is
 * incomplete.
 */
#define EXH_MAX_KEYS (4u << 20)

_Static_assert(EXH_MAX_OPTIONS <= UINT8_MAX + 1, "an option index must fit a key's byte");

/* A template by the option index of each stage, non-decreasing: 9 bytes. */
struct exh_key {
	uint8_t depth;
	uint8_t opt[EXH_MAX_DEPTH];
};

struct exh_search {
	const struct policy_request *req;
	const struct costmodel *cm;
	const struct costmodel_cluster *cl;
	struct planner_deadline deadline;
	struct exh_option opts[EXH_MAX_OPTIONS];
	int nopts;
	double rate_per_gpu[COSTMODEL_MAX_GPU_TYPES];
	double model_state_bytes;	/* least state one pipeline holds */
	struct exh_key *keys;		/* every template, canonical order */
	size_t nkeys;
	int max_depth;

	pthread_mutex_t lock;		/* guards what follows */
	size_t next_root;		/* next first-level key to explore */
	struct costmodel_plan *best;
	size_t best_path[EXH_MAX_TEMPLATES];	/* keys of the best plan */
	int best_len;
	long priced;
	bool timed_out;
	int first_error;
	char first_error_msg[512];
};

/* Options by GPU type, then larger TP first. */
static int option_cmp(const void *a, const void *b)
{
	const struct exh_option *x = a, *y = b;

	if (x->gpu != y->gpu)
		return x->gpu - y->gpu;
	return y->tp - x->tp;
}

static int keys_push(struct exh_search *x, size_t *cap, const struct exh_key *k)
{
	if (x->nkeys >= EXH_MAX_KEYS)
		return 0;	/* build_keys() stops and says the search is incomplete */
	if (AR_GROW(x->keys, *cap, x->nkeys + 1, 1024) < 0)
		return -ENOMEM;
	x->keys[x->nkeys++] = *k;
	return 0;
}

/*
 * Emit @ms (a multiset, non-decreasing option indices, so grouped by GPU
 * type) once per order of its type blocks, by recursion over which block
 * goes next.
 */
static int emit_orders(struct exh_search *x, size_t *cap, const struct exh_key *ms,
		       const int *block_start, const int *block_len, int nblocks,
		       bool *taken, struct exh_key *out)
{
	bool any = false;
	int rc;

	for (int b = 0; b < nblocks; b++) {
		if (taken[b])
			continue;
		any = true;
		taken[b] = true;
		for (int i = 0; i < block_len[b]; i++)
			out->opt[out->depth + i] = ms->opt[block_start[b] + i];
		out->depth += block_len[b];
		rc = emit_orders(x, cap, ms, block_start, block_len, nblocks,
				 taken, out);
		out->depth -= block_len[b];
		taken[b] = false;
		if (rc < 0)
			return rc;
	}
	return any ? 0 : keys_push(x, cap, out);
}

/*
 * Every template of the search space: each multiset of stage options of
 * each depth, its stages grouped by GPU type with the larger TP first in
 * a group (a group's order changes nothing but memory), and every order
 * of the groups (which type holds the embedding, which the head, which
 * the most micro-batches in flight).
 */
static int build_keys(struct exh_search *x)
{
	/*
	 * The space can outgrow any budget (10,000 node groups of eight
	 * types: killed after 80 s of a 10 s budget, gigabytes of keys):
	 * the keys made in the first half of the budget, EXH_MAX_KEYS at
	 * most, are searched in the second, and the search says it is
	 * incomplete.
	 */
	struct planner_deadline half = {
		.start = x->deadline.start,
		.end = x->deadline.start + (x->deadline.end - x->deadline.start) / 2,
	};
	size_t cap = 1024;
	struct exh_key k;

	x->keys = malloc(cap * sizeof(*x->keys));
	if (!x->keys)
		return -ENOMEM;
	for (int d = 1; d <= x->max_depth; d++) {
		k.depth = d;
		for (int s = 0; s < d; s++)
			k.opt[s] = 0;
		for (;;) {
			int block_start[EXH_MAX_DEPTH], block_len[EXH_MAX_DEPTH];
			bool taken[EXH_MAX_DEPTH] = { false };
			struct exh_key out = { .depth = 0 };
			int nblocks = 0, s, rc;

			if (planner_deadline_passed(&half) || x->nkeys >= EXH_MAX_KEYS) {
				x->timed_out = true;
				return 0;
			}
			for (s = 0; s < d; s++) {
				if (s == 0 || x->opts[k.opt[s]].gpu != x->opts[k.opt[s - 1]].gpu) {
					block_start[nblocks] = s;
					block_len[nblocks++] = 0;
				}
				block_len[nblocks - 1]++;
			}
			rc = emit_orders(x, &cap, &k, block_start, block_len,
					 nblocks, taken, &out);
			if (rc < 0)
				return rc;
			/* Next non-decreasing sequence. */
			for (s = d - 1; s >= 0 && k.opt[s] == x->nopts - 1; s--)
				;
			if (s < 0)
				break;
			k.opt[s]++;
			for (int t = s + 1; t < d; t++)
				k.opt[t] = k.opt[s];
		}
	}
	return 0;
}

static void key_shape(const struct exh_search *x, const struct exh_key *k,
		      struct costmodel_shape *shape)
{
	shape->depth = k->depth;
	for (int s = 0; s < k->depth; s++) {
		shape->gpu[s] = x->opts[k->opt[s]].gpu;
		shape->tp[s] = x->opts[k->opt[s]].tp;
	}
}

/*
 * An optimistic throughput for @plan plus anything the free GPUs of @pool
 * could add: their pipelines at best run at every free GPU's best
 * profiled per-GPU rate, and the gradient synchronization the plan
 * already pays does not shrink when pipelines join the ring.
 */
static double bound_rate(const struct costmodel_plan *plan, double free_rate)
{
	double batch = plan->global_batch, rate = free_rate;

	if (plan->ntemplates)
		rate += batch / plan->predicted.pipeline_s;
	if (rate <= 0)
		return 0;
	return batch / (batch / rate + (plan->ntemplates ? plan->predicted.sync_s : 0));
}

static double bound(const struct exh_search *x, const struct costmodel_plan *plan,
		    const struct costmodel_pool *pool)
{
	double rate = 0, free_bytes = 0;

	for (int g = 0; g < costmodel_num_gpus(x->cm); g++) {
		rate += pool->free_by_type[g] * x->rate_per_gpu[g];
		free_bytes += pool->free_by_type[g] *
			      costmodel_gpu(x->cm, g)->memory_gib * GIB;
	}
	/* Free GPUs that cannot hold one copy of the model add nothing. */
	if (free_bytes < x->model_state_bytes)
		rate = 0;
	return bound_rate(plan, rate);
}

/* The same bound for @plan plus @replicas of @shape alone. */
static double bound_with(const struct exh_search *x,
			 const struct costmodel_plan *plan,
			 const struct costmodel_shape *shape, int replicas)
{
	double rate = 0;

	for (int s = 0; s < shape->depth; s++)
		rate += replicas * shape->tp[s] * x->rate_per_gpu[shape->gpu[s]];
	return bound_rate(plan, rate);
}

/*
 * The training state one pipeline must hold across its GPUs: every
 * layer's weights and gradients, routed experts left out (expert
 * parallelism may spread them over several pipelines) and the optimizer
 * state too (the distributed optimizer spreads it over the replicas).
 */
static double model_state_bytes(const struct costmodel *cm)
{
	const struct costmodel_model *m = costmodel_model(cm);
	double bytes = 0;

	for (int g = 0; g < costmodel_num_gpus(cm); g++) {
		for (int l = 0; l < costmodel_num_layers(cm); l++) {
			enum costmodel_layer_type type =
				l == 0 ? COSTMODEL_LAYER_EMBED :
				l == costmodel_num_layers(cm) - 1 ? COSTMODEL_LAYER_HEAD :
				costmodel_layer_is_moe(cm, l) ? COSTMODEL_LAYER_ATTN :
				COSTMODEL_LAYER_BLOCK;
			const struct costmodel_layer_profile *p =
				costmodel_profile(cm, g, 1, 1, type);

			if (!p) {
				bytes = 0;
				break;
			}
			bytes += p->param_bytes * (2 + m->grad_bytes_per_param) / 2;
		}
		if (bytes > 0)
			return bytes;
	}
	return 0;
}

/*
 * Keep @plan if it is faster than the best, or as fast with a smaller
 * sequence of keys: ties then resolve the same way whatever order the
 * threads found them in, so the search is deterministic.
 */
static void offer_best(struct exh_search *x, const struct costmodel_plan *plan,
		       const size_t *path, int len)
{
	bool better;

	pthread_mutex_lock(&x->lock);
	better = !x->best ||
		 planner_score(x->req, plan) > planner_score(x->req, x->best);
	if (!better && planner_score(x->req, plan) ==
		       planner_score(x->req, x->best)) {
		int i;

		for (i = 0; i < len && i < x->best_len && path[i] == x->best_path[i]; i++)
			;
		better = i < len && (i == x->best_len || path[i] < x->best_path[i]);
	}
	if (better) {
		struct costmodel_plan *c = costmodel_plan_clone(plan);

		if (c) {
			costmodel_plan_free(x->best);
			x->best = c;
			memcpy(x->best_path, path, (size_t)len * sizeof(*path));
			x->best_len = len;
		}
	}
	pthread_mutex_unlock(&x->lock);
}

static double best_rate(struct exh_search *x)
{
	double r;

	pthread_mutex_lock(&x->lock);
	/* the bounds are on throughput: under the cost objective nothing is cut */
	if (x->req->objective != POLICY_OBJECTIVE_THROUGHPUT)
		r = 0;
	else
		r = x->best ? x->best->predicted.samples_per_s : 0;
	pthread_mutex_unlock(&x->lock);
	return r;
}

static void note_error(struct exh_search *x, int rc)
{
	pthread_mutex_lock(&x->lock);
	if (!x->first_error) {
		x->first_error = rc;
		snprintf(x->first_error_msg, sizeof(x->first_error_msg), "%s",
			 ar_errmsg());
	}
	pthread_mutex_unlock(&x->lock);
}

/*
 * Try template @ki on top of @plan/@pool; on success recurse from it.
 * Returns false when the budget ran out.
 */
static bool explore(struct exh_search *x, const struct costmodel_plan *plan,
		    const struct costmodel_pool *pool, size_t *path, int level,
		    long *priced)
{
	struct costmodel_plan *child;
	struct costmodel_pool cpool = { 0 };
	struct costmodel_shape shape;
	bool go_on = true;
	int rc, replicas;

	size_t ki = path[level];

	if (planner_deadline_passed(&x->deadline))
		return false;
	key_shape(x, &x->keys[ki], &shape);
	replicas = costmodel_fill_replicas(x->cm, pool, &shape);
	if (replicas < 1)
		return true;
	/* Cut before the fill when even this template's GPUs at their best
	 * rates could not lift the plan above the best found. */
	if (plan->ntemplates &&
	    bound_with(x, plan, &shape, replicas) < best_rate(x) * (1 - 1e-12))
		return true;
	child = costmodel_plan_clone(plan);
	if (!child || costmodel_pool_copy(&cpool, pool) < 0) {
		costmodel_plan_free(child);
		note_error(x, -ENOMEM);
		return false;
	}
	rc = costmodel_fill_add(x->cm, x->cl, &cpool, child, &shape, NULL);
	(*priced)++;
	if (rc < 0) {
		if (rc != -AR_EINFEASIBLE)
			note_error(x, rc);
		goto out;
	}
	if (plan->ntemplates && planner_score(x->req, child) <=
				planner_score(x->req, plan))
		goto out;	/* a template that does not help: stop here */
	offer_best(x, child, path, level + 1);
	if (level + 1 >= EXH_MAX_TEMPLATES)
		goto out;
	/* Strictly below: a tie may still win on its key order. */
	if (bound(x, child, &cpool) < best_rate(x) * (1 - 1e-12))
		goto out;
	for (size_t k = ki; k < x->nkeys && go_on; k++) {
		path[level + 1] = k;
		go_on = explore(x, child, &cpool, path, level + 1, priced);
	}
out:
	costmodel_pool_fini(&cpool);
	costmodel_plan_free(child);
	return go_on;
}

/* One of planner_threads() workers: take first-level keys until none is left. */
static void worker(void *arg, int thread, int task)
{
	struct exh_search *x = arg;
	struct costmodel_plan *empty = costmodel_plan_create(x->cm);
	struct costmodel_pool pool = { 0 };
	long priced = 0;
	bool go_on = true;

	if (!empty || costmodel_pool_init(&pool, x->cl) < 0) {
		note_error(x, -ENOMEM);
		go_on = false;
	}
	while (go_on) {
		size_t ki;

		pthread_mutex_lock(&x->lock);
		ki = x->next_root++;
		pthread_mutex_unlock(&x->lock);
		if (ki >= x->nkeys)
			break;
		size_t path[EXH_MAX_TEMPLATES] = { ki };

		go_on = explore(x, empty, &pool, path, 0, &priced);
	}
	pthread_mutex_lock(&x->lock);
	x->priced += priced;
	if (!go_on && !x->first_error)
		x->timed_out = true;
	pthread_mutex_unlock(&x->lock);
	costmodel_pool_fini(&pool);
	costmodel_plan_free(empty);
}

int planner_exhaustive(const struct policy_request *req,
		       struct costmodel_plan **planp)
{
	struct exh_search x = { .req = req, .cm = req->cm, .cl = req->cl };
	int nthreads = planner_threads(req), rc = 0;

	planner_deadline_init(&x.deadline, req);
	pthread_mutex_init(&x.lock, NULL);
	x.max_depth = costmodel_model(req->cm)->blocks < EXH_MAX_DEPTH ?
		      costmodel_model(req->cm)->blocks : EXH_MAX_DEPTH;
	for (int g = 0; g < costmodel_num_gpus(req->cm); g++) {
		int tps[COSTMODEL_NUM_TP];
		int n = planner_tp_options(req->cm, req->cl, g, tps);

		for (int i = 0; i < n; i++) {
			double r = costmodel_stage_speed(req->cm, g, tps[i]) / tps[i];

			x.opts[x.nopts].gpu = g;
			x.opts[x.nopts].tp = tps[i];
			x.nopts++;
			if (r > x.rate_per_gpu[g])
				x.rate_per_gpu[g] = r;
		}
	}
	x.model_state_bytes = model_state_bytes(req->cm);
	if (!x.nopts) {
		rc = ar_seterr(-AR_EINFEASIBLE, "no GPU of the cluster has layer profiles for model %s",
			       costmodel_model(req->cm)->name);
		goto out;
	}
	qsort(x.opts, (size_t)x.nopts, sizeof(x.opts[0]), option_cmp);
	if ((rc = build_keys(&x)) < 0)
		goto out;

	planner_parallel(worker, &x, nthreads, nthreads);

	if (!x.best) {
		if (x.first_error)
			rc = ar_seterr(x.first_error, "%s", x.first_error_msg);
		else if (x.timed_out)
			rc = ar_seterr(-AR_ETIMEOUT, "no feasible plan found within the %.0f s budget",
				       req->budget_s > 0 ? req->budget_s :
				       PLANNER_DEFAULT_BUDGET_S);
		else
			rc = ar_seterr(-AR_EINFEASIBLE, "no template of the cluster's GPUs fits model %s in memory",
				       costmodel_model(req->cm)->name);
		goto out;
	}
	x.best->plans_priced = x.priced;
	x.best->states_explored = x.priced;
	x.best->search_complete = !x.timed_out && !x.first_error;
	*planp = x.best;
	x.best = NULL;
out:
	costmodel_plan_free(x.best);
	free(x.keys);
	pthread_mutex_destroy(&x.lock);
	return rc;
}
