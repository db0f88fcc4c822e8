/*
 * amp.c - the AMP baseline (Li et al., NeurIPS 2022), as the Arachne
 * paper's §3.1 describes it: enumerate one TP degree for every stage, the
 * DP degree and the micro-batch size over the whole cluster; split the
 * layers into stages by dynamic programming on per-layer costs averaged
 * over the GPU types (AMP does not see which type a stage lands on); then
 * hand the stages to GPUs in rank order.  docs/baselines.md has the rules
 * and where we depart from them.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ar.h"
#include "baseline.h"

/* A GPU in AMP's rank order: node by node, GPU by GPU. */
struct amp_rank {
	int node;
	int gpu;
};

/* Published steering: a configuration AMP estimated, kept for ranking. */
struct amp_candidate {
	double iter_s;			/* AMP's estimate */
	struct costmodel_plan *plan;	/* complete, unpriced */
};

struct amp {
	struct baseline_search bs;
	struct amp_candidate *cands;
	size_t ncands, cap;
	struct amp_rank *ranks;
	int nranks;
	int node_gpus;			/* uniform node size, or 1 */
	int global_batch;
	int nlayers;
};

/*
 * amp_partition() - split @n layers of cost @cost into @k contiguous
 * stages minimizing the costliest stage: with equal activation sends at
 * every cut, AMP's objective (B - 1) * max + sum + cuts is minimized by
 * the smallest bottleneck.  Writes the stage bounds to @first/@last.
 */
static int amp_partition(const double *cost, int n, int k, int *first,
			 int *last)
{
	double *prefix, *best;
	int *cut;
	int rc = 0;

	prefix = calloc(n + 1, sizeof(*prefix));
	best = calloc((size_t)(k + 1) * (n + 1), sizeof(*best));
	cut = calloc((size_t)(k + 1) * (n + 1), sizeof(*cut));
	if (!prefix || !best || !cut) {
		rc = -ENOMEM;
		goto out;
	}
	for (int i = 0; i < n; i++)
		prefix[i + 1] = prefix[i] + cost[i];
	/* best[j][i]: least bottleneck of the first i layers in j stages. */
	for (int j = 0; j <= k; j++)
		for (int i = 0; i <= n; i++)
			best[j * (n + 1) + i] = INFINITY;
	best[0] = 0;
	for (int j = 1; j <= k; j++) {
		for (int i = j; i <= n - (k - j); i++) {
			for (int c = j - 1; c < i; c++) {
				double prev = best[(j - 1) * (n + 1) + c];
				double here = prefix[i] - prefix[c];
				double b = prev > here ? prev : here;

				if (b < best[j * (n + 1) + i]) {
					best[j * (n + 1) + i] = b;
					cut[j * (n + 1) + i] = c;
				}
			}
		}
	}
	for (int j = k, i = n; j >= 1; j--) {
		int c = cut[j * (n + 1) + i];

		first[j - 1] = c;
		last[j - 1] = i - 1;
		i = c;
	}
out:
	free(prefix);
	free(best);
	free(cut);
	return rc;
}

/*
 * amp_layer_costs() - each layer's time at (@tp, @mbs) averaged over the
 * GPU types of the first @nused ranks.  -AR_ENOPROFILE when a type lacks.
 */
static int amp_layer_costs(struct amp *a, int nused, int tp, int mbs,
			   double *cost)
{
	const struct costmodel_cluster *cl = a->bs.cl;
	bool present[COSTMODEL_MAX_GPU_TYPES] = { false };
	int ntypes = 0;

	for (int r = 0; r < nused; r++)
		present[cl->nodes[a->ranks[r].node].gpu] = true;
	for (int l = 0; l < a->nlayers; l++)
		cost[l] = 0;
	for (int g = 0; g < COSTMODEL_MAX_GPU_TYPES; g++) {
		if (!present[g])
			continue;
		ntypes++;
		for (int l = 0; l < a->nlayers; l++) {
			double t = baseline_layer_time(a->bs.cm, g, tp, mbs, l);

			if (t < 0)
				return -AR_ENOPROFILE;
			cost[l] += t;
		}
	}
	for (int l = 0; l < a->nlayers; l++)
		cost[l] /= ntypes;
	return 0;
}

/*
 * amp_build() - the plan of (@tp, @dp, @pp, @mbs) with the stage bounds
 * @first/@last: stage s takes ranks [s*dp*tp, (s+1)*dp*tp), replica r of
 * it the tp ranks at r*tp inside that.  Replicas whose stages land on the
 * same GPU types form one template.
 */
static int amp_build(struct amp *a, int tp, int dp, int pp, int mbs,
		     const int *first, const int *last,
		     struct costmodel_plan **planp)
{
	const struct costmodel_cluster *cl = a->bs.cl;
	struct costmodel_plan *plan;
	int *seq, *tmpl_of;
	int rc = 0;

	*planp = NULL;
	plan = costmodel_plan_create(a->bs.cm);
	seq = calloc((size_t)dp * pp, sizeof(*seq));
	tmpl_of = calloc(dp, sizeof(*tmpl_of));
	if (!plan || !seq || !tmpl_of) {
		rc = -ENOMEM;
		goto out;
	}
	plan->micro_batch = mbs;
	for (int r = 0; r < dp; r++)
		for (int s = 0; s < pp; s++)
			seq[r * pp + s] = cl->nodes[a->ranks[(s * dp + r) * tp]
							    .node].gpu;
	/* Group replicas by their type sequence. */
	for (int r = 0; r < dp; r++) {
		tmpl_of[r] = -1;
		for (int q = 0; q < r; q++) {
			if (!memcmp(&seq[q * pp], &seq[r * pp],
				    sizeof(*seq) * pp)) {
				tmpl_of[r] = tmpl_of[q];
				break;
			}
		}
		if (tmpl_of[r] < 0)
			tmpl_of[r] = plan->ntemplates++;
	}
	plan->templates = calloc(plan->ntemplates, sizeof(*plan->templates));
	if (!plan->templates) {
		rc = -ENOMEM;
		goto out;
	}
	for (int r = 0; r < dp; r++)
		plan->templates[tmpl_of[r]].replicas++;
	for (int t = 0; t < plan->ntemplates; t++) {
		struct costmodel_template *tp_ = &plan->templates[t];

		tp_->placement = calloc((size_t)tp_->replicas * pp,
					sizeof(*tp_->placement));
		if (!tp_->placement) {
			rc = -ENOMEM;
			goto out;
		}
		tp_->nstages = pp;
		/* AMP gives every replica the same share of the batch. */
		tp_->micro_batches = plan->global_batch / (dp * mbs);
		tp_->replicas = 0;	/* counted again while placing */
	}
	for (int r = 0; r < dp; r++) {
		struct costmodel_template *t = &plan->templates[tmpl_of[r]];
		int row = t->replicas++;

		for (int s = 0; s < pp; s++) {
			const struct amp_rank *rk = &a->ranks[(s * dp + r) * tp];
			struct costmodel_group *grp = &t->placement[row * pp + s];

			grp->node = rk->node;
			for (int i = 0; i < tp; i++)
				grp->gpu[i] = (uint8_t)rk[i].gpu;
		}
	}
	for (int t = 0; t < plan->ntemplates; t++) {
		struct costmodel_template *tt = &plan->templates[t];
		int r0 = -1;

		for (int r = 0; r < dp && r0 < 0; r++)
			if (tmpl_of[r] == t)
				r0 = r;
		for (int s = 0; s < pp; s++) {
			struct costmodel_stage *st = &tt->stages[s];

			st->gpu = seq[r0 * pp + s];
			st->tp = tp;
			st->first_layer = first[s];
			st->last_layer = last[s];
			st->ep = 1;
			st->etp = tp;
			st->edp = tt->replicas;
		}
	}
	*planp = plan;
	plan = NULL;
out:
	costmodel_plan_free(plan);
	free(seq);
	free(tmpl_of);
	return rc;
}

/* Bytes/s between the GPUs of groups @a and @b: one node's link or the network. */
static double amp_link(const struct amp *a, const struct costmodel_group *x,
		       const struct costmodel_group *y)
{
	const struct costmodel_cluster *cl = a->bs.cl;

	if (x->node == y->node)
		return baseline_intra_Bps(a->bs.cm, cl, cl->nodes[x->node].gpu);
	return fmin(baseline_node_link_Bps(a->bs.cm, cl, x->node),
		    baseline_node_link_Bps(a->bs.cm, cl, y->node));
}

/*
 * amp_estimate() - AMP's own estimate of @plan's iteration (its cost
 * model, type-blind as published): every stage runs at the averaged layer
 * costs @cost; a boundary costs the activation volume over the slowest
 * link any replica crosses there; the pipeline takes (M - 1) times its
 * slowest stage plus every stage; the gradient all-reduce of each stage
 * runs over its DP ranks at their slowest link, the slowest stage's
 * setting the sync.
 */
static double amp_estimate(const struct amp *a, const struct costmodel_plan *plan,
			   int dp, int pp, const double *cost, const int *first,
			   const int *last)
{
	double bytes = baseline_boundary_bytes(a->bs.cm) * plan->micro_batch;
	double worst = 0, sum = 0, sync = 0;
	int m = plan->global_batch / (dp * plan->micro_batch);

	for (int s = 0; s < pp; s++) {
		double e = 0, c = 0, bw = INFINITY, w = 0;

		for (int l = first[s]; l <= last[s]; l++)
			e += cost[l];
		for (int j = 0; j < plan->ntemplates; j++) {
			const struct costmodel_template *t = &plan->templates[j];

			for (int r = 0; r < t->replicas; r++) {
				const struct costmodel_group *g =
					costmodel_template_group(t, r, s, 0);

				if (s + 1 < pp) {
					double l = amp_link(a, g,
						costmodel_template_group(t, r, s + 1, 0));

					if (bytes / l > c)
						c = bytes / l;
				}
				bw = fmin(bw, baseline_node_link_Bps(a->bs.cm,
						a->bs.cl, g->node));
			}
			w = fmax(w, baseline_range_weight_bytes(a->bs.cm,
					t->stages[s].gpu, first[s], last[s]) /
				    t->stages[s].tp);
		}
		worst = fmax(worst, e + c);
		sum += e + c;
		sync = fmax(sync, baseline_ring_s(w, dp, bw));
	}
	return (m - 1) * worst + sum + sync;
}

/* One (tp, dp, mbs) candidate on the first @nused ranks. */
static int amp_try(struct amp *a, int nused, int tp, int dp, int mbs,
		   double *cost, bool *priced)
{
	int pp = nused / (tp * dp);
	int first[COSTMODEL_MAX_DEPTH], last[COSTMODEL_MAX_DEPTH];
	struct costmodel_plan *plan;
	int rc;

	rc = amp_layer_costs(a, nused, tp, mbs, cost);
	if (rc < 0)
		return baseline_rc_rejects(rc) ? 0 : rc;
	rc = amp_partition(cost, a->nlayers, pp, first, last);
	if (rc < 0)
		return rc;
	rc = amp_build(a, tp, dp, pp, mbs, first, last, &plan);
	if (rc < 0)
		return rc;
	a->bs.states++;
	if (baseline_published(&a->bs)) {
		if (AR_GROW(a->cands, a->cap, a->ncands + 1, 64) < 0) {
			costmodel_plan_free(plan);
			return -ENOMEM;
		}
		a->cands[a->ncands].iter_s = amp_estimate(a, plan, dp, pp, cost,
							  first, last);
		a->cands[a->ncands++].plan = plan;
		*priced = true;
		return 0;
	}
	rc = baseline_price_choosing(&a->bs, plan);
	if (rc == 0) {
		*priced = true;
		rc = baseline_search_offer(&a->bs, plan);
	} else if (baseline_rc_rejects(rc)) {
		rc = 0;
	}
	costmodel_plan_free(plan);
	return rc;
}

/*
 * amp_search() - AMP's enumeration over the first @nused ranks: TP
 * divides the node size, DP divides the global batch and the rest, PP is
 * what is left, the micro-batch divides each replica's batch.
 */
static int amp_search(struct amp *a, int nused, double *cost, bool *priced)
{
	int gbs = a->global_batch;
	int depth_max = a->nlayers < COSTMODEL_MAX_DEPTH ? a->nlayers :
							   COSTMODEL_MAX_DEPTH;
	int rc;

	for (int tp = 1; tp <= COSTMODEL_MAX_TP && tp <= a->node_gpus; tp *= 2) {
		if (a->node_gpus % tp || nused % tp)
			continue;
		for (int dp = 1; dp <= nused / tp; dp++) {
			int pp;

			if ((nused / tp) % dp || gbs % dp)
				continue;
			pp = nused / (tp * dp);
			if (pp > depth_max)
				continue;
			for (int i = 0; i < BASELINE_NUM_MBS; i++) {
				int mbs = baseline_mbs(i);

				if ((gbs / dp) % mbs)
					continue;
				if (baseline_search_expired(&a->bs))
					return 0;
				rc = amp_try(a, nused, tp, dp, mbs, cost, priced);
				if (rc < 0)
					return rc;
			}
		}
	}
	return 0;
}

static int amp_cand_cmp(const void *x, const void *y)
{
	const struct amp_candidate *a = x, *b = y;

	return a->iter_s < b->iter_s ? -1 : a->iter_s > b->iter_s;
}

/*
 * amp_rank() - published steering: AMP ranks every configuration by its
 * estimate and has no memory model of its own; as the harness that ran
 * it (Sailor's simulator) does, the first in its order that fits the
 * cost model's memory is its plan.  Under the cost objective the ranking
 * is by AMP's estimated dollars a sample instead.
 */
static int amp_rank(struct amp *a)
{
	for (size_t i = 0; i < a->ncands && a->bs.req->objective == POLICY_OBJECTIVE_COST; i++)
		a->cands[i].iter_s *= baseline_plan_usd_per_hour(a->bs.cm,
								 a->cands[i].plan);
	qsort(a->cands, a->ncands, sizeof(*a->cands), amp_cand_cmp);
	for (size_t i = 0; i < a->ncands; i++) {
		struct costmodel_plan *p = a->cands[i].plan;
		int rc;

		a->bs.plans_priced++;
		rc = costmodel_plan_price(a->bs.cm, a->bs.cl, p);
		if (rc == -ENOMEM)
			return rc;
		if (rc < 0)
			continue;
		if (a->bs.req->objective == POLICY_OBJECTIVE_COST)
			a->cands[i].iter_s /= baseline_plan_usd_per_hour(a->bs.cm, p);
		return baseline_search_offer_estimate(&a->bs, p, a->cands[i].iter_s);
	}
	return 0;
}

int planner_amp(const struct policy_request *req, struct costmodel_plan **planp)
{
	struct amp a = { 0 };
	double *cost = NULL;
	bool priced = false;
	int rc;

	*planp = NULL;
	rc = baseline_search_init(&a.bs, req, "amp");
	if (rc < 0)
		return rc;
	a.node_gpus = baseline_node_gpus(req->cl);
	a.nlayers = costmodel_num_layers(req->cm);
	a.nranks = costmodel_cluster_total_gpus(req->cl);
	a.global_batch = baseline_global_batch(req->cm);
	a.ranks = calloc(a.nranks > 0 ? a.nranks : 1, sizeof(*a.ranks));
	cost = calloc(a.nlayers, sizeof(*cost));
	if (!a.ranks || !cost) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t n = 0, r = 0; n < req->cl->nnodes; n++) {
		for (int g = 0; g < req->cl->nodes[n].gpus; g++, r++) {
			a.ranks[r].node = (int)n;
			a.ranks[r].gpu = g;
		}
	}
	/*
	 * AMP plans the whole cluster; where no configuration divides it
	 * (the global batch, the layers), drop nodes from the end until one
	 * prices, as Sailor's harness for AMP does.
	 */
	for (int nused = a.nranks; nused >= a.node_gpus && !priced;
	     nused -= a.node_gpus) {
		rc = amp_search(&a, nused, cost, &priced);
		if (rc < 0 || baseline_search_expired(&a.bs))
			break;
	}
	if (rc == 0 && baseline_published(&a.bs))
		rc = amp_rank(&a);
	if (rc == 0)
		rc = baseline_search_finish(&a.bs, true, planp);
out:
	for (size_t i = 0; i < a.ncands; i++)
		costmodel_plan_free(a.cands[i].plan);
	free(a.cands);
	free(cost);
	free(a.ranks);
	baseline_search_fini(&a.bs);
	return rc;
}
