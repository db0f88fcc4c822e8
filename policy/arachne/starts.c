/*
 * starts.c - the plans the learned planner's local improvement starts
 * from: the policy's own rollout plans (the best few with distinct
 * templates), the best structured plan, the best paired plan (the one
 * start that caps a template's replicas), and, only when asked
 * (--seed-planners), the plans of fast search planners.
 */
#define AR_INTERNAL 1
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ar.h"
#include "arachne_private.h"

/* ---------------------------------------------------------------------
 * The policy's rollouts.
 * ------------------------------------------------------------------- */

/* The best prefix plan of rollout @tr as a candidate. */
static void trace_candidate(const struct policy_trace *tr,
			    struct policy_candidate *x)
{
	memset(x, 0, sizeof(*x));
	x->n = tr->best_nshapes;
	for (int i = 0; i < x->n; i++)
		policy_template_from_shape(&x->t[i], &tr->shapes[i]);
	x->thr = tr->throughput;
}

static bool same_templates(const struct policy_candidate *a,
			   const struct policy_candidate *b)
{
	if (a->n != b->n)
		return false;
	for (int i = 0; i < a->n; i++)
		if (!policy_template_equal(&a->t[i], &b->t[i]))
			return false;
	return true;
}

int policy_rollout_starts(const struct policy_trace *tr, const bool *ok,
			  int n, struct policy_candidate *out, int max)
{
	int count = 0;
	bool *taken = calloc(n, sizeof(*taken));

	if (!taken)
		return -ENOMEM;
	while (count < max) {
		struct policy_candidate x;
		bool seen = false;
		int pick = -1;

		for (int k = 0; k < n; k++)
			if (ok[k] && !taken[k] && tr[k].throughput > 0.0 &&
			    (pick < 0 || tr[k].throughput > tr[pick].throughput))
				pick = k;
		if (pick < 0)
			break;
		taken[pick] = true;
		trace_candidate(&tr[pick], &x);
		for (int i = 0; i < count && !seen; i++)
			seen = same_templates(&out[i], &x);
		if (!seen)
			out[count++] = x;
	}
	free(taken);
	return count;
}

/* ---------------------------------------------------------------------
 * Structured plans.
 * ------------------------------------------------------------------- */

/*
 * Stages of each type of @used (of @total GPUs) in a pipeline of @d, in
 * proportion to its GPUs: largest remainder, so that they add up to @d.
 */
static void proportional_counts(const struct policy_env *env, const bool *used,
				int total, int d, int *n)
{
	int given = 0;

	for (int s = 0; s < env->nslots; s++) {
		n[s] = used[s] ? d * env->type_gpus[s] / total : 0;
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
}

/* A template of @n[s] stages of each type at TP @tp, slowest type first. */
static void counts_template(const struct policy_env *env, const int *n, int tp,
			    struct policy_template *t)
{
	memset(t, 0, sizeof(*t));
	for (int s = env->nslots - 1; s >= 0; s--)
		for (int j = 0; j < n[s]; j++)
			t->stage[t->depth++] = (struct policy_stage){ env->slot_type[s], tp };
}

static void reverse_stages(struct policy_template *t)
{
	for (int i = 0, j = t->depth - 1; i < j; i++, j--) {
		struct policy_stage st = t->stage[i];

		t->stage[i] = t->stage[j];
		t->stage[j] = st;
	}
}

static int used_gpus(const struct policy_env *env, const bool *used)
{
	int total = 0;

	for (int s = 0; s < env->nslots; s++)
		if (used[s])
			total += env->type_gpus[s];
	return total;
}

/*
 * Append, for every depth, the single template that gives each GPU type
 * of @used stages in proportion to its GPUs, slowest type first, at TP
 * @tp.
 */
static void proportional_shapes(const struct policy_env *env, const bool *used,
				int tp, struct policy_candidate *x, int *count)
{
	int blocks = costmodel_model(env->cm)->blocks, total = used_gpus(env, used);

	for (int d = 1; d <= POLICY_DMAX && d <= blocks && total; d++) {
		int n[POLICY_SLOTS];

		proportional_counts(env, used, total, d, n);
		counts_template(env, n, tp, &x[*count].t[0]);
		x[(*count)++].n = 1;
	}
}

/*
 * Append, for every depth, the pair of templates whose stages together
 * are the proportional pipeline of twice the depth, when it is not two
 * equal halves.  One proportional template rarely divides the GPUs
 * evenly: its rounding gives a type a stage more than its share, and the
 * fill, packing as many replicas of it as fit, strands the other types'
 * GPUs.  The second template rounds the other way, and the first is
 * capped at the replicas the pair admits so that the second gets its
 * share (qwen3-32b on the 22 A100-80 and 22 A100-40 of unseen-05: 2
 * replicas of 6 + 5 stages, then 2 of 5 + 6, as AMP's search finds).
 */
static void paired_shapes(const struct policy_env *env, const bool *used,
			  int tp, struct policy_candidate *x, int *count)
{
	int blocks = costmodel_model(env->cm)->blocks, total = used_gpus(env, used);

	for (int d = 2; d <= POLICY_DMAX && d <= blocks && total; d++) {
		int first[POLICY_SLOTS], both[POLICY_SLOTS], second[POLICY_SLOTS];
		int pairs = -1;
		bool differ = false, fits = true;

		proportional_counts(env, used, total, d, first);
		proportional_counts(env, used, total, 2 * d, both);
		for (int s = 0; s < env->nslots; s++) {
			second[s] = both[s] - first[s];
			fits = fits && second[s] >= 0;
			differ = differ || second[s] != first[s];
			if (both[s] > 0) {
				int r = env->type_gpus[s] / (both[s] * tp);

				pairs = pairs < 0 || r < pairs ? r : pairs;
			}
		}
		if (!fits || !differ || pairs < 1)
			continue;
		for (int fastest_first = 0; fastest_first < 2; fastest_first++) {
			struct policy_candidate *y = &x[(*count)++];

			counts_template(env, first, tp, &y->t[0]);
			counts_template(env, second, tp, &y->t[1]);
			if (fastest_first) {
				reverse_stages(&y->t[0]);
				reverse_stages(&y->t[1]);
			}
			y->t[0].max_replicas = pairs;
			y->n = 2;
		}
	}
}

/* One pipeline per type, each of the fewest stages that hold the model, at TP index @k. */
static bool per_type_pipelines(const struct policy_env *env, int k,
			       struct policy_candidate *x)
{
	int tp = policy_tp_of(k);

	x->n = 0;
	for (int s = 0; s < env->nslots && x->n < POLICY_MAX_TEMPLATES; s++) {
		int d;

		if (!policy_env_tp_usable(env, env->slot_type[s], tp))
			continue;
		d = policy_env_uniform_depth(env, s, k);
		if (d == 0)
			continue;
		x->t[x->n].depth = d;
		for (int j = 0; j < d; j++)
			x->t[x->n].stage[j] = (struct policy_stage){ env->slot_type[s], tp };
		x->n++;
	}
	return x->n > 0;
}

typedef void (*shapes_f)(const struct policy_env *env, const bool *used,
			 int tp, struct policy_candidate *x, int *count);

/*
 * Append @shapes for every TP degree, with every type or, from three
 * types up, all but one (a type that only slows the others is best left
 * idle).
 */
static void type_families(const struct policy_env *env, shapes_f shapes,
			  struct policy_candidate *x, int *count)
{
	/* idle: the type left out, -1 for none; of two types, none */
	for (int idle = -1; idle < (env->nslots > 2 ? env->nslots : 0); idle++)
		for (int k = 0; k < POLICY_NUM_TP; k++) {
			int tp = policy_tp_of(k);
			bool used[POLICY_SLOTS];

			for (int s = 0; s < env->nslots; s++)
				used[s] = s != idle &&
					  policy_env_tp_usable(env, env->slot_type[s], tp);
			shapes(env, used, tp, x, count);
		}
}

/*
 * Candidates type_families() and the per-type pipelines may append: at
 * most two a depth (paired_shapes()' two type orders) per family and TP.
 */
static size_t family_room(const struct policy_env *env)
{
	return 2 * (size_t)(env->nslots + 1) * POLICY_NUM_TP * (POLICY_DMAX + 1) +
	       POLICY_NUM_TP;
}

/*
 * The fastest of @shapes over type_families() and, with @per_type, of
 * the per-type pipelines, into *@out: 1 when one fits, 0 when none does.
 */
static int best_of_family(const struct policy_env *env, int threads,
			  shapes_f shapes, bool per_type,
			  struct policy_candidate *out, long *priced)
{
	struct policy_candidate *x = calloc(family_room(env), sizeof(*x));
	int count = 0, best = -1;

	if (!x)
		return -ENOMEM;
	type_families(env, shapes, x, &count);
	for (int k = 0; per_type && k < POLICY_NUM_TP; k++)
		if (per_type_pipelines(env, k, &x[count]))
			count++;
	*priced += policy_candidates_price(env, x, count, threads);
	for (int i = 0; i < count; i++)
		if (x[i].thr > 0.0 && (best < 0 || x[i].thr > x[best].thr))
			best = i;
	if (best >= 0)
		*out = x[best];
	free(x);
	return best >= 0 ? 1 : 0;
}

/*
 * The best of two structured families: a single template that gives each
 * GPU type stages in proportion to its GPUs, slowest type first, at one
 * TP degree, for every depth, with every type or, from three types up,
 * all but one; and one pipeline per type.  They are the shapes good
 * search planners reach, and the local improvement climbs from them
 * where the policy's plans sit on another hill.
 */
int policy_structured_start(const struct policy_env *env, int threads,
			    struct policy_candidate *out, long *priced)
{
	return best_of_family(env, threads, proportional_shapes, true, out, priced);
}

int policy_paired_start(const struct policy_env *env, int threads,
			struct policy_candidate *out, long *priced)
{
	return best_of_family(env, threads, paired_shapes, false, out, priced);
}

/* ---------------------------------------------------------------------
 * Search planners' plans (--seed-planners).
 * ------------------------------------------------------------------- */

/*
 * Each where it is fast, and always to the end of its search (one cut by
 * the clock would make the plan depend on the machine): AMP everywhere
 * (milliseconds) and HexiScale up to 256 GPUs (a tenth of a second there,
 * tens of seconds at 4096).  Sailor's search time varies too much with
 * the cluster (0.03 s to 7 s at 512 GPUs) to take part.
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
	/* their search under the cost model, as the climb will price it */
	sub.steering = POLICY_STEERING_SHARED;
	if (fast_planners[i].plan(&sub, &c->plan[i]) < 0) {
		costmodel_plan_free(c->plan[i]);
		c->plan[i] = NULL;
	}
}

/* @plan's templates as a candidate for the fill to re-derive everything else. */
static void plan_candidate(const struct costmodel_plan *plan,
			   struct policy_candidate *x)
{
	memset(x, 0, sizeof(*x));
	for (int t = 0; t < plan->ntemplates && x->n < POLICY_MAX_TEMPLATES; t++) {
		const struct costmodel_template *tm = &plan->templates[t];
		struct policy_template *y = &x->t[x->n++];

		y->depth = tm->nstages;
		for (int s = 0; s < tm->nstages; s++)
			y->stage[s] = (struct policy_stage){ tm->stages[s].gpu,
							     tm->stages[s].tp };
	}
}

void policy_planner_starts(const struct policy_request *req,
			   const struct policy_env *env, int threads,
			   struct policy_candidate *out,
			   struct costmodel_plan **rawp, long *priced)
{
	struct fast_ctx c = { .req = req, .env = env };

	planner_parallel(fast_task, &c, NFAST, threads);
	for (size_t i = 0; i < NFAST; i++) {
		struct costmodel_plan *plan = c.plan[i];
		struct policy_candidate x;

		if (!plan)
			continue;
		*priced += plan->plans_priced;
		if (!*rawp || plan->predicted.samples_per_s >
			      (*rawp)->predicted.samples_per_s) {
			costmodel_plan_free(*rawp);
			*rawp = costmodel_plan_clone(plan);
		}
		plan_candidate(plan, &x);
		costmodel_plan_free(plan);
		if (policy_candidate_fill(env, &x, NULL, NULL) < 0)
			continue;
		*priced += x.n;
		if (x.thr > out->thr)
			*out = x;
	}
}
