/*
 * construct.c - template construction (Algorithm 1): per step a depth or
 * STOP, then per stage a GPU type and a TP degree, then the cost model's
 * fill completes and prices the template.  The state vector and the
 * feasibility masks for each decision are built here.
 *
 * The masks look ahead.  A choice stays allowed only when the stages still
 * to choose can be completed: enough GPUs remain for one each, a TP group
 * fits a free node of its type, and the stages together can hold the
 * model's layers in memory.  The look-ahead is a greedy completion (the
 * most capacious stage each time); when it succeeds a completion exists,
 * so a construction never walks into a dead end.
 */
#define AR_INTERNAL 1
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ar.h"
#include "arachne_private.h"

#define MAX_FREE COSTMODEL_MAX_NODE_GPUS

/* ---------------------------------------------------------------------
 * Free-GPU histograms: nodes of each type by their free GPUs.
 * ------------------------------------------------------------------- */

struct hist {
	int n[POLICY_SLOTS][MAX_FREE + 1];
	int free[POLICY_SLOTS];
};

static int hist_largest(const int *h)
{
	for (int c = MAX_FREE; c > 0; c--)
		if (h[c] > 0)
			return c;
	return 0;
}

/* Nodes with at least @k free GPUs. */
static int hist_nodes_with(const int *h, int k)
{
	int n = 0;

	for (int c = k; c <= MAX_FREE; c++)
		n += h[c];
	return n;
}

/* Take @k GPUs the way the fill packs a TP group: exact fit first, else larger. */
static void hist_take(int *h, int *free, int k)
{
	for (int c = k; c <= MAX_FREE; c++) {
		if (h[c] > 0) {
			h[c]--;
			h[c - k]++;
			*free -= k;
			return;
		}
	}
}

static int hist_total(const struct hist *hs, int nslots)
{
	int t = 0;

	for (int s = 0; s < nslots; s++)
		t += hs->free[s];
	return t;
}

static bool tp_profiled(const struct policy_env *env, int slot, int k)
{
	return env->speed[slot][k] > 0.0;
}

/*
 * The most replicas the template under construction can pack once its next
 * stage takes @tp GPUs of @slot and each of the @left stages after it one
 * GPU, @hs being what the stages chosen so far leave free: every replica
 * takes as many GPUs of each type again.  The distributed optimizer shards
 * a dense model's optimizer state over the replicas, so a capacity priced
 * with this bound may overstate; the last stage is checked with the fill
 * itself (last_stage_fits()).
 */
static int replica_bound(const struct policy_episode *ep, const struct hist *hs,
			 int slot, int tp, int left)
{
	const struct policy_env *env = ep->env;
	int free_all = 0, taken_all = tp + left;
	double r = INFINITY;

	for (int s = 0; s < env->nslots; s++) {
		int free = ep->pool.free_by_type[env->slot_type[s]];
		int taken = free - hs->free[s];

		free_all += free;
		taken_all += taken;
		if (s == slot)
			taken += tp;
		if (taken > 0)
			r = fmin(r, (double)free / taken);
	}
	r = fmin(r, (double)free_all / taken_all);
	return r >= 1.0 ? (int)r : 1;
}

static double stage_capacity(const struct policy_episode *ep,
			     const struct hist *hs, int slot, int k, int stage,
			     int depth)
{
	if (ep->relax_memory)
		return (double)ep->env->blocks;	/* the fill decides */
	return policy_env_stage_capacity(ep->env, slot, k, stage, depth,
					 ep->pool.free_by_type[ep->env->slot_type[slot]],
					 replica_bound(ep, hs, slot, policy_tp_of(k),
						       depth - stage - 1));
}

/*
 * Can stages @stage..@depth-1 be chosen from @hs so that they hold @need
 * more layers?  Greedy: each stage takes the most capacious (type, TP)
 * that leaves a GPU for every stage after it.
 */
static bool rest_feasible(const struct policy_episode *ep, struct hist hs,
			  int stage, int depth, double need)
{
	const struct policy_env *env = ep->env;

	for (int j = stage; j < depth; j++) {
		int left = depth - j - 1, total = hist_total(&hs, env->nslots);
		int bs = -1, bk = -1;
		double best = 0.0;

		if (total < depth - j)
			return false;
		for (int s = 0; s < env->nslots; s++) {
			int largest = hist_largest(hs.n[s]);

			for (int k = 0; k < POLICY_NUM_TP; k++) {
				int tp = policy_tp_of(k);
				double cap;

				if (tp > largest || total - tp < left ||
				    !tp_profiled(env, s, k))
					continue;
				cap = stage_capacity(ep, &hs, s, k, j, depth);
				if (cap >= 1.0 && cap > best) {
					best = cap;
					bs = s;
					bk = k;
				}
			}
		}
		if (bs < 0)
			return false;
		need -= floor(best);
		hist_take(hs.n[bs], &hs.free[bs], policy_tp_of(bk));
	}
	return need <= 0.0;
}

static void hist_from_pool(const struct policy_episode *ep, struct hist *hs)
{
	const struct policy_env *env = ep->env;

	for (int s = 0; s < env->nslots; s++) {
		int t = env->slot_type[s];

		memcpy(hs->n[s], ep->pool.free_hist[t], sizeof(hs->n[s]));
		hs->free[s] = ep->pool.free_by_type[t];
	}
}

static void hist_from_partial(const struct policy_episode *ep, struct hist *hs)
{
	memcpy(hs->n, ep->part.hist, sizeof(hs->n));
	memcpy(hs->free, ep->part.free, sizeof(hs->free));
}

/* ---------------------------------------------------------------------
 * Masks.
 * ------------------------------------------------------------------- */

static uint32_t depth_mask_compute(const struct policy_episode *ep)
{
	const struct policy_env *env = ep->env;
	int layers = costmodel_model(env->cm)->blocks;	/* a stage holds a block at least */
	uint32_t mask = ep->step > 0 ? 1u : 0u;	/* STOP once a template stands */
	struct hist hs;

	hist_from_pool(ep, &hs);
	for (int d = 1; d <= POLICY_DMAX && d <= layers; d++)
		if (rest_feasible(ep, hs, 0, d, env->blocks))
			mask |= 1u << d;
	return mask;
}

uint32_t policy_mask_depth(const struct policy_episode *ep)
{
	return depth_mask_compute(ep);
}

/*
 * The experts of an MoE stage tile over the replicas the fill settles on,
 * and a dense stage's optimizer state is sharded over them, which no
 * estimate knows before the template is whole (replica_bound() may
 * overstate them).  At its last stage the template is whole: ask the fill
 * itself, on scratch copies.  Exact, so asked also where the memory
 * estimate was relaxed.
 */
static bool last_stage_fits(const struct policy_episode *ep, int slot, int tp)
{
	struct costmodel_shape shape = ep->part.shape;

	shape.gpu[shape.depth] = ep->env->slot_type[slot];
	shape.tp[shape.depth] = tp;
	shape.depth++;
	if (costmodel_pool_copy(ep->trial_pool, &ep->pool) < 0 ||
	    costmodel_plan_copy(ep->trial_plan, ep->plan) < 0)
		return true;	/* out of memory here: let the fill decide */
	return costmodel_fill_add(ep->env->cm, ep->env->cl, ep->trial_pool,
				  ep->trial_plan, &shape, NULL) == 0;
}

static uint32_t tp_mask(const struct policy_episode *ep, int slot, bool any);

/*
 * Whether, with stage d - 2 on @slot at TP index @k, some last stage of
 * a template fits: the mask of a construction that stepped back from
 * a last stage that fit nowhere (the replicas, and with them the
 * experts' tiling and the optimizer's shards, are known only
 * there).  Up to a few dozen fills a candidate, so only then.
 */
static bool last_stage_reachable(const struct policy_episode *ep, int slot,
				  int k)
{
	struct policy_episode ahead = *ep;

	policy_partial_push(&ahead, slot, k);
	for (int s = 0; s < ep->env->nslots; s++)
		if (ahead.part.free[s] > 0 && tp_mask(&ahead, s, true))
			return true;
	return false;
}

/*
 * The TP degrees the next stage may take on @slot; with @any only
 * whether it may take one: the search stops at the first that passes
 * (the device mask asks no more, and on a last stage each
 * degree asked is a fill).
 */
static uint32_t tp_mask(const struct policy_episode *ep, int slot, bool any)
{
	const struct policy_env *env = ep->env;
	const struct policy_partial *p = &ep->part;
	int j = p->shape.depth, d = p->target_depth;
	int largest = hist_largest(p->hist[slot]);
	uint32_t mask = 0;
	struct hist hs;

	hist_from_partial(ep, &hs);
	for (int k = 0; k < POLICY_NUM_TP; k++) {
		int tp = policy_tp_of(k);
		struct hist after = hs;
		double cap;

		if (tp > largest || !tp_profiled(env, slot, k))
			continue;
		cap = stage_capacity(ep, &hs, slot, k, j, d);
		if (cap < 1.0)
			continue;	/* not even one layer fits */
		hist_take(after.n[slot], &after.free[slot], tp);
		if (hist_total(&after, env->nslots) < d - j - 1)
			continue;
		if (!rest_feasible(ep, after, j + 1, d,
				   env->blocks - p->held - floor(cap)))
			continue;
		if (j == d - 1 && !last_stage_fits(ep, slot, tp))
			continue;
		if (j == d - 2 && ep->look_ahead &&
		    !last_stage_reachable(ep, slot, k))
			continue;
		mask |= 1u << k;
		if (any)
			break;
	}
	return mask;
}

uint32_t policy_mask_tp(const struct policy_episode *ep, int slot)
{
	return tp_mask(ep, slot, false);
}

uint32_t policy_mask_device(const struct policy_episode *ep)
{
	uint32_t mask = 0;

	for (int s = 0; s < ep->env->nslots; s++)
		if (ep->part.free[s] > 0 && tp_mask(ep, s, true))
			mask |= 1u << s;
	return mask;
}

/* ---------------------------------------------------------------------
 * The template under construction.
 * ------------------------------------------------------------------- */

void policy_partial_begin(struct policy_episode *ep, int depth)
{
	struct policy_partial *p = &ep->part;
	struct hist hs;

	memset(p, 0, sizeof(*p));
	p->target_depth = depth;
	ep->look_ahead = false;
	hist_from_pool(ep, &hs);
	memcpy(p->hist, hs.n, sizeof(p->hist));
	memcpy(p->free, hs.free, sizeof(p->free));
}

void policy_partial_push(struct policy_episode *ep, int slot, int k)
{
	struct policy_partial *p = &ep->part;
	int j = p->shape.depth, tp = policy_tp_of(k);
	struct hist before;

	hist_from_partial(ep, &before);
	p->shape.gpu[j] = ep->env->slot_type[slot];
	p->shape.tp[j] = tp;
	p->shape.depth = j + 1;
	hist_take(p->hist[slot], &p->free[slot], tp);
	p->claimed[slot] += tp;
	p->held += floor(stage_capacity(ep, &before, slot, k, j, p->target_depth));
}

/* ---------------------------------------------------------------------
 * The state vector (Table 2).
 * ------------------------------------------------------------------- */

/*
 * Per candidate depth d: what a d-stage pipeline on the @free_total free
 * GPUs would face, so that the depth head scores each depth by its own
 * numbers as the type and TP heads do their candidates.  The bubble
 * counts micro-batches of one sample, m = global batch / replicas; the
 * load is the blocks per stage over the cluster's mean TP-1 stage
 * capacity with the optimizer state sharded over those replicas, capped
 * at 4x and scaled to [0, 1] (so at most 0.25 fits).
 */
static void depth_features(const struct policy_env *env, int free_total, float *out)
{
	int batch = costmodel_model(env->cm)->global_batch;

	for (int d = 1; d <= POLICY_DMAX; d++) {
		float *f = out + (d - 1) * POLICY_DEPTH_FEATURES;
		int replicas = free_total / d;
		double m = replicas > 0 ? fmax(1.0, (double)batch / replicas) : 1.0;
		double idle = free_total ? 1.0 - (double)replicas * d / free_total : 1.0;
		double bubble = (d - 1) / (m + d - 1);
		double cap = policy_env_mean_capacity(env, replicas);
		double load = cap > 0 ? fmin(env->blocks / (d * cap), 4.0) / 4.0 : 1.0;
		int fits = load <= 0.25;

		f[0] = (float)idle;
		f[1] = (float)bubble;
		f[2] = (float)load;
		f[3] = fits ? (float)((1.0 - idle) * (1.0 - bubble)) : 0.0f;
	}
}

/*
 * The replicas a template packs are bounded by its scarcest type: the
 * free GPUs of each type over the GPUs a replica takes of it (node fit
 * aside).  With @extra_gpus more of slot @extra_slot (-1: none);
 * infinite before the first stage.
 */
static double template_replicas(const struct policy_episode *ep, int extra_slot,
				int extra_gpus)
{
	const struct policy_env *env = ep->env;
	double r = INFINITY;

	for (int s = 0; s < env->nslots; s++) {
		int take = ep->part.claimed[s] + (s == extra_slot ? extra_gpus : 0);

		if (take > 0)
			r = fmin(r, (double)ep->pool.free_by_type[env->slot_type[s]] / take);
	}
	return r;
}

/*
 * Per TP degree k, what a TP-k stage of @slot next would leave the
 * template: its replicas over the free GPUs per stage (the replicas were
 * every free GPU used at TP 1), and over its replicas before that stage.
 * A scarce type in a template caps its replicas and strands the other
 * types' GPUs; these say so where the share features only imply it.
 */
static void replica_features(const struct policy_episode *ep, int free_total,
			     int slot, float *f)
{
	double before = template_replicas(ep, -1, 0);
	double ideal = (double)free_total / ep->part.target_depth;

	for (int k = 0; k < POLICY_NUM_TP; k++) {
		double r = template_replicas(ep, slot, policy_tp_of(k));

		f[PT_REPLICAS + k] = ideal > 0 ? (float)fmin(r / ideal, 1.0) : 0.0f;
		f[PT_SHRINK + k] = isinf(before) ? 1.0f : (float)fmin(r / before, 1.0);
	}
}

void policy_state_build(const struct policy_episode *ep, enum policy_head head,
			int slot, float *x)
{
	const struct policy_env *env = ep->env;
	const struct policy_partial *p = &ep->part;
	int free_total = 0, j = p->shape.depth;
	int prev_slot = -1, prev_tp = 0;
	float *g = x + POLICY_GLOBAL_OFF;

	memset(x, 0, POLICY_STATE_DIM * sizeof(*x));
	if (head != POLICY_HEAD_DEPTH && j > 0) {
		prev_slot = env->type_slot[p->shape.gpu[j - 1]];
		prev_tp = p->shape.tp[j - 1];
	}
	for (int s = 0; s < env->nslots; s++) {
		int t = env->slot_type[s];
		const int *h = ep->pool.free_hist[t];
		int free = ep->pool.free_by_type[t];
		float *f = x + POLICY_TYPES_OFF + s * POLICY_TYPE_FEATURES;
		int tent_largest = hist_largest(head == POLICY_HEAD_DEPTH ?
						h : p->hist[s]);

		memcpy(f, env->type_static[s], sizeof(env->type_static[s]));
		free_total += free;
		f[PT_FREE_FRAC] = (float)free / env->type_gpus[s];
		f[PT_NODE_FRAC] = (float)hist_nodes_with(h, 1) / env->type_nodes[s];
		f[PT_FREE_SHARE] = (float)free / env->gpus;
		for (int k = 0; k < POLICY_NUM_TP; k++) {
			f[PT_NODES + k] = (float)hist_nodes_with(h, policy_tp_of(k)) /
					  env->type_nodes[s];
			f[PT_TP_OK + k] = policy_tp_of(k) <= tent_largest &&
					  tp_profiled(env, s, k);
		}
		if (head != POLICY_HEAD_DEPTH)
			f[PT_CLAIMED] = free ? (float)p->claimed[s] / free : 0.0f;
		f[PT_PREV] = s == prev_slot;
	}

	g[PG_LOG_SIZE] = (float)(log2(env->gpus) / 12.0);
	g[PG_STEP] = (float)ep->step / POLICY_MAX_STEPS;
	g[PG_FREE] = (float)free_total / env->gpus;
	for (int d = 1; d <= POLICY_DMAX; d++)
		g[PG_PER_DEPTH + d - 1] = (float)(log2(1.0 + (double)free_total / d) / 12.0);
	if (head != POLICY_HEAD_DEPTH) {
		g[PG_DEPTH] = (float)p->target_depth / POLICY_DMAX;
		g[PG_STAGE] = (float)j / p->target_depth;
		g[PG_STAGES_LEFT] = (float)(p->target_depth - j) / POLICY_DMAX;
		g[PG_HELD] = (float)fmin(p->held / env->blocks, 2.0) / 2.0f;
		g[PG_PREV_TP] = prev_tp ? (float)(log2(prev_tp) / 3.0) : 0.0f;
	}
	depth_features(env, free_total, x + POLICY_DEPTHF_OFF);
	if (head != POLICY_HEAD_DEPTH)
		for (int s = 0; s < env->nslots; s++)
			replica_features(ep, free_total, s,
					 x + POLICY_TYPES_OFF + s * POLICY_TYPE_FEATURES);
	g[PG_PHASE + head] = 1.0f;
	g[PG_THROUGHPUT] = (float)fmin(ep->throughput / env->reference, 2.0);
	g[PG_TEMPLATES] = (float)ep->plan->ntemplates / POLICY_MAX_STEPS;

	memcpy(x + POLICY_COMP_OFF, env->comp, sizeof(env->comp));
}

/* ---------------------------------------------------------------------
 * Episodes.
 * ------------------------------------------------------------------- */

int policy_episode_init(struct policy_episode *ep, const struct policy_env *env)
{
	int rc;

	memset(ep, 0, sizeof(*ep));
	ep->env = env;
	rc = costmodel_pool_init(&ep->pool, env->cl);
	if (rc < 0)
		return rc;
	ep->plan = costmodel_plan_create(env->cm);
	ep->best = costmodel_plan_create(env->cm);
	ep->trial_plan = costmodel_plan_create(env->cm);
	ep->trial_pool = calloc(1, sizeof(*ep->trial_pool));
	if (!ep->plan || !ep->best || !ep->trial_plan || !ep->trial_pool) {
		policy_episode_fini(ep);
		return -ENOMEM;
	}
	return 0;
}

void policy_episode_fini(struct policy_episode *ep)
{
	if (!ep || !ep->env)
		return;
	costmodel_pool_fini(&ep->pool);
	costmodel_plan_free(ep->plan);
	costmodel_plan_free(ep->best);
	costmodel_plan_free(ep->trial_plan);
	if (ep->trial_pool)
		costmodel_pool_fini(ep->trial_pool);
	free(ep->trial_pool);
	memset(ep, 0, sizeof(*ep));
}

int policy_episode_reset(struct policy_episode *ep)
{
	const struct policy_env *env = ep->env;
	struct costmodel_plan *fresh;
	int rc;

	costmodel_pool_fini(&ep->pool);
	rc = costmodel_pool_init(&ep->pool, env->cl);
	if (rc < 0)
		return rc;
	fresh = costmodel_plan_create(env->cm);
	if (!fresh)
		return -ENOMEM;
	costmodel_plan_free(ep->plan);
	ep->plan = fresh;
	rc = costmodel_plan_copy(ep->best, fresh);	/* no best yet */
	if (rc < 0)
		return rc;
	ep->step = 0;
	ep->throughput = 0.0;
	ep->relax_memory = false;
	memset(&ep->part, 0, sizeof(ep->part));
	return 0;
}

/* ---------------------------------------------------------------------
 * Rollouts.
 * ------------------------------------------------------------------- */

void policy_trace_clear(struct policy_trace *tr)
{
	struct policy_decision *dec = tr->dec;
	uint8_t *dec_step = tr->dec_step;
	size_t cap = tr->cap, step_cap = tr->step_cap;

	memset(tr, 0, sizeof(*tr));
	tr->dec = dec;
	tr->dec_step = dec_step;
	tr->cap = cap;
	tr->step_cap = step_cap;
}

void policy_trace_fini(struct policy_trace *tr)
{
	if (!tr)
		return;
	free(tr->dec);
	free(tr->dec_step);
	memset(tr, 0, sizeof(*tr));
}

static struct policy_decision *trace_push(struct policy_trace *tr, int step)
{
	if (AR_GROW(tr->dec, tr->cap, tr->ndec + 1, 64) < 0 ||
	    AR_GROW(tr->dec_step, tr->step_cap, tr->ndec + 1, 64) < 0)
		return NULL;
	tr->dec_step[tr->ndec] = (uint8_t)step;
	return &tr->dec[tr->ndec++];
}

static int mask_count(uint32_t mask)
{
	return __builtin_popcount(mask);
}

/* The @i-th allowed candidate of @mask. */
static int mask_nth(uint32_t mask, int i)
{
	for (int c = 0; c < 32; c++)
		if ((mask & (1u << c)) && i-- == 0)
			return c;
	return -1;
}

/*
 * Decide one candidate of @d (state and mask filled in): run the network,
 * then take the argmax, a sample, or a uniform forced choice.
 */
static int decide(const struct policy_net *net, struct policy_work *w,
		  struct policy_rng *rng, struct policy_decision *d,
		  enum policy_draw draw, float temperature, uint32_t forced_mask)
{
	int nc = policy_head_cands(d->head), a = -1;
	float logp[POLICY_MAX_CANDS];

	if (draw == POLICY_DRAW_UNIFORM) {	/* no network: the random ablation */
		uint32_t m = forced_mask ? forced_mask : d->mask;

		a = mask_nth(m, policy_rng_below(rng, mask_count(m)));
		d->action = (uint8_t)a;
		d->forced = 1;
		d->old_logp = (float)-log(mask_count(m));
		return a;
	}
	policy_net_forward(net, w, d, 1);
	policy_log_softmax(w->logits, d->mask, nc, logp);

	if (forced_mask) {
		a = mask_nth(forced_mask, policy_rng_below(rng, mask_count(forced_mask)));
		d->forced = 1;
	} else if (draw == POLICY_DRAW_GREEDY) {
		a = policy_masked_argmax(logp, d->mask, nc);
	} else {
		float scaled[POLICY_MAX_CANDS];
		double u = policy_rng_uniform(rng), acc = 0.0;

		if (temperature > 0.0f && temperature != 1.0f) {
			for (int c = 0; c < nc; c++)
				scaled[c] = w->logits[c] / temperature;
			policy_log_softmax(scaled, d->mask, nc, scaled);
		} else {
			memcpy(scaled, logp, sizeof(scaled));
		}
		for (int c = 0; c < nc; c++) {
			if (!(d->mask & (1u << c)))
				continue;
			a = c;
			acc += exp(scaled[c]);
			if (u < acc)
				break;
		}
	}
	d->action = (uint8_t)a;
	d->old_logp = logp[a];
	return a;
}

/*
 * What a replayed rollout (opts->follow) must decide next, as a one-bit
 * forced mask: the depth of template @step (STOP past the last), or the
 * GPU type's slot and the TP index of stage @j.  0 when the candidate
 * holds a type or TP degree the policy cannot name.
 */
static uint32_t follow_depth(const struct policy_candidate *x, int step)
{
	return step < x->n ? 1u << x->t[step].depth : 1u;
}

static uint32_t follow_slot(const struct policy_env *env,
			    const struct policy_candidate *x, int step, int j)
{
	int slot = env->type_slot[x->t[step].stage[j].gpu];

	return slot >= 0 ? 1u << slot : 0;
}

static uint32_t follow_tp(const struct policy_candidate *x, int step, int j)
{
	for (int k = 0; k < POLICY_NUM_TP; k++)
		if (policy_tp_of(k) == x->t[step].stage[j].tp)
			return 1u << k;
	return 0;
}

int policy_rollout(struct policy_episode *ep, const struct policy_net *net,
		   struct policy_work *w, struct policy_rng *rng,
		   const struct policy_rollout_opts *opts,
		   struct policy_trace *tr)
{
	const struct policy_env *env = ep->env;
	struct policy_decision scratch;
	int rc;

	rc = policy_episode_reset(ep);
	if (rc < 0)
		return rc;
	policy_trace_clear(tr);
	tr->first_depth = 0;

	while (ep->step < POLICY_MAX_STEPS) {
		struct policy_decision *d;
		uint32_t mask, forced = 0;
		int depth, ndec_step = 0;
		double before = ep->throughput;
		struct policy_partial before_last;	/* before the latest stage */
		bool dead_end;

		mask = policy_mask_depth(ep);
		if (ep->step == 0 && mask == 0) {
			/* The memory estimate may be too strict: let the fill decide. */
			ep->relax_memory = true;
			mask = policy_mask_depth(ep);
			if (mask == 0)
				return ar_seterr(-AR_EINFEASIBLE,
						 "no pipeline depth fits the %d free GPUs",
						 env->gpus);
		}
		if (mask == 1u)
			break;	/* only STOP remains */

		d = opts->record ? trace_push(tr, ep->step) : &scratch;
		if (!d)
			return -ENOMEM;
		memset(d, 0, offsetof(struct policy_decision, x));
		d->head = POLICY_HEAD_DEPTH;
		d->mask = mask;
		if (opts->draw != POLICY_DRAW_UNIFORM)
			policy_state_build(ep, POLICY_HEAD_DEPTH, 0, d->x);
		if (opts->follow) {
			forced = follow_depth(opts->follow, ep->step);
			if (!(forced & mask))
				return ar_seterr(-AR_EINFEASIBLE,
						 "the replayed plan's template %d is masked out",
						 ep->step);
		} else if (opts->forced_depth_p > 0 &&
			   policy_rng_uniform(rng) < opts->forced_depth_p) {
			forced = mask & ~1u;
		}
		depth = decide(net, w, rng, d, opts->draw, opts->depth_temperature,
			       forced);
		ndec_step++;
		if (depth == 0)
			break;	/* STOP */
		if (ep->step == 0)
			tr->first_depth = depth;

		policy_partial_begin(ep, depth);
		dead_end = false;
		for (int j = 0; j < depth && !dead_end; j++) {
			uint32_t gmask = policy_mask_device(ep);
			int slot, k;

			if (!gmask && j == depth - 1 && j > 0 && !ep->look_ahead) {
				/*
				 * Only a last stage the fill refuses gets here
				 * (see last_stage_fits()): step back and choose
				 * stage j - 1 again among the choices that
				 * leave a last stage that fits.
				 */
				ep->part = before_last;
				ep->look_ahead = true;
				tr->steps_back++;
				if (opts->record)
					tr->ndec -= 2;
				ndec_step -= 2;
				j -= 2;
				continue;
			}
			if (!gmask) {
				dead_end = true;
				break;
			}
			before_last = ep->part;
			d = opts->record ? trace_push(tr, ep->step) : &scratch;
			if (!d)
				return -ENOMEM;
			memset(d, 0, offsetof(struct policy_decision, x));
			d->head = POLICY_HEAD_DEVICE;
			d->mask = gmask;
			if (opts->draw != POLICY_DRAW_UNIFORM)
				policy_state_build(ep, POLICY_HEAD_DEVICE, 0, d->x);
			forced = opts->uniform_devices ? d->mask : 0;
			if (opts->follow) {
				forced = follow_slot(env, opts->follow, ep->step, j);
				if (!(forced & d->mask))
					return ar_seterr(-AR_EINFEASIBLE,
							 "the replayed plan's stage %d of template %d is masked out",
							 j, ep->step);
			}
			slot = decide(net, w, rng, d, opts->draw,
				      opts->stage_temperature, forced);
			ndec_step++;

			d = opts->record ? trace_push(tr, ep->step) : &scratch;
			if (!d)
				return -ENOMEM;
			memset(d, 0, offsetof(struct policy_decision, x));
			d->head = POLICY_HEAD_TP;
			d->slot = (uint8_t)slot;
			d->mask = policy_mask_tp(ep, slot);
			if (opts->draw != POLICY_DRAW_UNIFORM)
				policy_state_build(ep, POLICY_HEAD_TP, slot, d->x);
			forced = 0;
			if (opts->follow) {
				forced = follow_tp(opts->follow, ep->step, j);
				if (!(forced & d->mask))
					return ar_seterr(-AR_EINFEASIBLE,
							 "the replayed plan's TP at stage %d of template %d is masked out",
							 j, ep->step);
			}
			k = decide(net, w, rng, d, opts->draw,
				   opts->stage_temperature, forced);
			ndec_step++;
			policy_partial_push(ep, slot, k);
		}

		if (dead_end) {
			rc = -AR_EINFEASIBLE;
		} else {
			rc = costmodel_fill_add(env->cm, env->cl, &ep->pool, ep->plan,
						&ep->part.shape, NULL);
			ep->plans_priced++;
		}
		tr->decisions_in_step[ep->step] = ndec_step;
		tr->nsteps = ep->step + 1;
		if (rc == -AR_EINFEASIBLE || rc == -AR_ENOPROFILE) {
			/* Eq. (1): -delta at the first step; later, the episode ends. */
			if (ep->step == 0)
				tr->rewards[0] = -POLICY_INFEASIBLE_PENALTY;
			tr->ret += tr->rewards[ep->step];
			ep->step++;
			break;
		}
		if (rc < 0)
			return rc;
		ep->throughput = ep->plan->predicted.samples_per_s;
		tr->rewards[ep->step] = (float)((ep->throughput - before) /
						env->reference);
		tr->ret += tr->rewards[ep->step];
		tr->shapes[tr->nshapes++] = ep->part.shape;
		if (ep->throughput > tr->throughput) {
			tr->throughput = ep->throughput;
			tr->best_nshapes = tr->nshapes;
			rc = costmodel_plan_copy(ep->best, ep->plan);
			if (rc < 0)
				return rc;
		}
		ep->step++;
	}
	return 0;
}
