/*
 * baseline.c - bookkeeping and profile sums shared by the baseline
 * planners of this folder (amp.c, espresso.c, hexiscale.c, metis.c,
 * sailor.c).
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ar.h"
#include "baseline.h"

int baseline_search_init(struct baseline_search *bs,
			 const struct policy_request *req, const char *name)
{
	memset(bs, 0, sizeof(*bs));
	if (!req->cm || !req->cl)
		return ar_seterr(-AR_EINVAL, "%s: no model or no cluster given",
				 name);
	bs->req = req;
	bs->cm = req->cm;
	bs->cl = req->cl;
	bs->name = name;
	planner_deadline_init(&bs->deadline, req);
	return 0;
}

void baseline_search_fini(struct baseline_search *bs)
{
	costmodel_plan_free(bs->best);
	bs->best = NULL;
}

bool baseline_search_expired(struct baseline_search *bs)
{
	if (!bs->expired && planner_deadline_passed(&bs->deadline))
		bs->expired = true;
	return bs->expired;
}

bool baseline_published(const struct baseline_search *bs)
{
	return bs->req->steering == POLICY_STEERING_PUBLISHED;
}

/* Keep a copy of @plan as the best, scored @score. */
static int search_keep(struct baseline_search *bs,
		       const struct costmodel_plan *plan, double score)
{
	bs->best_score = score;
	if (!bs->best) {
		bs->best = costmodel_plan_clone(plan);
		return bs->best ? 0 : -ENOMEM;
	}
	return costmodel_plan_copy(bs->best, plan);
}

int baseline_search_offer(struct baseline_search *bs,
			  const struct costmodel_plan *plan)
{
	double score = planner_score(bs->req, plan);

	if (bs->best && score <= bs->best_score)
		return 0;
	return search_keep(bs, plan, score);
}

int baseline_search_offer_estimate(struct baseline_search *bs,
				   const struct costmodel_plan *plan,
				   double iter_s)
{
	struct costmodel_plan scored = { 0 };
	double score;
	int rc;

	if (!(iter_s > 0) || !isfinite(iter_s))
		return 0;
	/* Its own estimate, scored as the cost model's would be. */
	scored.predicted.samples_per_s = plan->global_batch / iter_s;
	scored.predicted.usd_per_sample = baseline_plan_usd_per_hour(bs->cm, plan) /
					  3600.0 / scored.predicted.samples_per_s;
	score = planner_score(bs->req, &scored);
	if (bs->best && score <= bs->best_score)
		return 0;
	rc = search_keep(bs, plan, score);
	if (rc == 0)
		bs->best_estimate_s = iter_s;
	return rc;
}

int baseline_search_finish(struct baseline_search *bs, bool complete,
			   struct costmodel_plan **planp)
{
	struct costmodel_plan *plan = bs->best;
	int rc;

	*planp = NULL;
	if (!plan)
		return ar_seterr(-AR_EINFEASIBLE,
				 "%s: no feasible plan on cluster %s (%ld states explored, %ld plans priced%s)",
				 bs->name, bs->cl->name ? bs->cl->name : "",
				 bs->states, bs->plans_priced,
				 bs->expired ? ", budget spent" : "");
	if (baseline_published(bs)) {
		/* A plan a baseline built itself must be whole. */
		rc = costmodel_plan_check(bs->cm, bs->cl, plan);
		if (rc < 0)
			return ar_seterr(rc, "%s: built a broken plan: %s", bs->name,
					 ar_errmsg());
		/* Only the plan it chose meets the cost model, as in the paper. */
		bs->plans_priced++;
		rc = costmodel_plan_price(bs->cm, bs->cl, plan);
		if (rc < 0)
			return ar_seterr(rc == -ENOMEM ? rc : -AR_EINFEASIBLE,
					 "%s: the plan it chose with its own estimator (%.1f samples/s by its estimate) fails the cost model: %s",
					 bs->name, plan->global_batch / bs->best_estimate_s,
					 ar_errmsg());
		plan->planner_estimate_samples_per_s = plan->global_batch /
						       bs->best_estimate_s;
	}
	bs->best = NULL;
	snprintf(plan->planner, sizeof(plan->planner), "%s", bs->name);
	plan->planning_s = ar_now() - bs->deadline.start;
	plan->plans_priced = bs->plans_priced;
	plan->states_explored = bs->states;
	plan->search_complete = complete && !bs->expired;
	*planp = plan;
	return 0;
}

bool baseline_rc_rejects(int rc)
{
	return rc == -AR_EINFEASIBLE || rc == -AR_ENOPROFILE;
}

int baseline_price_choosing(struct baseline_search *bs,
			    struct costmodel_plan *plan)
{
	int rc = -AR_EINFEASIBLE;

	plan->distributed_optimizer = true;
	for (int r = 0; r < COSTMODEL_NUM_RECOMPUTE && rc == -AR_EINFEASIBLE; r++) {
		plan->recompute = (enum costmodel_recompute)r;
		bs->plans_priced++;
		rc = costmodel_plan_price(bs->cm, bs->cl, plan);
	}
	return rc;
}

int baseline_node_gpus(const struct costmodel_cluster *cl)
{
	int size;

	if (cl->nnodes == 0)
		return 1;
	size = cl->nodes[0].gpus;
	for (size_t i = 1; i < cl->nnodes; i++)
		if (cl->nodes[i].gpus != size)
			return 1;
	return size;
}

int baseline_global_batch(const struct costmodel *cm)
{
	struct costmodel_plan *plan = costmodel_plan_create(cm);
	int gbs;

	if (!plan)
		return costmodel_model(cm)->global_batch;
	gbs = plan->global_batch;
	costmodel_plan_free(plan);
	return gbs;
}

void baseline_count_gpus(const struct costmodel *cm,
			 const struct costmodel_cluster *cl, int *count)
{
	memset(count, 0, sizeof(int) * COSTMODEL_MAX_GPU_TYPES);
	for (size_t i = 0; i < cl->nnodes; i++)
		if (cl->nodes[i].gpu >= 0 &&
		    cl->nodes[i].gpu < costmodel_num_gpus(cm))
			count[cl->nodes[i].gpu] += cl->nodes[i].gpus;
}

int baseline_largest_node(const struct costmodel_cluster *cl, int type)
{
	int largest = 0;

	for (size_t i = 0; i < cl->nnodes; i++)
		if (cl->nodes[i].gpu == type && cl->nodes[i].gpus > largest)
			largest = cl->nodes[i].gpus;
	return largest;
}

int baseline_mbs(int i)
{
	return 1 << i;
}

/* The profile entries layer @layer is made of: 1 or 2 (an MoE block). */
static int layer_types(const struct costmodel *cm, int layer,
		       enum costmodel_layer_type *types)
{
	int last = costmodel_num_layers(cm) - 1;

	if (layer == 0) {
		types[0] = COSTMODEL_LAYER_EMBED;
		return 1;
	}
	if (layer == last) {
		types[0] = COSTMODEL_LAYER_HEAD;
		return 1;
	}
	if (costmodel_layer_is_moe(cm, layer)) {
		types[0] = COSTMODEL_LAYER_ATTN;
		types[1] = COSTMODEL_LAYER_EXPERT;
		return 2;
	}
	types[0] = COSTMODEL_LAYER_BLOCK;
	return 1;
}

double baseline_layer_time(const struct costmodel *cm, int gpu, int tp,
			   int mbs, int layer)
{
	enum costmodel_layer_type types[2];
	int n = layer_types(cm, layer, types);
	double t = 0;

	for (int i = 0; i < n; i++) {
		const struct costmodel_layer_profile *p =
			costmodel_profile(cm, gpu, tp, mbs, types[i]);

		if (!p || !p->present)
			return -1;
		t += p->fwd_ms + p->bwd_ms + p->comm_ms;
	}
	return t / 1e3;
}

double baseline_layer_state_bytes(const struct costmodel *cm, int gpu, int tp,
				  int layer)
{
	const struct costmodel_model *m = costmodel_model(cm);
	enum costmodel_layer_type types[2];
	int n = layer_types(cm, layer, types);
	double bytes = 0;

	/* Profiles give BF16 weights (2 bytes a parameter) held per GPU. */
	for (int i = 0; i < n; i++) {
		const struct costmodel_layer_profile *p =
			costmodel_profile(cm, gpu, tp, 1, types[i]);

		if (!p || !p->present)
			return INFINITY;
		bytes += p->param_bytes / 2 * m->state_bytes_per_param;
	}
	return bytes;
}

double baseline_layer_act_bytes(const struct costmodel *cm, int gpu, int tp,
				int mbs, int layer)
{
	enum costmodel_layer_type types[2];
	int n = layer_types(cm, layer, types);
	double bytes = 0;

	for (int i = 0; i < n; i++) {
		const struct costmodel_layer_profile *p =
			costmodel_profile(cm, gpu, tp, mbs, types[i]);

		if (!p || !p->present)
			return INFINITY;
		bytes += p->act_bytes;
	}
	return bytes;
}

double baseline_range_time(const struct costmodel *cm, int gpu, int tp,
			   int mbs, int first, int last)
{
	double sum = 0;

	for (int l = first; l <= last; l++) {
		double t = baseline_layer_time(cm, gpu, tp, mbs, l);

		if (t < 0)
			return -1;
		sum += t;
	}
	return sum;
}

bool baseline_stage_fits(const struct costmodel *cm, int gpu, int tp, int mbs,
			 int first, int last, int inflight, double *headroom)
{
	const struct costmodel_gpu *g = costmodel_gpu(cm, gpu);
	double cap = g->memory_gib * GIB;
	double need = BASELINE_RUNTIME_OVERHEAD_GIB * GIB;

	for (int l = first; l <= last; l++)
		need += baseline_layer_state_bytes(cm, gpu, tp, l) +
			inflight * baseline_layer_act_bytes(cm, gpu, tp, mbs, l);
	if (headroom)
		*headroom = isfinite(need) ? (cap - need) / cap : -INFINITY;
	return need <= cap;
}

int baseline_split_even(const struct costmodel *cm, int depth, int *first,
			int *last)
{
	int n = costmodel_num_layers(cm), blocks = n - 2;
	int base = n / (depth > 0 ? depth : 1), longer = n % (depth > 0 ? depth : 1);

	if (depth < 1 || depth > COSTMODEL_MAX_DEPTH || depth > blocks)
		return ar_seterr(-AR_EINVAL, "cannot split %d blocks into %d stages",
				 blocks, depth);
	for (int s = 0; s < depth; s++) {
		first[s] = s ? last[s - 1] + 1 : 0;
		last[s] = first[s] + base + (s >= depth - longer) - 1;
	}
	return 0;
}

int baseline_split_share(const struct costmodel *cm, int depth,
			 const double *share, int *first, int *last)
{
	int nlayers = costmodel_num_layers(cm);
	int blocks = nlayers - 2;
	int count[COSTMODEL_MAX_DEPTH];
	double frac[COSTMODEL_MAX_DEPTH];
	double total = 0;
	int given = 0, at = 1;

	if (depth < 1 || depth > COSTMODEL_MAX_DEPTH || depth > blocks)
		return ar_seterr(-AR_EINVAL, "cannot split %d blocks into %d stages",
				 blocks, depth);
	for (int s = 0; s < depth; s++)
		total += share[s] > 0 ? share[s] : 0;
	if (total <= 0)
		return ar_seterr(-AR_EINVAL, "no stage has a positive share");
	/* One block each first, the rest by largest remainder. */
	for (int s = 0; s < depth; s++) {
		double want = (share[s] > 0 ? share[s] : 0) / total *
			      (blocks - depth);

		count[s] = 1 + (int)floor(want);
		frac[s] = want - floor(want);
		given += count[s];
	}
	while (given < blocks) {
		int pick = 0;

		for (int s = 1; s < depth; s++)
			if (frac[s] > frac[pick])
				pick = s;
		count[pick]++;
		frac[pick] = -1;
		given++;
	}
	for (int s = 0; s < depth; s++) {
		first[s] = at;
		last[s] = at + count[s] - 1;
		at += count[s];
	}
	first[0] = 0;
	last[depth - 1] = nlayers - 1;
	return 0;
}

void baseline_fill_opts(struct costmodel_fill_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->no_expert_tiling = true;
}

double baseline_plan_usd_per_hour(const struct costmodel *cm,
				  const struct costmodel_plan *plan)
{
	double usd = 0;

	for (int j = 0; j < plan->ntemplates; j++) {
		const struct costmodel_template *t = &plan->templates[j];

		for (int s = 0; s < t->nstages; s++)
			usd += (double)t->replicas * costmodel_stage_dp(&t->stages[s]) *
			       t->stages[s].tp *
			       costmodel_gpu(cm, t->stages[s].gpu)->price_per_hour;
	}
	return usd;
}

double baseline_node_link_Bps(const struct costmodel *cm,
			      const struct costmodel_cluster *cl, int node)
{
	return costmodel_node_network_gbps(cm, cl, node) * 1e9 / 8;
}

/* The slowest @link of the nodes of GPU type @gpu, or 0 when it has none. */
static double slowest_of_type(const struct costmodel *cm,
			      const struct costmodel_cluster *cl, int gpu,
			      double (*link)(const struct costmodel *,
					     const struct costmodel_cluster *, int))
{
	double slowest = 0;

	for (size_t n = 0; n < cl->nnodes; n++) {
		double v;

		if (cl->nodes[n].gpu != gpu)
			continue;
		v = link(cm, cl, (int)n);
		slowest = slowest > 0 ? fmin(slowest, v) : v;
	}
	return slowest;
}

double baseline_type_link_Bps(const struct costmodel *cm,
			      const struct costmodel_cluster *cl, int gpu)
{
	double gbps = slowest_of_type(cm, cl, gpu, costmodel_node_network_gbps);

	if (!(gbps > 0))
		gbps = cl->inter_node_gbps > 0 ? cl->inter_node_gbps :
		       costmodel_gpu(cm, gpu)->network_gbps;
	return gbps * 1e9 / 8;
}

double baseline_intra_Bps(const struct costmodel *cm,
			  const struct costmodel_cluster *cl, int gpu)
{
	double GBps = slowest_of_type(cm, cl, gpu, costmodel_node_intra_GBps);

	if (!(GBps > 0))
		GBps = costmodel_gpu(cm, gpu)->intra_node_GBps;
	return GBps * 1e9;
}

double baseline_ring_s(double bytes, int n, double Bps)
{
	if (n < 2 || !(Bps > 0))
		return 0;
	return 2.0 * (n - 1) / n * bytes / Bps;
}

double baseline_boundary_bytes(const struct costmodel *cm)
{
	const struct costmodel_model *m = costmodel_model(cm);

	return (double)m->seq_len * m->hidden * 2.0;
}

double baseline_range_weight_bytes(const struct costmodel *cm, int gpu,
				   int first, int last)
{
	const struct costmodel_model *m = costmodel_model(cm);
	double state = 0;

	for (int l = first; l <= last; l++) {
		double b = baseline_layer_state_bytes(cm, gpu, 1, l);

		if (!isfinite(b))
			return 0;
		state += b;
	}
	/* state bytes are weights x state_bytes_per_param / 2 */
	return state * 2.0 / m->state_bytes_per_param;
}

struct costmodel_template *baseline_template_alloc(struct costmodel_plan *plan,
						   int nstages, int replicas)
{
	struct costmodel_template *t;

	t = realloc(plan->templates, sizeof(*t) * (plan->ntemplates + 1));
	if (!t)
		return NULL;
	plan->templates = t;
	t = &plan->templates[plan->ntemplates];
	memset(t, 0, sizeof(*t));
	t->placement = calloc((size_t)replicas * nstages, sizeof(*t->placement));
	if (!t->placement)
		return NULL;
	t->nstages = nstages;
	t->replicas = replicas;
	plan->ntemplates++;
	return t;
}

void baseline_pool_restrict(struct costmodel_pool *pool,
			    const struct costmodel_cluster *cl,
			    const bool *keep)
{
	for (int i = 0; i < pool->nnodes; i++)
		if (!keep[i])
			pool->free_mask[i] = 0;
	costmodel_pool_reindex(pool, cl);
}
