/*
 * arachne.c - the learned planner at planning time.
 *
 * 1. K constructions (Algorithm 1) in parallel threads: one greedy, the
 *    rest sampled from the policy, each with its own generator seeded from
 *    (seed, k); the cost model keeps the best plan any of them built.
 * 2. Beyond the paper: a bounded local improvement of that plan's
 *    templates.  Each round prices, in parallel, every neighbour (a
 *    template or one stage with another TP degree or GPU type, a type's
 *    stages re-cut at another TP degree, moved first or last or traded
 *    for another type's, a stage removed, doubled, merged with its twin
 *    or split in two, a stage of any type added first or last, a
 *    template dropped or moved first, a template of the leftover GPUs
 *    added) and moves to the best one while it gains.  A final pass moves
 *    single layers across stage boundaries of the priced plan.
 *
 *    The climb starts from the two best distinct rollout plans and from
 *    the best structured plan: a single template mixing every type (or
 *    all but one) in proportion to its GPUs, one pipeline per type, or
 *    the plan of a fast search planner (AMP; HexiScale up to 256 GPUs).
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

#define ROLLOUTS		32	/* constructions: 1 greedy + 31 sampled */
#define STARTS			3	/* plans improved: two from rollouts, one mixed */
#define MAX_TEMPLATES		(POLICY_MAX_STEPS + 4)
#define IMPROVE_ROUNDS		24	/* local-improvement rounds at most */
/*
 * Work of the local improvement, counted per template filled as the
 * cluster's nodes plus the template's stages times the model's layers
 * (packing walks the nodes, the layer split the stages and layers):
 * about a second of CPU on the development machine whatever the cluster
 * and model, and a count, so the same seed still gives the same plan.
 */
#define IMPROVE_WORK		1600000.0	/* per start */
#define IMPROVE_WORK_TOTAL	3200000.0	/* all starts */
#define LAYER_ROUNDS		64	/* layer moves at most */
#define MAX_NEIGHBOURS		2048

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

int policy_shapes_evaluate(const struct costmodel *cm,
			   const struct costmodel_cluster *cl,
			   const struct costmodel_shape *shapes, int n,
			   struct costmodel_plan **planp, double *thr,
			   struct costmodel_pool *pool_out)
{
	struct costmodel_pool pool;
	struct costmodel_plan *plan;
	int rc, placed = 0;

	*thr = 0.0;
	if (planp)
		*planp = NULL;
	rc = costmodel_pool_init(&pool, cl);
	if (rc < 0)
		return rc;
	plan = costmodel_plan_create(cm);
	if (!plan) {
		costmodel_pool_fini(&pool);
		return -ENOMEM;
	}
	for (int i = 0; i < n; i++) {
		rc = costmodel_fill_add(cm, cl, &pool, plan, &shapes[i], NULL);
		if (rc == -AR_EINFEASIBLE || rc == -AR_ENOPROFILE)
			continue;	/* this template no longer fits: skip it */
		if (rc < 0)
			goto out;
		placed++;
	}
	rc = 0;
	if (placed)
		*thr = plan->predicted.samples_per_s;
	if (planp) {
		*planp = plan;
		plan = NULL;
	}
	if (pool_out) {
		*pool_out = pool;
		pool.free_mask = NULL;
	}
out:
	costmodel_plan_free(plan);
	costmodel_pool_fini(&pool);
	return rc;
}

/* ---------------------------------------------------------------------
 * Construction rollouts.
 * ------------------------------------------------------------------- */

struct rollout_ctx {
	const struct policy_env *env;
	const struct policy_net *net;
	unsigned long seed;
	struct policy_trace trace[ROLLOUTS];
	int rc[ROLLOUTS];
	char err[ROLLOUTS][256];
	long priced[ROLLOUTS];
};

static void rollout_task(void *p, int thread, int k)
{
	struct rollout_ctx *c = p;
	struct policy_rollout_opts opts = {
		.draw = k == 0 ? POLICY_DRAW_GREEDY : POLICY_DRAW_SAMPLE,
		.temperature = 1.0f,
	};
	struct policy_episode ep;
	struct policy_work w;
	struct policy_rng rng;
	int rc;

	policy_rng_seed(&rng, c->seed, (uint64_t)k + 1);
	rc = policy_work_init(&w, 1);
	if (rc == 0) {
		rc = policy_episode_init(&ep, c->env);
		if (rc == 0) {
			rc = policy_rollout(&ep, c->net, &w, &rng, &opts,
					    &c->trace[k]);
			c->priced[k] = ep.plans_priced;
			policy_episode_fini(&ep);
		}
		policy_work_fini(&w);
	}
	c->rc[k] = rc;
	if (rc < 0)
		snprintf(c->err[k], sizeof(c->err[k]), "%s", ar_errmsg());
}

/* ---------------------------------------------------------------------
 * Local improvement.
 * ------------------------------------------------------------------- */

struct cand {
	struct costmodel_shape t[MAX_TEMPLATES];
	int n;
	double thr;
};

struct improve_ctx {
	const struct policy_env *env;
	struct cand *nb;		/* [count] neighbours */
	int count;
	long priced;			/* per round, summed after */
	long priced_by[64];
};

static void improve_task(void *p, int thread, int i)
{
	struct improve_ctx *c = p;
	struct cand *x = &c->nb[i];

	if (policy_shapes_evaluate(c->env->cm, c->env->cl, x->t, x->n, NULL,
				   &x->thr, NULL) < 0)
		x->thr = 0.0;
	c->priced_by[thread] += x->n;	/* thread < 64 */
}

/* Can a stage of GPU type @type run at TP @tp in this cluster at all? */
static bool tp_usable(const struct policy_env *env, int type, int tp)
{
	int slot = env->type_slot[type], k = __builtin_ctz(tp);

	return slot >= 0 && k < POLICY_NUM_TP && tp <= env->largest_node[slot] &&
	       env->speed[slot][k] > 0.0;
}

static struct cand *nb_push(struct improve_ctx *c, const struct cand *base)
{
	if (c->count >= MAX_NEIGHBOURS)
		return NULL;
	c->nb[c->count] = *base;
	return &c->nb[c->count++];
}

/* Fewest stages of (@slot, TP index @k) that can hold the model, or 0. */
static int uniform_depth(const struct policy_env *env, int slot, int k)
{
	for (int d = 1; d <= POLICY_DMAX; d++) {
		double held = 0.0;

		for (int j = 0; j < d; j++)
			held += floor(policy_env_stage_capacity(env, slot, k, j, d,
								 env->type_gpus[slot]));
		if (held >= env->blocks)
			return d;
	}
	return 0;
}

/* Push @cur with template @t replaced by @sh, unless it is @cur again. */
static int push_template(struct improve_ctx *c, const struct cand *cur, int t,
			 const struct costmodel_shape *sh)
{
	const struct costmodel_shape *old = &cur->t[t];
	struct cand *x;

	if (sh->depth < 1 || sh->depth > POLICY_DMAX)
		return 0;
	if (sh->depth == old->depth &&
	    memcmp(sh->gpu, old->gpu, sh->depth * sizeof(int)) == 0 &&
	    memcmp(sh->tp, old->tp, sh->depth * sizeof(int)) == 0)
		return 0;
	if (!(x = nb_push(c, cur)))
		return -ENOSPC;
	x->t[t] = *sh;
	return 0;
}

/*
 * Moves on the stages of one GPU type in template @t taken together:
 * the shapes search planners reach (a run of stages per type, at one TP
 * degree) are often several single-stage moves away, and the plans in
 * between are slower, so a climb of single moves stops short of them.
 *   - the type's GPUs per replica re-cut at another TP degree, where its
 *     first stage was (two H100 stages at TP 2 become four at TP 1);
 *   - the type's stages moved, in their order, to the front or the end;
 *   - a stage traded: one more stage of this type, one fewer of another.
 */
static int type_run_moves(struct improve_ctx *c, const struct cand *cur, int t)
{
	const struct policy_env *env = c->env;
	const struct costmodel_shape *sh = &cur->t[t];
	struct costmodel_shape y;

	for (int q = 0; q < env->nslots; q++) {
		int g = env->slot_type[q], first = -1, last = -1, gpus = 0, n = 0;

		for (int s = 0; s < sh->depth; s++)
			if (sh->gpu[s] == g) {
				if (first < 0)
					first = s;
				last = s;
				gpus += sh->tp[s];
				n++;
			}
		if (n == 0)
			continue;

		for (int k = 0; k < POLICY_NUM_TP; k++) {
			int tp = policy_tp_of(k), stages = gpus / tp;

			if (gpus % tp || !tp_usable(env, g, tp) ||
			    sh->depth - n + stages > POLICY_DMAX)
				continue;
			y.depth = 0;
			for (int s = 0; s < sh->depth; s++) {
				if (s == first)
					for (int j = 0; j < stages; j++) {
						y.gpu[y.depth] = g;
						y.tp[y.depth++] = tp;
					}
				if (sh->gpu[s] != g) {
					y.gpu[y.depth] = sh->gpu[s];
					y.tp[y.depth++] = sh->tp[s];
				}
			}
			if (push_template(c, cur, t, &y) < 0)
				return -ENOSPC;
		}

		for (int end = 0; end < 2; end++) {
			y.depth = 0;
			for (int pass = 0; pass < 2; pass++)
				for (int s = 0; s < sh->depth; s++)
					if ((sh->gpu[s] == g) == (pass == end)) {
						y.gpu[y.depth] = sh->gpu[s];
						y.tp[y.depth++] = sh->tp[s];
					}
			if (push_template(c, cur, t, &y) < 0)
				return -ENOSPC;
		}

		/* trade: this type's last stage twice, another type's last once fewer */
		for (int r = 0; r < env->nslots; r++) {
			int h = env->slot_type[r], drop = -1;

			if (h == g)
				continue;
			for (int s = 0; s < sh->depth; s++)
				if (sh->gpu[s] == h)
					drop = s;
			if (drop < 0)
				continue;
			y.depth = 0;
			for (int s = 0; s < sh->depth; s++) {
				if (s != drop) {
					y.gpu[y.depth] = sh->gpu[s];
					y.tp[y.depth++] = sh->tp[s];
				}
				if (s == last) {
					y.gpu[y.depth] = sh->gpu[s];
					y.tp[y.depth++] = sh->tp[s];
				}
			}
			if (push_template(c, cur, t, &y) < 0)
				return -ENOSPC;
		}
	}
	return 0;
}

static void neighbours(struct improve_ctx *c, const struct cand *cur,
		       const struct costmodel_pool *left)
{
	const struct policy_env *env = c->env;
	struct cand *x;

	c->count = 0;
	for (int t = 0; t < cur->n; t++) {
		const struct costmodel_shape *sh = &cur->t[t];

		/*
		 * Whole-template moves first: one stage alone at another TP
		 * degree rarely frees a replica's worth of GPUs, all of them
		 * together can.
		 */
		for (int k = 0; k < POLICY_NUM_TP; k++) {
			int tp = policy_tp_of(k), changed = 0;

			if (!(x = nb_push(c, cur)))
				return;
			for (int s = 0; s < sh->depth; s++)
				if (sh->tp[s] != tp && tp_usable(env, sh->gpu[s], tp)) {
					x->t[t].tp[s] = tp;
					changed++;
				}
			if (changed < 2)
				c->count--;	/* no move, or a single-stage one below */
		}
		for (int q = 0; q < env->nslots; q++) {
			int g = env->slot_type[q], changed = 0;

			if (!(x = nb_push(c, cur)))
				return;
			for (int s = 0; s < sh->depth; s++) {
				int tp = sh->tp[s];

				if (sh->gpu[s] == g)
					continue;
				while (tp > 1 && !tp_usable(env, g, tp))
					tp /= 2;
				if (!tp_usable(env, g, tp))
					continue;
				x->t[t].gpu[s] = g;
				x->t[t].tp[s] = tp;
				changed++;
			}
			if (changed < 2)
				c->count--;
		}
		if (type_run_moves(c, cur, t) < 0)
			return;

		for (int s = 0; s < sh->depth; s++) {
			/* another TP degree */
			for (int k = 0; k < POLICY_NUM_TP; k++) {
				int tp = policy_tp_of(k);

				if (tp == sh->tp[s] || !tp_usable(env, sh->gpu[s], tp))
					continue;
				if (!(x = nb_push(c, cur)))
					return;
				x->t[t].tp[s] = tp;
			}
			/* another GPU type, at the same TP or the nearest that fits */
			for (int q = 0; q < env->nslots; q++) {
				int g = env->slot_type[q], tp = sh->tp[s];

				if (g == sh->gpu[s])
					continue;
				while (tp > 1 && !tp_usable(env, g, tp))
					tp /= 2;
				if (!tp_usable(env, g, tp))
					continue;
				if (!(x = nb_push(c, cur)))
					return;
				x->t[t].gpu[s] = g;
				x->t[t].tp[s] = tp;
			}
			/* merge with the next stage of the same type, TPs added */
			if (s + 1 < sh->depth && sh->gpu[s] == sh->gpu[s + 1] &&
			    sh->tp[s] == sh->tp[s + 1] &&
			    tp_usable(env, sh->gpu[s], 2 * sh->tp[s])) {
				if (!(x = nb_push(c, cur)))
					return;
				x->t[t].tp[s] *= 2;
				memmove(&x->t[t].gpu[s + 1], &x->t[t].gpu[s + 2],
					(sh->depth - s - 2) * sizeof(int));
				memmove(&x->t[t].tp[s + 1], &x->t[t].tp[s + 2],
					(sh->depth - s - 2) * sizeof(int));
				x->t[t].depth--;
			}
			/* split into two stages at half the TP */
			if (sh->tp[s] > 1 && sh->depth < POLICY_DMAX) {
				if (!(x = nb_push(c, cur)))
					return;
				memmove(&x->t[t].gpu[s + 1], &x->t[t].gpu[s],
					(sh->depth - s) * sizeof(int));
				memmove(&x->t[t].tp[s + 1], &x->t[t].tp[s],
					(sh->depth - s) * sizeof(int));
				x->t[t].tp[s] /= 2;
				x->t[t].tp[s + 1] /= 2;
				x->t[t].depth++;
			}
			/* one stage fewer */
			if (sh->depth > 1) {
				if (!(x = nb_push(c, cur)))
					return;
				memmove(&x->t[t].gpu[s], &x->t[t].gpu[s + 1],
					(sh->depth - s - 1) * sizeof(int));
				memmove(&x->t[t].tp[s], &x->t[t].tp[s + 1],
					(sh->depth - s - 1) * sizeof(int));
				x->t[t].depth--;
			}
			/* this stage twice */
			if (sh->depth < POLICY_DMAX) {
				if (!(x = nb_push(c, cur)))
					return;
				memmove(&x->t[t].gpu[s + 1], &x->t[t].gpu[s],
					(sh->depth - s) * sizeof(int));
				memmove(&x->t[t].tp[s + 1], &x->t[t].tp[s],
					(sh->depth - s) * sizeof(int));
				x->t[t].depth++;
			}
		}
		/* a stage of any type put in front or at the end: mixes types */
		if (sh->depth < POLICY_DMAX) {
			for (int q = 0; q < env->nslots; q++) {
				for (int k = 0; k < POLICY_NUM_TP; k++) {
					int g = env->slot_type[q], tp = policy_tp_of(k);

					if (!tp_usable(env, g, tp))
						continue;
					for (int end = 0; end < 2; end++) {
						struct costmodel_shape *y;
						int at = end ? sh->depth : 0;

						if (!(x = nb_push(c, cur)))
							return;
						y = &x->t[t];
						memmove(&y->gpu[at + 1], &y->gpu[at],
							(sh->depth - at) * sizeof(int));
						memmove(&y->tp[at + 1], &y->tp[at],
							(sh->depth - at) * sizeof(int));
						y->gpu[at] = g;
						y->tp[at] = tp;
						y->depth++;
					}
				}
			}
		}
		/* drop a straggling template */
		if (cur->n > 1) {
			if (!(x = nb_push(c, cur)))
				return;
			memmove(&x->t[t], &x->t[t + 1],
				(cur->n - t - 1) * sizeof(x->t[0]));
			x->n--;
		}
		/* fill this template first: packing order matters */
		if (t > 0) {
			if (!(x = nb_push(c, cur)))
				return;
			x->t[0] = cur->t[t];
			memcpy(&x->t[1], &cur->t[0], t * sizeof(x->t[0]));
		}
	}
	/* a template of leftover GPUs, one type at each TP that fits */
	if (left && cur->n < MAX_TEMPLATES) {
		for (int q = 0; q < env->nslots; q++) {
			int g = env->slot_type[q];
			int largest = costmodel_pool_largest_free(left, g);

			for (int k = 0; k < POLICY_NUM_TP; k++) {
				int tp = policy_tp_of(k), d;

				if (tp > largest || !tp_usable(env, g, tp))
					continue;
				d = uniform_depth(env, q, k);
				if (d == 0 || d * tp > left->free_by_type[g])
					continue;
				if (!(x = nb_push(c, cur)))
					return;
				x->t[x->n].depth = d;
				for (int j = 0; j < d; j++) {
					x->t[x->n].gpu[j] = g;
					x->t[x->n].tp[j] = tp;
				}
				x->n++;
			}
		}
	}
}

/* Move single layers across stage boundaries while the plan gets faster. */
static int layer_moves(const struct policy_env *env, struct costmodel_plan **planp,
		       long *priced, const struct planner_deadline *dl)
{
	struct costmodel_plan *best = *planp, *trial;
	double best_thr = best->predicted.samples_per_s;

	trial = costmodel_plan_clone(best);
	if (!trial)
		return -ENOMEM;
	for (int round = 0; round < LAYER_ROUNDS && !planner_deadline_passed(dl); round++) {
		bool gained = false;

		for (int t = 0; t < best->ntemplates && !gained; t++) {
			for (int b = 0; b + 1 < best->templates[t].nstages && !gained; b++) {
				for (int dir = -1; dir <= 1; dir += 2) {
					struct costmodel_stage *lo, *hi;

					if (costmodel_plan_copy(trial, best) < 0)
						goto out;
					lo = &trial->templates[t].stages[b];
					hi = &trial->templates[t].stages[b + 1];
					if (dir < 0 && lo->last_layer > lo->first_layer) {
						lo->last_layer--;
						hi->first_layer--;
					} else if (dir > 0 && hi->last_layer > hi->first_layer) {
						lo->last_layer++;
						hi->first_layer++;
					} else {
						continue;
					}
					(*priced)++;
					if (costmodel_plan_price(env->cm, env->cl, trial) < 0)
						continue;
					if (trial->predicted.samples_per_s > best_thr * (1.0 + 1e-9)) {
						struct costmodel_plan *tmp = best;

						best = trial;
						trial = tmp;
						best_thr = best->predicted.samples_per_s;
						gained = true;
						break;
					}
				}
			}
		}
		if (!gained)
			break;
	}
out:
	costmodel_plan_free(trial);
	*planp = best;
	return 0;
}

/* What filling @x costs, in the units of IMPROVE_WORK. */
static double cand_work(const struct policy_env *env, const struct cand *x)
{
	double layers = costmodel_num_layers(env->cm), w = 0.0;

	for (int t = 0; t < x->n; t++)
		w += (double)env->cl->nnodes + x->t[t].depth * layers;
	return w;
}

static int improve(const struct policy_env *env, struct cand *cur, int threads,
		   double max_work, double *spent, long *priced,
		   const struct planner_deadline *dl)
{
	struct improve_ctx c = { .env = env };
	int rc = 0;

	c.nb = malloc(MAX_NEIGHBOURS * sizeof(*c.nb));
	if (!c.nb)
		return -ENOMEM;
	double work = 0.0;

	for (int round = 0; round < IMPROVE_ROUNDS && !planner_deadline_passed(dl); round++) {
		struct costmodel_pool left;
		double thr;
		int best = -1, fit = 0;

		rc = policy_shapes_evaluate(env->cm, env->cl, cur->t, cur->n, NULL,
					    &thr, &left);
		if (rc < 0)
			break;
		*priced += cur->n;
		cur->thr = thr;
		neighbours(&c, cur, &left);
		costmodel_pool_fini(&left);
		/* keep the neighbours the remaining work allows, in their order */
		while (fit < c.count && work + cand_work(env, &c.nb[fit]) <= max_work) {
			work += cand_work(env, &c.nb[fit]);
			fit++;
		}
		c.count = fit;
		if (c.count == 0)
			break;
		memset(c.priced_by, 0, sizeof(c.priced_by));
		planner_parallel(improve_task, &c, c.count, threads);
		for (int t = 0; t < 64; t++)
			*priced += c.priced_by[t];
		for (int i = 0; i < c.count; i++)
			if (c.nb[i].thr > cur->thr * (1.0 + 1e-9) &&
			    (best < 0 || c.nb[i].thr > c.nb[best].thr))
				best = i;
		if (best < 0)
			break;
		*cur = c.nb[best];
	}
	free(c.nb);
	*spent += work;
	return rc;
}

/*
 * Push, for every depth, the single template that gives each used GPU
 * type stages in proportion to its GPUs, slowest type first, at TP @tp.
 */
static void proportional_shapes(struct improve_ctx *c, const bool *used, int tp)
{
	const struct policy_env *env = c->env;
	int blocks = costmodel_model(env->cm)->blocks, total = 0;

	for (int s = 0; s < env->nslots; s++)
		if (used[s])
			total += env->type_gpus[s];
	for (int d = 1; d <= POLICY_DMAX && d <= blocks && total; d++) {
		struct costmodel_shape *sh = &c->nb[c->count].t[0];
		int n[POLICY_SLOTS] = { 0 }, given = 0;

		/* largest remainder, so the stages add up to d */
		for (int s = 0; s < env->nslots; s++)
			if (used[s]) {
				n[s] = d * env->type_gpus[s] / total;
				given += n[s];
			}
		while (given < d) {
			int arg = -1;
			double rem = -1.0;

			for (int s = 0; s < env->nslots; s++) {
				double r;

				if (!used[s])
					continue;
				r = (double)d * env->type_gpus[s] / total - n[s];
				if (r > rem) {
					rem = r;
					arg = s;
				}
			}
			n[arg]++;
			given++;
		}
		sh->depth = 0;
		for (int s = env->nslots - 1; s >= 0; s--)
			for (int j = 0; j < n[s]; j++) {
				sh->gpu[sh->depth] = env->slot_type[s];
				sh->tp[sh->depth++] = tp;
			}
		c->nb[c->count++].n = 1;
	}
}

/*
 * One more start besides the rollouts, the best of two structured
 * families: a single template that gives each GPU type stages in
 * proportion to its GPUs, slowest type first, at one TP degree, for every
 * depth, with every type or all but one (a type that only slows the
 * others is best left idle); and one pipeline per type, each of the
 * fewest stages that hold the model.  They are the shapes good search
 * planners reach, and the local improvement climbs from them where the
 * policy's plans sit on another hill.
 */
static int mixed_start(const struct policy_env *env, int threads,
		       struct cand *out, long *priced)
{
	struct improve_ctx c = { .env = env };
	int best = -1;

	c.nb = calloc((size_t)(env->nslots + 1) * POLICY_NUM_TP * (POLICY_DMAX + 1) +
		      POLICY_NUM_TP, sizeof(*c.nb));
	if (!c.nb)
		return -ENOMEM;
	/* idle: the type left out, -1 for none; of two types, none */
	for (int idle = -1; idle < (env->nslots > 2 ? env->nslots : 0); idle++) {
		for (int k = 0; k < POLICY_NUM_TP; k++) {
			int tp = policy_tp_of(k);
			bool used[POLICY_SLOTS];

			for (int s = 0; s < env->nslots; s++)
				used[s] = s != idle && tp_usable(env, env->slot_type[s], tp);
			proportional_shapes(&c, used, tp);
		}
	}
	/* and one pipeline per type, each of the fewest stages that hold the model */
	for (int k = 0; k < POLICY_NUM_TP; k++) {
		struct cand *x = &c.nb[c.count];

		x->n = 0;
		for (int s = 0; s < env->nslots && x->n < MAX_TEMPLATES; s++) {
			int tp = policy_tp_of(k), d;

			if (!tp_usable(env, env->slot_type[s], tp))
				continue;
			d = uniform_depth(env, s, k);
			if (d == 0)
				continue;
			x->t[x->n].depth = d;
			for (int j = 0; j < d; j++) {
				x->t[x->n].gpu[j] = env->slot_type[s];
				x->t[x->n].tp[j] = tp;
			}
			x->n++;
		}
		if (x->n)
			c.count++;
	}
	memset(c.priced_by, 0, sizeof(c.priced_by));
	planner_parallel(improve_task, &c, c.count, threads);
	for (int t = 0; t < 64; t++)
		*priced += c.priced_by[t];
	for (int i = 0; i < c.count; i++)
		if (c.nb[i].thr > 0.0 && (best < 0 || c.nb[i].thr > c.nb[best].thr))
			best = i;
	if (best >= 0)
		*out = c.nb[best];
	free(c.nb);
	return best >= 0 ? 1 : 0;
}

/*
 * The plans of fast search planners as further starts, each where it is
 * fast and always to the end of its search (one cut by the clock would
 * make the plan depend on the machine): AMP everywhere (milliseconds) and
 * HexiScale up to 256 GPUs (a tenth of a second there, tens of seconds
 * at 4096).  Sailor's search time varies too much with the cluster
 * (0.03 s to 7 s at 512 GPUs) to take part.  Their templates become shapes and the
 * fill re-derives everything else; the best plan as they priced it is
 * kept in *@rawp, so that the answer is never below theirs.
 */
static const struct {
	planner_f plan;
	int max_gpus;
} fast_planners[] = {
	{ planner_amp, 1 << 30 },
	{ planner_hexiscale, 256 },
};

#define NFAST ARRAY_SIZE(fast_planners)

struct fast_ctx {
	const struct policy_request *req;
	const struct policy_env *env;
	struct costmodel_plan *plan[NFAST];
};

static void fast_task(void *p, int thread, int i)
{
	struct fast_ctx *c = p;
	struct policy_request sub = *c->req;

	if (c->env->gpus > fast_planners[i].max_gpus)
		return;
	sub.threads = 1;
	if (fast_planners[i].plan(&sub, &c->plan[i]) < 0) {
		costmodel_plan_free(c->plan[i]);
		c->plan[i] = NULL;
	}
}

static void baseline_starts(const struct policy_request *req,
			    const struct policy_env *env, int threads,
			    struct cand *out, struct costmodel_plan **rawp,
			    long *priced)
{
	struct fast_ctx c = { .req = req, .env = env };

	planner_parallel(fast_task, &c, NFAST, threads);
	for (size_t i = 0; i < NFAST; i++) {
		struct costmodel_plan *plan = c.plan[i];
		struct cand x = { 0 };
		double thr;

		if (!plan)
			continue;
		*priced += plan->plans_priced;
		if (!*rawp || plan->predicted.samples_per_s >
			      (*rawp)->predicted.samples_per_s) {
			costmodel_plan_free(*rawp);
			*rawp = costmodel_plan_clone(plan);
		}
		for (int t = 0; t < plan->ntemplates && x.n < MAX_TEMPLATES; t++) {
			const struct costmodel_template *tm = &plan->templates[t];

			x.t[x.n].depth = tm->nstages;
			for (int s = 0; s < tm->nstages; s++) {
				x.t[x.n].gpu[s] = tm->stages[s].gpu;
				x.t[x.n].tp[s] = tm->stages[s].tp;
			}
			x.n++;
		}
		costmodel_plan_free(plan);
		if (policy_shapes_evaluate(env->cm, env->cl, x.t, x.n, NULL, &thr,
					   NULL) < 0)
			continue;
		*priced += x.n;
		x.thr = thr;
		if (thr > out->thr)
			*out = x;
	}
}


/*
 * Why nothing fits: fill the template that needs the least memory per GPU
 * (the GPU type with the most memory, its widest TP, as deep as its GPUs
 * and the model allow) and report what the fill says of it.
 */
static int explain_infeasible(const struct policy_request *req)
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
			       "no template fits %s for %s; even %d stages of %s at TP %d do not: %s",
			       cluster, model, shape.depth,
			       costmodel_gpu(cm, best)->name, tp, ar_errmsg());
	else if (rc != -ENOMEM)
		rc = ar_seterr(-AR_EINFEASIBLE,
			       "no template the policy built fits %s for %s",
			       cluster, model);
	costmodel_plan_free(plan);
	costmodel_pool_fini(&pool);
	return rc;
}

/* ---------------------------------------------------------------------
 * The planner.
 * ------------------------------------------------------------------- */

int planner_arachne(const struct policy_request *req,
			struct costmodel_plan **planp)
{
	struct planner_deadline dl;
	int threads = planner_threads(req);
	struct rollout_ctx *rc_ctx = NULL;
	struct policy_net net;
	struct policy_env env;
	struct costmodel_plan *plan = NULL, *raw = NULL;
	struct cand *best = NULL, *mixed = NULL;
	bool have_mixed;
	long priced = 0;
	double spent = 0.0;	/* local-improvement work so far */
	int rc, winner = -1;	/* the best rollout, for the error path */

	*planp = NULL;
	planner_deadline_init(&dl, req);
	rc = policy_net_load_for(&net, req->cm, req->policy_path);
	if (rc < 0)
		return rc;
	rc = policy_env_init(&env, req->cm, req->cl);
	if (rc < 0)
		goto out_net;

	rc_ctx = calloc(1, sizeof(*rc_ctx));
	best = calloc(1, sizeof(*best));
	if (!rc_ctx || !best) {
		rc = -ENOMEM;
		goto out;
	}
	rc_ctx->env = &env;
	rc_ctx->net = &net;
	rc_ctx->seed = req->seed;
	planner_parallel(rollout_task, rc_ctx, ROLLOUTS, threads);
	for (int k = 0; k < ROLLOUTS; k++) {
		priced += rc_ctx->priced[k];
		if (rc_ctx->rc[k] < 0)
			continue;
		if (winner < 0 ||
		    rc_ctx->trace[k].throughput > rc_ctx->trace[winner].throughput)
			winner = k;
	}
	if (winner < 0 || rc_ctx->trace[winner].throughput <= 0.0) {
		for (int k = 0; k < ROLLOUTS; k++)
			if (rc_ctx->rc[k] < 0) {
				rc = ar_seterr(rc_ctx->rc[k], "%s", rc_ctx->err[k]);
				goto out;
			}
		rc = explain_infeasible(req);
		goto out;
	}
	/*
	 * Improve the best few distinct plans the rollouts built, each with
	 * a bounded share of the work: another start often climbs past the
	 * first, and on a small cluster they all fit.
	 */
	mixed = calloc(1, sizeof(*mixed));
	if (!mixed) {
		rc = -ENOMEM;
		goto out;
	}
	if (!req->rollout_starts_only) {
		rc = mixed_start(&env, threads, mixed, &priced);
		if (rc < 0)
			goto out;
		baseline_starts(req, &env, threads, mixed, &raw, &priced);
	}
	have_mixed = mixed->thr > 0.0;
	for (int s = 0, used[ROLLOUTS] = { 0 }; s < STARTS && spent < IMPROVE_WORK_TOTAL; s++) {
		struct cand start = { 0 };
		int pick = -1;

		if (s == 1 && have_mixed) {
			start = *mixed;
			goto climb;
		}

		for (int k = 0; k < ROLLOUTS; k++) {
			const struct policy_trace *t = &rc_ctx->trace[k];
			bool seen = false;

			if (rc_ctx->rc[k] < 0 || used[k] || t->throughput <= 0.0)
				continue;
			for (int q = 0; q < ROLLOUTS && !seen; q++)
				seen = used[q] && rc_ctx->trace[q].best_nshapes == t->best_nshapes &&
				       memcmp(rc_ctx->trace[q].shapes, t->shapes,
					      t->best_nshapes * sizeof(t->shapes[0])) == 0;
			if (seen) {
				used[k] = 1;
				continue;
			}
			if (pick < 0 || t->throughput > rc_ctx->trace[pick].throughput)
				pick = k;
		}
		if (pick < 0)
			continue;	/* no other rollout plan: the mixed start may remain */
		used[pick] = 1;
		start.n = rc_ctx->trace[pick].best_nshapes;
		memcpy(start.t, rc_ctx->trace[pick].shapes, start.n * sizeof(start.t[0]));
		start.thr = rc_ctx->trace[pick].throughput;
climb:
		rc = improve(&env, &start, threads,
			     fmin(IMPROVE_WORK, IMPROVE_WORK_TOTAL - spent), &spent,
			     &priced, &dl);
		if (rc < 0)
			goto out;
		if (s == 0 || start.thr > best->thr)
			*best = start;
	}

	rc = policy_shapes_evaluate(req->cm, req->cl, best->t, best->n, &plan,
				    &best->thr, NULL);
	if (rc < 0)
		goto out;
	priced += best->n;
	rc = layer_moves(&env, &plan, &priced, &dl);
	if (rc < 0)
		goto out;
	if (raw && raw->predicted.samples_per_s > plan->predicted.samples_per_s) {
		rc = layer_moves(&env, &raw, &priced, &dl);
		if (rc < 0)
			goto out;
		costmodel_plan_free(plan);
		plan = raw;
		raw = NULL;
	}

	snprintf(plan->planner, sizeof(plan->planner), "arachne");
	plan->plans_priced = priced;
	/* its search is bounded by counts; only the clock can cut it short */
	plan->search_complete = !planner_deadline_passed(&dl);
	plan->planning_s = ar_now() - dl.start;
	*planp = plan;
	plan = NULL;
out:
	if (rc_ctx)
		for (int k = 0; k < ROLLOUTS; k++)
			policy_trace_fini(&rc_ctx->trace[k]);
	free(rc_ctx);
	free(best);
	free(mixed);
	costmodel_plan_free(raw);
	costmodel_plan_free(plan);
out_net:
	policy_net_fini(&net);
	return rc;
}
