/*
 * framework.c - plans a stock framework can run.  Arachne's plans may
 * have several templates, stages of different TP degrees and any layer
 * split; a released framework runs fewer.  policy_framework_check() says
 * whether stock Megatron-LM (core_v0.12.0 and later, whose arguments.py
 * and TransformerConfig this follows) runs a plan, naming the property
 * that stops it, and the search below finds the best plan it does run, so
 * that arachne-plan can report the throughput the restriction costs.
 *
 * What stock Megatron-LM expresses (docs/planners.md):
 *  - one pipeline shape, replicated: --pipeline-model-parallel-size and
 *    data parallelism = WORLD_SIZE / (TP x PP), so one template;
 *  - one --tensor-model-parallel-size for every stage, and one expert
 *    layout (--expert-model-parallel-size, --expert-tensor-parallel-size);
 *  - a layer split with every stage's transformer blocks equal, or the
 *    first and the last stage's given (--decoder-first- and
 *    --decoder-last-pipeline-num-layers, each at least 1) and the others
 *    equal, or the embedding and the loss counted as a layer in an even
 *    split (--account-for-embedding-in-pipeline-split,
 *    --account-for-loss-in-pipeline-split);
 *  - a global batch of exactly micro-batches x micro-batch size x replicas
 *    (num_microbatches = global / (micro x DP) must divide evenly);
 *  - no stage with data parallelism of its own.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "policy_private.h"

#define FW_MAX_DEPTH	8	/* as the exhaustive planner's D */

static const char *const framework_names[POLICY_NUM_FRAMEWORKS] = {
	[POLICY_FRAMEWORK_ANY] = "any",
	[POLICY_FRAMEWORK_MEGATRON] = "megatron",
};

const char *policy_framework_name(enum policy_framework fw)
{
	return (unsigned)fw < POLICY_NUM_FRAMEWORKS ? framework_names[fw] : NULL;
}

int policy_framework_find(const char *name)
{
	for (int i = 0; i < POLICY_NUM_FRAMEWORKS; i++)
		if (!strcmp(framework_names[i], name))
			return i;
	return -1;
}

/* Transformer blocks of stage @s of @t: its layers less embedding and head. */
static int stage_blocks(const struct costmodel *cm,
			const struct costmodel_template *t, int s)
{
	const struct costmodel_stage *st = &t->stages[s];
	int n = st->last_layer - st->first_layer + 1;

	if (st->first_layer == 0)
		n--;
	if (st->last_layer == costmodel_num_layers(cm) - 1)
		n--;
	return n;
}

int policy_megatron_split(const struct costmodel *cm,
			  const struct costmodel_template *t,
			  struct policy_megatron_split *out)
{
	int d = t->nstages, b[COSTMODEL_MAX_DEPTH] = { 0 }, total = 0;
	bool middle_equal = true;

	memset(out, 0, sizeof(*out));
	if (d < 1 || d > COSTMODEL_MAX_DEPTH)
		return -AR_EINVAL;
	for (int s = 0; s < d; s++) {
		b[s] = stage_blocks(cm, t, s);
		total += b[s];
	}
	for (int s = 2; s < d - 1; s++)
		middle_equal = middle_equal && b[s] == b[1];
	if (d == 1)
		return 0;
	if (middle_equal && b[0] == b[d - 1] && (d == 2 || b[0] == b[1]) &&
	    b[0] >= 1)
		return 0;	/* even: no flag */
	if (middle_equal && b[0] >= 1 && b[d - 1] >= 1) {
		/* Megatron's even share of the middle is then exactly b[1]. */
		if (d == 2 || b[0] != b[1])
			out->first = b[0];
		if (d > 2 && b[d - 1] != b[1])
			out->last = b[d - 1];
		return 0;
	}
	/* The embedding and the loss counted as layers of an even split. */
	for (int e = 0; e <= 1; e++)
		for (int l = 0; l <= 1; l++) {
			int k = (total + e + l) / d;
			bool ok = (e || l) && (total + e + l) % d == 0 && k >= 1 &&
				  b[0] == k - e && b[d - 1] == k - l;

			for (int s = 1; s < d - 1 && ok; s++)
				ok = b[s] == k;
			if (ok) {
				out->account_embedding = e;
				out->account_loss = l;
				return 0;
			}
		}
	return -AR_EINFEASIBLE;
}

int policy_framework_check(const struct costmodel *cm,
			   const struct costmodel_plan *plan,
			   enum policy_framework fw)
{
	const struct costmodel_template *t;
	struct policy_megatron_split split;
	char blocks[256];
	int len = 0;
	long samples;

	if (fw == POLICY_FRAMEWORK_ANY)
		return 0;
	if (fw != POLICY_FRAMEWORK_MEGATRON)
		return ar_seterr(-AR_EINVAL, "unknown framework %d", fw);
	if (plan->ntemplates != 1)
		return ar_seterr(-AR_EINFEASIBLE, "several templates (%d): stock Megatron-LM replicates one pipeline",
				 plan->ntemplates);
	t = &plan->templates[0];
	for (int s = 0; s < t->nstages; s++) {
		const struct costmodel_stage *st = &t->stages[s];

		if (st->tp != t->stages[0].tp)
			return ar_seterr(-AR_EINFEASIBLE, "per-stage TP (stage 0 TP %d, stage %d TP %d): stock Megatron-LM has one --tensor-model-parallel-size",
					 t->stages[0].tp, s, st->tp);
		if (costmodel_stage_dp(st) > 1)
			return ar_seterr(-AR_EINFEASIBLE, "per-stage data parallelism (stage %d: dp %d): stock Megatron-LM replicates whole pipelines",
					 s, costmodel_stage_dp(st));
		if (st->ep != t->stages[0].ep || st->etp != t->stages[0].etp)
			return ar_seterr(-AR_EINFEASIBLE, "per-stage expert layouts (stage 0 EP %d ETP %d, stage %d EP %d ETP %d): stock Megatron-LM has one of each",
					 t->stages[0].ep, t->stages[0].etp, s,
					 st->ep, st->etp);
	}
	if (policy_megatron_split(cm, t, &split) < 0) {
		for (int s = 0; s < t->nstages && len < (int)sizeof(blocks) - 8; s++)
			len += snprintf(blocks + len, sizeof(blocks) - len,
					"%s%d", s ? " " : "",
					stage_blocks(cm, t, s));
		return ar_seterr(-AR_EINFEASIBLE, "a layer split it cannot express (transformer blocks per stage: %s): stock Megatron-LM gives the first and the last stage any share and the others equal ones",
				 blocks);
	}
	samples = (long)t->micro_batches * plan->micro_batch * t->replicas;
	if (samples != plan->global_batch)
		return ar_seterr(-AR_EINFEASIBLE, "a batch split it cannot express: %d micro-batches of %d on %d replicas are %ld samples, not the global batch of %d",
				 t->micro_batches, plan->micro_batch,
				 t->replicas, samples, plan->global_batch);
	return 0;
}

/* ---------------------------------------------------------------------
 * The restricted search.
 * ------------------------------------------------------------------- */

struct fw_search {
	const struct policy_request *req;
	const struct costmodel *cm;
	const struct costmodel_cluster *cl;
	struct planner_deadline deadline;
	struct costmodel_plan *best;
	struct costmodel_plan *trial;
	long priced;
	bool timed_out;
};

static void offer(struct fw_search *x, const struct costmodel_plan *p)
{
	if (!planner_better(x->req, p, x->best))
		return;
	if (!x->best)
		x->best = costmodel_plan_clone(p);
	else
		costmodel_plan_copy(x->best, p);
}

/* Give the stages of @t blocks @b (embedding on the first, head on the last). */
static void set_split(const struct costmodel *cm, struct costmodel_template *t,
		      const int *b)
{
	int layer = 0, last = costmodel_num_layers(cm) - 1;

	for (int s = 0; s < t->nstages; s++) {
		t->stages[s].first_layer = layer;
		layer += b[s] + (s == 0);
		if (s == t->nstages - 1)
			layer = last + 1;
		t->stages[s].last_layer = layer - 1;
	}
}

static void try_split(struct fw_search *x, struct costmodel_plan *p,
		      const int *b)
{
	set_split(x->cm, &p->templates[0], b);
	x->priced++;
	if (costmodel_plan_price(x->cm, x->cl, p) == 0 &&
	    policy_framework_check(x->cm, p, POLICY_FRAMEWORK_MEGATRON) == 0)
		offer(x, p);
}

/*
 * Every split Megatron-LM expresses near the fill's: an even split, the
 * embedding or the loss counted as a layer, and the first and last stage
 * free with the middle ones at each share the fill gave one of them.
 */
static void try_splits(struct fw_search *x, struct costmodel_plan *p)
{
	struct costmodel_template *t = &p->templates[0];
	int d = t->nstages, L = costmodel_model(x->cm)->blocks;
	int b[COSTMODEL_MAX_DEPTH], kmin = L, kmax = 1;

	if (d == 1) {
		b[0] = L;
		try_split(x, p, b);
		return;
	}
	for (int s = 1; s < d - 1; s++) {
		int n = stage_blocks(x->cm, t, s);

		kmin = n - 1 < kmin ? n - 1 : kmin;
		kmax = n + 1 > kmax ? n + 1 : kmax;
	}
	if (d == 2)
		kmin = kmax = 0;
	for (int e = 0; e <= 1; e++)
		for (int l = 0; l <= 1; l++) {
			int k = (L + e + l) / d;

			if ((L + e + l) % d || k < 1 || k - e < 0 || k - l < 0)
				continue;
			for (int s = 0; s < d; s++)
				b[s] = k;
			b[0] -= e;
			b[d - 1] -= l;
			try_split(x, p, b);
		}
	for (int k = kmin < 1 && d > 2 ? 1 : kmin; k <= kmax; k++) {
		for (int f = 1; f + (d - 2) * k < L; f++) {
			b[0] = f;
			for (int s = 1; s < d - 1; s++)
				b[s] = k;
			b[d - 1] = L - f - (d - 2) * k;
			try_split(x, p, b);
		}
	}
}

/*
 * The replica count and micro-batch size Megatron-LM can run: the global
 * batch must be micro-batches x micro-batch x replicas exactly, so the
 * fill's replicas shrink to the largest count that divides it.
 */
static void try_batch(struct fw_search *x, const struct costmodel_plan *filled)
{
	static const int sizes[] = { 0, 1, 2, 4, 8, 16 };
	const struct costmodel_template *ft = &filled->templates[0];
	int G = filled->global_batch;

	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		int mbs = sizes[i] ? sizes[i] : filled->micro_batch;
		int r = ft->replicas;

		if (sizes[i] == filled->micro_batch || G % mbs)
			continue;
		while (r > 0 && G % (r * mbs))
			r--;
		if (r < 1 || costmodel_plan_copy(x->trial, filled) < 0)
			continue;
		x->trial->micro_batch = mbs;
		x->trial->templates[0].replicas = r;
		x->trial->templates[0].micro_batches = G / (r * mbs);
		try_splits(x, x->trial);
		/* Other sizes only when the fill's costs replicas. */
		if (i == 0 && r == ft->replicas)
			break;
	}
}

static void try_shape(struct fw_search *x, const struct costmodel_shape *shape)
{
	struct costmodel_plan *p = costmodel_plan_create(x->cm);
	struct costmodel_pool pool;

	if (!p)
		return;
	if (costmodel_pool_init(&pool, x->cl) < 0) {
		costmodel_plan_free(p);
		return;
	}
	x->priced++;
	/*
	 * The fill's plan bounds what its Megatron variants reach (they only
	 * constrain its split and replicas), so a shape whose fill cannot
	 * beat the best is passed over.
	 */
	if (costmodel_fill_add(x->cm, x->cl, &pool, p, shape, NULL) == 0 &&
	    planner_better(x->req, p, x->best))
		try_batch(x, p);
	costmodel_pool_fini(&pool);
	costmodel_plan_free(p);
}

/* Stages of @d: @count[k] of GPU type @types[order[k]], groups in @order. */
static void try_orders(struct fw_search *x, int tp, int d, const int *types,
		       const int *count, int *order, int n, int k)
{
	if (x->timed_out)
		return;
	if (k == n) {
		struct costmodel_shape shape = { .depth = d };
		int s = 0;

		for (int g = 0; g < n; g++)
			for (int c = 0; c < count[order[g]]; c++, s++) {
				shape.gpu[s] = types[order[g]];
				shape.tp[s] = tp;
			}
		if (planner_deadline_passed(&x->deadline)) {
			x->timed_out = true;
			return;
		}
		try_shape(x, &shape);
		return;
	}
	for (int i = k; i < n; i++) {
		int tmp = order[k];

		order[k] = order[i];
		order[i] = tmp;
		try_orders(x, tp, d, types, count, order, n, k + 1);
		order[i] = order[k];
		order[k] = tmp;
	}
}

/* Every way to give @left more stages to GPU types @k.. of @types. */
static void try_counts(struct fw_search *x, int tp, int d, const int *types,
		       int ntypes, int *count, int k, int left)
{
	if (k == ntypes - 1) {
		int order[COSTMODEL_MAX_GPU_TYPES], n = 0, sub[COSTMODEL_MAX_GPU_TYPES],
		    subcount[COSTMODEL_MAX_GPU_TYPES];

		count[k] = left;
		for (int i = 0; i < ntypes; i++)
			if (count[i] > 0) {
				sub[n] = types[i];
				subcount[n] = count[i];
				order[n] = n;
				n++;
			}
		try_orders(x, tp, d, sub, subcount, order, n, 0);
		return;
	}
	for (int c = 0; c <= left && !x->timed_out; c++) {
		count[k] = c;
		try_counts(x, tp, d, types, ntypes, count, k + 1, left - c);
	}
}

int planner_megatron(const struct policy_request *req,
		     struct costmodel_plan **planp)
{
	struct fw_search x = { .req = req, .cm = req->cm, .cl = req->cl };
	int blocks = costmodel_model(req->cm)->blocks, rc = 0;

	*planp = NULL;
	planner_deadline_init(&x.deadline, req);
	x.trial = costmodel_plan_create(req->cm);
	if (!x.trial)
		return -ENOMEM;
	for (int tp = 1; tp <= COSTMODEL_MAX_TP && !x.timed_out; tp *= 2) {
		int types[COSTMODEL_MAX_GPU_TYPES], ntypes = 0;

		/* GPU types with a node of tp GPUs and profiles at this TP */
		for (int g = 0; g < costmodel_num_gpus(req->cm); g++) {
			int tps[COSTMODEL_NUM_TP], n = planner_tp_options(req->cm, req->cl, g, tps);

			for (int i = 0; i < n; i++)
				if (tps[i] == tp)
					types[ntypes++] = g;
		}
		for (int d = 1; d <= FW_MAX_DEPTH && d <= blocks && ntypes; d++) {
			int count[COSTMODEL_MAX_GPU_TYPES];

			try_counts(&x, tp, d, types, ntypes, count, 0, d);
		}
	}
	costmodel_plan_free(x.trial);
	if (!x.best)
		return ar_seterr(-AR_EINFEASIBLE, "no plan that stock Megatron-LM runs fits this cluster%s",
				 x.timed_out ? " within the budget" : "");
	x.best->plans_priced = x.priced;
	x.best->search_complete = !x.timed_out;
	*planp = x.best;
	return rc;
}
