/*
 * improve.c - the learned planner's bounded local improvement, beyond the
 * paper: candidate plans as lists of templates, their fill and pricing in
 * parallel, the moves that make a plan's neighbours, the climb over them
 * and a last pass of single-layer moves on the priced plan.
 *
 * Each round of the climb prices every neighbour of the current plan and
 * moves to the best one while that gains.  The moves are a table of
 * generators (moves[] below): a template or one stage at another TP
 * degree or GPU type; a GPU type's stages taken together, re-cut at
 * another TP degree, moved to the front or the end, or one of its stages
 * traded for one of another type; a stage merged with its twin, split in
 * two, removed or doubled; a stage of any type added first or last; a
 * template twice as deep (half the replicas) or cut in two at its middle;
 * a template dropped or filled first; a template of the leftover GPUs
 * added.  The moves on a type's stages reach, in one step, shapes that
 * single-stage moves reach only through slower plans.  A climb may also
 * move one stage elsewhere in its template, tried only once the other
 * moves gain nothing: the planner's last climb, from its best plan.
 *
 * The work is bounded by a count (policy_candidate_work()), not by the
 * clock, so the same start gives the same plan on any machine.  A
 * neighbour the run has priced before takes its number from the climb's
 * priced set (priced.c) and counts as work all the same.
 */
#define AR_INTERNAL 1
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ar.h"
#include "arachne_private.h"

#define IMPROVE_ROUNDS		24	/* local-improvement rounds at most */
#define LAYER_ROUNDS		64	/* layer moves at most */
#define MAX_NEIGHBOURS		2048

/* ---------------------------------------------------------------------
 * Templates and candidates.
 * ------------------------------------------------------------------- */

void policy_template_from_shape(struct policy_template *t,
				const struct costmodel_shape *sh)
{
	memset(t, 0, sizeof(*t));
	t->depth = sh->depth;
	for (int s = 0; s < sh->depth; s++) {
		t->stage[s].gpu = sh->gpu[s];
		t->stage[s].tp = sh->tp[s];
	}
}

void policy_template_to_shape(const struct policy_template *t,
			      struct costmodel_shape *sh)
{
	memset(sh, 0, sizeof(*sh));
	sh->depth = t->depth;
	for (int s = 0; s < t->depth; s++) {
		sh->gpu[s] = t->stage[s].gpu;
		sh->tp[s] = t->stage[s].tp;
	}
}

bool policy_template_equal(const struct policy_template *a,
			   const struct policy_template *b)
{
	if (a->depth != b->depth || a->max_replicas != b->max_replicas)
		return false;
	for (int s = 0; s < a->depth; s++)
		if (a->stage[s].gpu != b->stage[s].gpu ||
		    a->stage[s].tp != b->stage[s].tp)
			return false;
	return true;
}

void policy_template_insert(struct policy_template *t, int at,
			    struct policy_stage st)
{
	memmove(&t->stage[at + 1], &t->stage[at],
		(t->depth - at) * sizeof(t->stage[0]));
	t->stage[at] = st;
	t->depth++;
}

void policy_template_remove(struct policy_template *t, int at)
{
	memmove(&t->stage[at], &t->stage[at + 1],
		(t->depth - at - 1) * sizeof(t->stage[0]));
	t->depth--;
}

/*
 * Fill @x's templates in order into @plan from @pool, skipping those that
 * no longer fit; with @drop_skipped, @x keeps only the ones placed.
 * Returns how many were placed.
 */
static int fill_templates(const struct policy_env *env,
			  struct policy_candidate *x, struct costmodel_pool *pool,
			  struct costmodel_plan *plan, bool drop_skipped)
{
	int rc, placed = 0;

	for (int i = 0; i < x->n; i++) {
		struct costmodel_fill_opts opts = { .max_replicas = x->t[i].max_replicas };
		struct costmodel_shape sh;

		policy_template_to_shape(&x->t[i], &sh);
		rc = costmodel_fill_add(env->cm, env->cl, pool, plan, &sh, &opts);
		if (rc == -AR_EINFEASIBLE || rc == -AR_ENOPROFILE)
			continue;	/* this template no longer fits: skip it */
		if (rc < 0)
			return rc;
		if (drop_skipped)
			x->t[placed] = x->t[i];
		placed++;
	}
	if (drop_skipped)
		x->n = placed;
	return placed;
}

int policy_candidate_drop_unplaced(const struct policy_env *env,
				   struct policy_candidate *x)
{
	struct costmodel_pool pool;
	struct costmodel_plan *plan;
	int rc;

	rc = costmodel_pool_init(&pool, env->cl);
	if (rc < 0)
		return rc;
	plan = costmodel_plan_create(env->cm);
	rc = plan ? fill_templates(env, x, &pool, plan, true) : -ENOMEM;
	costmodel_plan_free(plan);
	costmodel_pool_fini(&pool);
	return rc < 0 ? rc : 0;
}

int policy_candidate_fill(const struct policy_env *env,
			  struct policy_candidate *x,
			  struct costmodel_plan **planp,
			  struct costmodel_pool *left)
{
	struct costmodel_pool pool;
	struct costmodel_plan *plan;
	int rc, placed;

	x->thr = 0.0;
	if (planp)
		*planp = NULL;
	rc = costmodel_pool_init(&pool, env->cl);
	if (rc < 0)
		return rc;
	plan = costmodel_plan_create(env->cm);
	if (!plan) {
		costmodel_pool_fini(&pool);
		return -ENOMEM;
	}
	placed = fill_templates(env, x, &pool, plan, false);
	rc = placed < 0 ? placed : 0;
	if (rc < 0)
		goto out;
	if (placed)
		x->thr = plan->predicted.samples_per_s;
	if (planp) {
		*planp = plan;
		plan = NULL;
	}
	if (left) {
		*left = pool;
		pool.free_mask = NULL;
	}
out:
	costmodel_plan_free(plan);
	costmodel_pool_fini(&pool);
	return rc;
}

struct price_ctx {
	const struct policy_env *env;
	struct policy_candidate *x;
	const int *which;		/* the candidates to price; NULL: all */
	long priced_by[PLANNER_MAX_THREADS];
};

static void price_task(void *p, int thread, int i)
{
	struct price_ctx *c = p;
	struct policy_candidate *x = &c->x[c->which ? c->which[i] : i];

	if (policy_candidate_fill(c->env, x, NULL, NULL) < 0)
		x->thr = 0.0;
	c->priced_by[thread] += x->n;
}

/* Price @x[@which[0..@n-1]] (@which NULL: @x[0..@n-1]) on @threads threads. */
static long price_some(const struct policy_env *env, struct policy_candidate *x,
		       const int *which, int n, int threads)
{
	struct price_ctx c = { .env = env, .x = x, .which = which };
	long priced = 0;

	planner_parallel(price_task, &c, n, threads);
	for (int t = 0; t < PLANNER_MAX_THREADS; t++)
		priced += c.priced_by[t];
	return priced;
}

long policy_candidates_price(const struct policy_env *env,
			     struct policy_candidate *x, int n, int threads)
{
	return price_some(env, x, NULL, n, threads);
}

double policy_candidate_work(const struct policy_env *env,
			     const struct policy_candidate *x)
{
	double layers = costmodel_num_layers(env->cm), w = 0.0;

	for (int t = 0; t < x->n; t++)
		w += (double)env->cl->nnodes + x->t[t].depth * layers;
	return w;
}

/* ---------------------------------------------------------------------
 * Moves.  A generator appends neighbours of the current plan to the list
 * and returns -ENOSPC once it is full (the round then prices what it has).
 * ------------------------------------------------------------------- */

struct moves {
	const struct policy_env *env;
	bool depth_moves;			/* policy_climb.depth_moves */
	bool order_phase;			/* the reordering moves alone */
	const struct policy_candidate *cur;
	const struct costmodel_pool *left;	/* GPUs the current plan leaves */
	struct policy_candidate *nb;		/* [MAX_NEIGHBOURS] */
	int count;
};

/* A new neighbour, a copy of the current plan; NULL when the list is full. */
static struct policy_candidate *nb_new(struct moves *m)
{
	if (m->count >= MAX_NEIGHBOURS)
		return NULL;
	m->nb[m->count] = *m->cur;
	return &m->nb[m->count++];
}

/* The current plan with template @t replaced by @y, unless that is no change. */
static int nb_template(struct moves *m, int t, const struct policy_template *y)
{
	struct policy_candidate *x;

	if (y->depth < 1 || y->depth > POLICY_DMAX ||
	    policy_template_equal(y, &m->cur->t[t]))
		return 0;
	if (!(x = nb_new(m)))
		return -ENOSPC;
	x->t[t] = *y;
	return 0;
}

static bool usable(const struct moves *m, int gpu, int tp)
{
	return policy_env_tp_usable(m->env, gpu, tp);
}

/* @tp, or the largest power of two below it that GPU type @gpu runs; 0 if none. */
static int nearest_tp(const struct moves *m, int gpu, int tp)
{
	while (tp > 1 && !usable(m, gpu, tp))
		tp /= 2;
	return usable(m, gpu, tp) ? tp : 0;
}

/*
 * Whole-template moves first: one stage alone at another TP degree rarely
 * frees a replica's worth of GPUs, all of them together can.  A move that
 * changes fewer than two stages is left to the single-stage moves.
 */
static int move_template_tp(struct moves *m, int t, int unused)
{
	const struct policy_template *sh = &m->cur->t[t];

	for (int k = 0; k < POLICY_NUM_TP; k++) {
		int tp = policy_tp_of(k), changed = 0;
		struct policy_candidate *x = nb_new(m);

		if (!x)
			return -ENOSPC;
		for (int s = 0; s < sh->depth; s++)
			if (sh->stage[s].tp != tp && usable(m, sh->stage[s].gpu, tp)) {
				x->t[t].stage[s].tp = tp;
				changed++;
			}
		if (changed < 2)
			m->count--;
	}
	return 0;
}

static int move_template_type(struct moves *m, int t, int unused)
{
	const struct policy_template *sh = &m->cur->t[t];

	for (int q = 0; q < m->env->nslots; q++) {
		int g = m->env->slot_type[q], changed = 0;
		struct policy_candidate *x = nb_new(m);

		if (!x)
			return -ENOSPC;
		for (int s = 0; s < sh->depth; s++) {
			int tp = nearest_tp(m, g, sh->stage[s].tp);

			if (sh->stage[s].gpu == g || !tp)
				continue;
			x->t[t].stage[s] = (struct policy_stage){ g, tp };
			changed++;
		}
		if (changed < 2)
			m->count--;
	}
	return 0;
}

/* The stages of GPU type @g in @sh: how many, the first and last, their GPUs. */
static int type_run(const struct policy_template *sh, int g, int *first,
		    int *last, int *gpus)
{
	int n = 0;

	*first = *last = -1;
	*gpus = 0;
	for (int s = 0; s < sh->depth; s++)
		if (sh->stage[s].gpu == g) {
			if (*first < 0)
				*first = s;
			*last = s;
			*gpus += sh->stage[s].tp;
			n++;
		}
	return n;
}

/*
 * The moves on one GPU type's stages taken together: the shapes search
 * planners reach (a run of stages per type, at one TP degree) are often
 * several single-stage moves away, and the plans in between are slower,
 * so a climb of single moves stops short of them.  This one re-cuts the
 * type's GPUs per replica at another TP degree, where its first stage
 * was (two H100 stages at TP 2 become four at TP 1).
 */
static int move_type_recut(struct moves *m, int t, int q)
{
	const struct policy_template *sh = &m->cur->t[t];
	int g = m->env->slot_type[q], first, last, gpus;
	int n = type_run(sh, g, &first, &last, &gpus);

	if (n == 0)
		return 0;
	for (int k = 0; k < POLICY_NUM_TP; k++) {
		int tp = policy_tp_of(k), stages = gpus / tp;
		struct policy_template y = { .max_replicas = sh->max_replicas };

		if (gpus % tp || !usable(m, g, tp) ||
		    sh->depth - n + stages > POLICY_DMAX)
			continue;
		for (int s = 0; s < sh->depth; s++) {
			if (s == first)
				for (int j = 0; j < stages; j++)
					y.stage[y.depth++] = (struct policy_stage){ g, tp };
			if (sh->stage[s].gpu != g)
				y.stage[y.depth++] = sh->stage[s];
		}
		if (nb_template(m, t, &y) < 0)
			return -ENOSPC;
	}
	return 0;
}

/* The type's stages, in their order, moved to the front, then to the end. */
static int move_type_to_end(struct moves *m, int t, int q)
{
	const struct policy_template *sh = &m->cur->t[t];
	int g = m->env->slot_type[q], first, last, gpus;

	if (type_run(sh, g, &first, &last, &gpus) == 0)
		return 0;
	for (int end = 0; end < 2; end++) {
		struct policy_template y = { .max_replicas = sh->max_replicas };

		for (int pass = 0; pass < 2; pass++)
			for (int s = 0; s < sh->depth; s++)
				if ((sh->stage[s].gpu == g) == (pass == end))
					y.stage[y.depth++] = sh->stage[s];
		if (nb_template(m, t, &y) < 0)
			return -ENOSPC;
	}
	return 0;
}

/* One more stage of this type (its last, twice), one fewer of another (its last). */
static int move_type_trade(struct moves *m, int t, int q)
{
	const struct policy_template *sh = &m->cur->t[t];
	int g = m->env->slot_type[q], first, last, gpus;

	if (type_run(sh, g, &first, &last, &gpus) == 0)
		return 0;
	for (int r = 0; r < m->env->nslots; r++) {
		int h = m->env->slot_type[r], drop = -1;
		struct policy_template y = { .max_replicas = sh->max_replicas };

		if (h == g)
			continue;
		for (int s = 0; s < sh->depth; s++)
			if (sh->stage[s].gpu == h)
				drop = s;
		if (drop < 0)
			continue;
		for (int s = 0; s < sh->depth; s++) {
			if (s != drop)
				y.stage[y.depth++] = sh->stage[s];
			if (s == last)
				y.stage[y.depth++] = sh->stage[s];
		}
		if (nb_template(m, t, &y) < 0)
			return -ENOSPC;
	}
	return 0;
}

/* Stage @s at another TP degree. */
static int move_stage_tp(struct moves *m, int t, int s)
{
	const struct policy_stage *st = &m->cur->t[t].stage[s];

	for (int k = 0; k < POLICY_NUM_TP; k++) {
		int tp = policy_tp_of(k);
		struct policy_candidate *x;

		if (tp == st->tp || !usable(m, st->gpu, tp))
			continue;
		if (!(x = nb_new(m)))
			return -ENOSPC;
		x->t[t].stage[s].tp = tp;
	}
	return 0;
}

/* Stage @s on another GPU type, at its TP degree or the nearest that fits. */
static int move_stage_type(struct moves *m, int t, int s)
{
	const struct policy_stage *st = &m->cur->t[t].stage[s];

	for (int q = 0; q < m->env->nslots; q++) {
		int g = m->env->slot_type[q], tp = nearest_tp(m, g, st->tp);
		struct policy_candidate *x;

		if (g == st->gpu || !tp)
			continue;
		if (!(x = nb_new(m)))
			return -ENOSPC;
		x->t[t].stage[s] = (struct policy_stage){ g, tp };
	}
	return 0;
}

/* Stage @s merged with the next when that is its twin: one stage at twice the TP. */
static int move_stage_merge(struct moves *m, int t, int s)
{
	const struct policy_template *sh = &m->cur->t[t];
	struct policy_candidate *x;

	if (s + 1 >= sh->depth || sh->stage[s].gpu != sh->stage[s + 1].gpu ||
	    sh->stage[s].tp != sh->stage[s + 1].tp ||
	    !usable(m, sh->stage[s].gpu, 2 * sh->stage[s].tp))
		return 0;
	if (!(x = nb_new(m)))
		return -ENOSPC;
	x->t[t].stage[s].tp *= 2;
	policy_template_remove(&x->t[t], s + 1);
	return 0;
}

/* Stage @s split in two at half its TP. */
static int move_stage_split(struct moves *m, int t, int s)
{
	const struct policy_template *sh = &m->cur->t[t];
	struct policy_stage half = sh->stage[s];
	struct policy_candidate *x;

	if (half.tp <= 1 || sh->depth >= POLICY_DMAX)
		return 0;
	if (!(x = nb_new(m)))
		return -ENOSPC;
	half.tp /= 2;
	x->t[t].stage[s] = half;
	policy_template_insert(&x->t[t], s, half);
	return 0;
}

/* Stage @s removed. */
static int move_stage_drop(struct moves *m, int t, int s)
{
	struct policy_candidate *x;

	if (m->cur->t[t].depth <= 1)
		return 0;
	if (!(x = nb_new(m)))
		return -ENOSPC;
	policy_template_remove(&x->t[t], s);
	return 0;
}

/* Stage @s twice. */
static int move_stage_double(struct moves *m, int t, int s)
{
	const struct policy_template *sh = &m->cur->t[t];
	struct policy_candidate *x;

	if (sh->depth >= POLICY_DMAX)
		return 0;
	if (!(x = nb_new(m)))
		return -ENOSPC;
	policy_template_insert(&x->t[t], s + 1, sh->stage[s]);
	return 0;
}

/*
 * Stage @s moved to each other place in its template.  The order of the
 * same stages matters to the split: the first stage stashes the most
 * activations, the last holds the LM head, and the links between
 * neighbours differ by type.
 */
static int move_stage_shift(struct moves *m, int t, int s)
{
	const struct policy_template *sh = &m->cur->t[t];

	for (int to = 0; to < sh->depth; to++) {
		struct policy_template y = *sh;

		if (to == s)
			continue;
		policy_template_remove(&y, s);
		policy_template_insert(&y, to, sh->stage[s]);
		if (nb_template(m, t, &y) < 0)
			return -ENOSPC;
	}
	return 0;
}

/* A stage of any type and TP put in front or at the end: mixes types. */
static int move_stage_add(struct moves *m, int t, int unused)
{
	const struct policy_template *sh = &m->cur->t[t];

	if (sh->depth >= POLICY_DMAX)
		return 0;
	for (int q = 0; q < m->env->nslots; q++)
		for (int k = 0; k < POLICY_NUM_TP; k++) {
			struct policy_stage st = { m->env->slot_type[q], policy_tp_of(k) };

			if (!usable(m, st.gpu, st.tp))
				continue;
			for (int end = 0; end < 2; end++) {
				struct policy_candidate *x = nb_new(m);

				if (!x)
					return -ENOSPC;
				policy_template_insert(&x->t[t], end ? sh->depth : 0, st);
			}
		}
	return 0;
}

/*
 * Template @t twice as deep, each stage doubled in place: half the
 * replicas, each over twice the stages.  Single-stage doublings reach it
 * only through templates that strand GPUs, so a climb from data
 * parallelism stops short of the deep pipeline a small cluster prefers.
 */
static int move_template_deepen(struct moves *m, int t, int unused)
{
	const struct policy_template *sh = &m->cur->t[t];
	struct policy_candidate *x;

	if (2 * sh->depth > POLICY_DMAX)
		return 0;
	if (!(x = nb_new(m)))
		return -ENOSPC;
	x->t[t].depth = 2 * sh->depth;
	for (int s = 0; s < sh->depth; s++)
		x->t[t].stage[2 * s] = x->t[t].stage[2 * s + 1] = sh->stage[s];
	return 0;
}

/*
 * Template @t cut in two at its middle stage, each half a pipeline of its
 * own: twice the pipelines of half the depth, and a mixed template's
 * halves may each hold other GPU types.
 */
static int move_template_halve(struct moves *m, int t, int unused)
{
	const struct policy_template *sh = &m->cur->t[t];
	struct policy_candidate *x;
	int front = sh->depth / 2;

	if (sh->depth < 2 || m->cur->n >= POLICY_MAX_TEMPLATES)
		return 0;
	if (!(x = nb_new(m)))
		return -ENOSPC;
	memmove(&x->t[t + 1], &x->t[t], (x->n - t) * sizeof(x->t[0]));
	x->n++;
	x->t[t].depth = front;
	x->t[t + 1].depth = sh->depth - front;
	memcpy(&x->t[t + 1].stage[0], &sh->stage[front],
	       (sh->depth - front) * sizeof(sh->stage[0]));
	return 0;
}

/* Template @t dropped: it may be a straggler. */
static int move_template_drop(struct moves *m, int t, int unused)
{
	struct policy_candidate *x;

	if (m->cur->n <= 1)
		return 0;
	if (!(x = nb_new(m)))
		return -ENOSPC;
	memmove(&x->t[t], &x->t[t + 1], (x->n - t - 1) * sizeof(x->t[0]));
	x->n--;
	return 0;
}

/* Template @t filled first: packing order matters. */
static int move_template_first(struct moves *m, int t, int unused)
{
	struct policy_candidate *x;

	if (t == 0)
		return 0;
	if (!(x = nb_new(m)))
		return -ENOSPC;
	x->t[0] = m->cur->t[t];
	memcpy(&x->t[1], &m->cur->t[0], t * sizeof(x->t[0]));
	return 0;
}

/* A uniform template of the GPUs the plan leaves, one type at each TP that fits. */
static int move_leftover(struct moves *m, int unused_t, int unused)
{
	const struct policy_env *env = m->env;

	if (!m->left || m->cur->n >= POLICY_MAX_TEMPLATES)
		return 0;
	for (int q = 0; q < env->nslots; q++) {
		int g = env->slot_type[q];
		int largest = costmodel_pool_largest_free(m->left, g);

		for (int k = 0; k < POLICY_NUM_TP; k++) {
			int tp = policy_tp_of(k), d;
			struct policy_candidate *x;

			if (tp > largest || !usable(m, g, tp))
				continue;
			d = policy_env_uniform_depth(env, q, k);
			if (d == 0 || d * tp > m->left->free_by_type[g])
				continue;
			if (!(x = nb_new(m)))
				return -ENOSPC;
			x->t[x->n].depth = d;
			x->t[x->n].max_replicas = 0;
			for (int j = 0; j < d; j++)
				x->t[x->n].stage[j] = (struct policy_stage){ g, tp };
			x->n++;
		}
	}
	return 0;
}

/* What a move acts on: its generator runs once per template, type, stage or plan. */
enum move_scope {
	ON_TEMPLATE,
	ON_TYPE,
	ON_STAGE,
	ON_PLAN,
};

typedef int (*move_f)(struct moves *m, int t, int i);

/* Which climbs make a move. */
enum move_set {
	MOVES_EVERY,	/* every climb */
	MOVES_DEPTH,	/* with policy_climb.depth_moves */
	MOVES_ORDER,	/* with policy_climb.order_moves, once no other gains */
};

/*
 * Every move, in the order neighbours are listed.  The order matters: a
 * round takes the first of equally fast neighbours, and one cut short by
 * the work bound prices those listed first.  Rows of one scope that
 * follow each other run together per element (for each stage, every
 * stage move), so the neighbours come out template by template, and
 * within one, type by type and stage by stage.
 */
static const struct {
	enum move_scope scope;
	move_f gen;
	enum move_set set;
} moves[] = {
	{ ON_TEMPLATE,	move_template_tp, MOVES_EVERY },
	{ ON_TEMPLATE,	move_template_type, MOVES_EVERY },
	{ ON_TYPE,	move_type_recut, MOVES_EVERY },
	{ ON_TYPE,	move_type_to_end, MOVES_EVERY },
	{ ON_TYPE,	move_type_trade, MOVES_EVERY },
	{ ON_STAGE,	move_stage_tp, MOVES_EVERY },
	{ ON_STAGE,	move_stage_type, MOVES_EVERY },
	{ ON_STAGE,	move_stage_merge, MOVES_EVERY },
	{ ON_STAGE,	move_stage_split, MOVES_EVERY },
	{ ON_STAGE,	move_stage_drop, MOVES_EVERY },
	{ ON_STAGE,	move_stage_double, MOVES_EVERY },
	{ ON_STAGE,	move_stage_shift, MOVES_ORDER },
	{ ON_TEMPLATE,	move_stage_add, MOVES_EVERY },
	{ ON_TEMPLATE,	move_template_deepen, MOVES_DEPTH },
	{ ON_TEMPLATE,	move_template_halve, MOVES_DEPTH },
	{ ON_TEMPLATE,	move_template_drop, MOVES_EVERY },
	{ ON_TEMPLATE,	move_template_first, MOVES_EVERY },
	{ ON_PLAN,	move_leftover, MOVES_EVERY },
};

/* Whether the climb makes row @r of moves[] now. */
static bool move_wanted(const struct moves *m, size_t r)
{
	switch (moves[r].set) {
	case MOVES_DEPTH:
		return m->depth_moves && !m->order_phase;
	case MOVES_ORDER:
		return m->order_phase;
	default:
		return !m->order_phase;
	}
}

/* Elements of template @t a move of @scope runs on. */
static int scope_count(const struct moves *m, enum move_scope scope, int t)
{
	switch (scope) {
	case ON_TYPE:
		return m->env->nslots;
	case ON_STAGE:
		return m->cur->t[t].depth;
	default:
		return 1;
	}
}

/* Rows [@from, @to) of moves[] (one scope) on template @t; -ENOSPC when full. */
static int run_moves(struct moves *m, size_t from, size_t to, int t)
{
	int n = scope_count(m, moves[from].scope, t);

	for (int i = 0; i < n; i++)
		for (size_t r = from; r < to; r++)
			if (move_wanted(m, r) && moves[r].gen(m, t, i) < 0)
				return -ENOSPC;
	return 0;
}

/* The neighbours of @m->cur into @m->nb; a full list just ends early. */
static void neighbours(struct moves *m)
{
	m->count = 0;
	for (int t = 0; t < m->cur->n; t++)
		for (size_t r = 0, end; r < ARRAY_SIZE(moves); r = end) {
			for (end = r + 1; end < ARRAY_SIZE(moves) &&
			     moves[end].scope == moves[r].scope; end++)
				;
			if (moves[r].scope != ON_PLAN && run_moves(m, r, end, t) < 0)
				return;
		}
	for (size_t r = 0; r < ARRAY_SIZE(moves); r++)
		if (moves[r].scope == ON_PLAN && move_wanted(m, r) &&
		    moves[r].gen(m, 0, 0) < 0)
			return;
}

/* ---------------------------------------------------------------------
 * The climb.
 * ------------------------------------------------------------------- */

/*
 * Price the neighbours @nb[0..@n-1]: one whose number @c->priced_set
 * knows takes it, one met earlier in the round takes that one's, and
 * only the rest are filled (in parallel).  @scratch holds 3 * @n ints.
 * After an error the set holds entries that were never priced: the
 * climb fails, and its callers drop the set with it.
 */
static int price_neighbours(struct policy_climb *c, struct policy_candidate *nb,
			    int n, int *scratch)
{
	struct policy_priced *set = c->priced_set;
	/* from[i]: -1 filled now, -2 known, else the neighbour it repeats */
	int *from = scratch, *entry = scratch + n, *fill = scratch + 2 * n;
	int nfill = 0;

	if (!set) {
		c->priced += price_some(c->env, nb, NULL, n, c->threads);
		return 0;
	}
	for (int i = 0; i < n; i++) {
		bool added;
		int e = policy_priced_find(set, &nb[i], &added);

		if (e < 0)
			return e;
		entry[i] = e;
		if (added) {
			set->entry[e].first = i;
			from[i] = -1;
			fill[nfill++] = i;
		} else if (set->entry[e].known) {
			nb[i].thr = set->entry[e].thr;
			from[i] = -2;
		} else {
			from[i] = set->entry[e].first;
		}
	}
	c->priced += price_some(c->env, nb, fill, nfill, c->threads);
	for (int i = 0; i < n; i++) {
		if (from[i] == -1) {
			set->entry[entry[i]].thr = nb[i].thr;
			set->entry[entry[i]].known = true;
		} else if (from[i] >= 0) {
			nb[i].thr = nb[from[i]].thr;
		}
	}
	return 0;
}

int policy_climb_run(struct policy_climb *c, struct policy_candidate *cur,
		     double max_work)
{
	const struct policy_env *env = c->env;
	struct moves m = { .env = env, .depth_moves = c->depth_moves, .cur = cur };
	double work = 0.0;
	int rc = 0, *scratch;

	m.nb = malloc(MAX_NEIGHBOURS * sizeof(*m.nb));
	scratch = malloc(3 * MAX_NEIGHBOURS * sizeof(*scratch));
	if (!m.nb || !scratch) {
		free(m.nb);
		free(scratch);
		return -ENOMEM;
	}
	for (int round = 0; round < IMPROVE_ROUNDS && !planner_deadline_passed(c->dl);
	     round++) {
		struct costmodel_pool left;
		int best = -1, fit = 0;

		rc = policy_candidate_fill(env, cur, NULL, &left);
		if (rc < 0)
			break;
		c->priced += cur->n;
		m.left = &left;
		neighbours(&m);
		costmodel_pool_fini(&left);
		/* keep the neighbours the remaining work allows, in their order */
		while (fit < m.count &&
		       work + policy_candidate_work(env, &m.nb[fit]) <= max_work)
			work += policy_candidate_work(env, &m.nb[fit++]);
		if (fit == 0)
			break;
		rc = price_neighbours(c, m.nb, fit, scratch);
		if (rc < 0)
			break;
		for (int i = 0; i < fit; i++)
			if (m.nb[i].thr > cur->thr * (1.0 + 1e-9) &&
			    (best < 0 || m.nb[i].thr > m.nb[best].thr))
				best = i;
		if (best < 0 && c->order_moves && !m.order_phase) {
			m.order_phase = true;	/* the same plan, reordered */
			continue;
		}
		if (best < 0)
			break;
		m.order_phase = false;
		*cur = m.nb[best];
	}
	free(m.nb);
	free(scratch);
	c->work += work;
	return rc;
}

/* Move one layer across boundary @b of template @t of @plan (@dir -1: down, +1: up). */
static bool layer_move(struct costmodel_plan *plan, int t, int b, int dir)
{
	struct costmodel_stage *lo = &plan->templates[t].stages[b];
	struct costmodel_stage *hi = &plan->templates[t].stages[b + 1];

	if (dir < 0 && lo->last_layer > lo->first_layer) {
		lo->last_layer--;
		hi->first_layer--;
		return true;
	}
	if (dir > 0 && hi->last_layer > hi->first_layer) {
		lo->last_layer++;
		hi->first_layer++;
		return true;
	}
	return false;
}

/* One pass: the first single-layer move that makes *@bestp faster, taken. */
static int layer_pass(const struct policy_env *env, struct costmodel_plan **bestp,
		      struct costmodel_plan **trialp, long *priced, bool *gained)
{
	struct costmodel_plan *best = *bestp;
	double best_thr = best->predicted.samples_per_s;

	*gained = false;
	for (int t = 0; t < best->ntemplates; t++)
		for (int b = 0; b + 1 < best->templates[t].nstages; b++)
			for (int dir = -1; dir <= 1; dir += 2) {
				struct costmodel_plan *trial = *trialp;
				int rc = costmodel_plan_copy(trial, best);

				if (rc < 0)
					return rc;
				if (!layer_move(trial, t, b, dir))
					continue;
				(*priced)++;
				if (costmodel_plan_price(env->cm, env->cl, trial) < 0)
					continue;
				if (trial->predicted.samples_per_s > best_thr * (1.0 + 1e-9)) {
					*bestp = trial;
					*trialp = best;
					*gained = true;
					return 0;
				}
			}
	return 0;
}

int policy_layer_moves(const struct policy_env *env,
		       struct costmodel_plan **planp, long *priced,
		       const struct planner_deadline *dl)
{
	struct costmodel_plan *trial = costmodel_plan_clone(*planp);
	bool gained = true;
	int rc = 0;

	if (!trial)
		return -ENOMEM;
	for (int round = 0; round < LAYER_ROUNDS && gained &&
	     !planner_deadline_passed(dl); round++)
		rc = layer_pass(env, planp, &trial, priced, &gained);
	costmodel_plan_free(trial);
	return rc;
}
