/*
 * hexiscale.c - the HexiScale baseline (Yan et al., 2024; its public code
 * is FlashFlex, which Sailor's repository also ports), as the Arachne
 * paper's §3.1 describes it: first partition the GPUs into disjoint
 * data-parallel pipelines by graph partitioning, then search TP and PP
 * inside each pipeline on its own GPUs only.  Pipelines may differ in
 * depth, GPU types and TP.
 *
 * The partition (HexiScale's two steps).  The GPUs form a graph whose
 * edges weigh the bandwidth between two GPUs.  Step 1 cuts it into the
 * pipelines with the weights reversed, balancing compute: cutting the
 * fast intra-node links is then cheap and cutting the slow network dear,
 * so a node's GPUs are dealt out to different pipelines and every
 * pipeline crosses nodes, while a stage's replicas in the other pipelines
 * sit in the same node and synchronize over its links.  Step 2 cuts each
 * pipeline into stages with the weights as they are, so a stage never
 * leaves a node: a pipeline's stages are its GPUs of each node, each cut
 * into TP groups of one degree.  Without a graph partitioner at hand the
 * two cuts are made greedily: step 1 deals each node's GPUs, node by node
 * from the most compute down, to the least loaded pipelines that hold no
 * GPU of that node yet (a minimum cut of the reversed graph under the
 * balance constraint); step 2 is exact (whole nodes).
 *
 * The pipeline count is searched as published, from 1 to a fifth of the
 * GPUs (HexiScale's experimental/main.py); each pipeline takes the same
 * share of the batch in micro-batches of one sample.
 *
 * Published steering: each pipeline's TP degrees and the pipeline count
 * are chosen by HexiScale's own cost model (its TimeCost: analytic FLOPs
 * at the GPUs' peak, TP and PP transfers, bubbles, the all-reduce of
 * every layer over the pipelines), layers are dealt in proportion to each
 * stage's memory (its create_layer_partition()) and checked with its
 * memory model; only the chosen plan is priced.  Shared steering: the
 * cost model's fill splits the layers, chooses the micro-batch and shares
 * the batch by speed, and the fastest priced plan wins.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ar.h"
#include "baseline.h"

/* HexiScale's largest pipeline count: its GPUs over five. */
#define HEXI_GPUS_PER_PIPELINE	5

/* One pipeline's GPUs on one node: a stage, or several of one TP degree. */
struct hexi_chunk {
	int node;
	int ngpus;
	uint8_t gpu[COSTMODEL_MAX_NODE_GPUS];
	int tp;				/* the degree chosen for it */
};

struct hexi_pipe {
	struct hexi_chunk *chunks;
	int nchunks;
	double load;			/* peak TFLOPS dealt to it */
};

struct hexiscale {
	struct baseline_search bs;
	size_t *order;			/* nodes, most compute first */
	struct hexi_pipe *pipes;
	int npipes;
	struct hexi_chunk *chunk_store;	/* every pipe's chunks, one block */
};

static double hexi_node_tflops(const struct hexiscale *h, size_t node)
{
	const struct costmodel_node *n = &h->bs.cl->nodes[node];

	return n->gpus * costmodel_gpu(h->bs.cm, n->gpu)->peak_tflops;
}

static int hexi_cmp_order(const void *a, const void *b, void *arg)
{
	const struct hexiscale *h = arg;
	double x = hexi_node_tflops(h, *(const size_t *)a);
	double y = hexi_node_tflops(h, *(const size_t *)b);

	if (x != y)
		return x < y ? 1 : -1;
	return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

/*
 * hexi_partition() - step 1 for @npipes pipelines: each node's GPUs go,
 * one at a time, to the least loaded pipeline without a GPU of that node
 * yet (any pipeline once all have one), so each GPU's fast links are the
 * ones cut; the chunks a pipeline gets are its stages' nodes (step 2).
 */
static void hexi_partition(struct hexiscale *h, int npipes)
{
	const struct costmodel_cluster *cl = h->bs.cl;
	struct hexi_chunk *next = h->chunk_store;

	h->npipes = npipes;
	for (int p = 0; p < npipes; p++) {
		h->pipes[p].nchunks = 0;
		h->pipes[p].load = 0;
	}
	/* a pipeline holds at most one chunk a node: room for nnodes each */
	for (int p = 0; p < npipes; p++)
		h->pipes[p].chunks = next + (size_t)p * cl->nnodes;
	for (size_t i = 0; i < cl->nnodes; i++) {
		size_t node = h->order[i];
		double tflops = costmodel_gpu(h->bs.cm, cl->nodes[node].gpu)->peak_tflops;

		for (int g = 0; g < cl->nodes[node].gpus; g++) {
			int best = -1;
			bool fresh_best = false;

			for (int p = 0; p < npipes; p++) {
				struct hexi_pipe *q = &h->pipes[p];
				bool fresh = !q->nchunks ||
					     q->chunks[q->nchunks - 1].node != (int)node;

				if (best < 0 || (fresh && !fresh_best) ||
				    (fresh == fresh_best && q->load < h->pipes[best].load)) {
					best = p;
					fresh_best = fresh;
				}
			}
			struct hexi_pipe *q = &h->pipes[best];

			if (fresh_best) {
				struct hexi_chunk *c = &q->chunks[q->nchunks++];

				c->node = (int)node;
				c->ngpus = 0;
				c->tp = 1;
			}
			q->chunks[q->nchunks - 1].gpu[q->chunks[q->nchunks - 1].ngpus++] =
				(uint8_t)g;
			q->load += tflops;
		}
	}
}

/* Stages of pipeline @q at its chunks' TP degrees; 0 when any does not divide. */
static int hexi_depth(const struct hexi_pipe *q)
{
	int d = 0;

	for (int c = 0; c < q->nchunks; c++) {
		if (q->chunks[c].ngpus % q->chunks[c].tp)
			return 0;
		d += q->chunks[c].ngpus / q->chunks[c].tp;
	}
	return d;
}

/*
 * hexi_template() - append pipeline @q as a template of one replica, its
 * stages placed on its own GPUs, layers dealt by each stage's memory
 * (HexiScale's quota; the fill splits again under the shared steering).
 */
static int hexi_template(struct hexiscale *h, const struct hexi_pipe *q,
			 struct costmodel_plan *plan)
{
	const struct costmodel *cm = h->bs.cm;
	const struct costmodel_cluster *cl = h->bs.cl;
	int d = hexi_depth(q), s = 0;
	double share[COSTMODEL_MAX_DEPTH];
	int first[COSTMODEL_MAX_DEPTH], last[COSTMODEL_MAX_DEPTH];
	struct costmodel_template *t;

	if (d < 1 || d > COSTMODEL_MAX_DEPTH || d > costmodel_model(cm)->blocks)
		return -AR_EINFEASIBLE;
	t = baseline_template_alloc(plan, d, 1);
	if (!t)
		return -ENOMEM;
	for (int c = 0; c < q->nchunks; c++) {
		const struct hexi_chunk *k = &q->chunks[c];
		int gpu = cl->nodes[k->node].gpu;

		for (int i = 0; i < k->ngpus / k->tp; i++, s++) {
			struct costmodel_group *g = costmodel_template_group(t, 0, s, 0);

			t->stages[s].gpu = gpu;
			t->stages[s].tp = k->tp;
			t->stages[s].ep = 1;
			t->stages[s].etp = k->tp;
			t->stages[s].edp = 1;
			g->node = k->node;
			memcpy(g->gpu, &k->gpu[i * k->tp], (size_t)k->tp);
			share[s] = k->tp * costmodel_gpu(cm, gpu)->memory_gib;
		}
	}
	if (baseline_split_share(cm, d, share, first, last) < 0)
		return -AR_EINFEASIBLE;
	for (s = 0; s < d; s++) {
		t->stages[s].first_layer = first[s];
		t->stages[s].last_layer = last[s];
	}
	return 0;
}

/* ---------------------------------------------------------------------
 * HexiScale's cost and memory models (its TimeCost and MemoryCost).
 * ------------------------------------------------------------------- */

/* Seconds of one layer's forward and backward for one sample on @tp GPUs of @gpu. */
static double hexi_layer_comp(const struct hexiscale *h, int gpu, int tp)
{
	const struct costmodel_model *m = costmodel_model(h->bs.cm);
	double H = m->hidden, S = m->seq_len, V = m->vocab, L = m->blocks;
	double flops = 72.0 * S * H * H * (1 + S / (6 * H) + V / (16 * L * H));

	return flops / (costmodel_gpu(h->bs.cm, gpu)->peak_tflops * 1e12 * tp);
}

/* Its MemoryCost: 8 bytes a weight, one micro-batch of activations. */
static bool hexi_stage_fits(const struct hexiscale *h,
			    const struct costmodel_stage *st)
{
	const struct costmodel_model *m = costmodel_model(h->bs.cm);
	double sh = (double)m->seq_len * m->hidden * 2.0;
	double w = baseline_range_weight_bytes(h->bs.cm, st->gpu, st->first_layer,
					       st->last_layer) / st->tp;
	double need = w * 4 + ((st->last_layer - st->first_layer + 1) * sh / st->tp +
			       2 * sh);

	return w > 0 && need <= costmodel_gpu(h->bs.cm, st->gpu)->memory_gib *
				1073741824.0;
}

/* Pipeline @t's time for @micro_batches micro-batches of one sample. */
static double hexi_pipe_time(const struct hexiscale *h,
			     const struct costmodel_template *t, int micro_batches)
{
	const struct costmodel *cm = h->bs.cm;
	double sh = baseline_boundary_bytes(cm), worst = 0, sum = 0;

	for (int s = 0; s < t->nstages; s++) {
		const struct costmodel_stage *st = &t->stages[s];
		int layers = st->last_layer - st->first_layer + 1;
		double intra = baseline_intra_Bps(cm, h->bs.cl, st->gpu);
		double x = layers * (hexi_layer_comp(h, st->gpu, st->tp) +
				     8 * sh * (st->tp - 1) / (st->tp * intra));

		if (s + 1 < t->nstages) {
			int a = costmodel_template_group(t, 0, s, 0)->node;
			int b = costmodel_template_group(t, 0, s + 1, 0)->node;

			x += 2 * sh / (a == b ? intra :
				       fmin(baseline_node_link_Bps(cm, h->bs.cl, a),
					    baseline_node_link_Bps(cm, h->bs.cl, b)));
		}
		worst = fmax(worst, x);
		sum += x;
	}
	return (micro_batches - 1) * worst + sum;
}

/*
 * hexi_estimate() - HexiScale's overall cost of @plan: the slowest
 * pipeline, plus every layer's all-reduce over the pipelines holding it,
 * inside a node when all its holders share one, at the network otherwise.
 */
static double hexi_estimate(const struct hexiscale *h,
			    const struct costmodel_plan *plan)
{
	const struct costmodel *cm = h->bs.cm;
	double pipe = 0, dp = 0;
	int n = plan->ntemplates;

	for (int j = 0; j < n; j++) {
		const struct costmodel_template *t = &plan->templates[j];

		for (int s = 0; s < t->nstages; s++)
			if (!hexi_stage_fits(h, &t->stages[s]))
				return INFINITY;
		pipe = fmax(pipe, hexi_pipe_time(h, t, t->micro_batches));
	}
	for (int l = 0; l < costmodel_num_layers(cm) && n > 1; l++) {
		int node = -1, tp = COSTMODEL_MAX_TP, gpu = 0;
		bool one = true;
		double Bps = INFINITY;

		for (int j = 0; j < n; j++) {
			const struct costmodel_template *t = &plan->templates[j];

			for (int s = 0; s < t->nstages; s++) {
				int at = costmodel_template_group(t, 0, s, 0)->node;

				if (l < t->stages[s].first_layer || l > t->stages[s].last_layer)
					continue;
				one = one && (node < 0 || at == node);
				node = at;
				gpu = t->stages[s].gpu;
				tp = t->stages[s].tp < tp ? t->stages[s].tp : tp;
				Bps = fmin(Bps, baseline_node_link_Bps(cm, h->bs.cl, at));
			}
		}
		if (one)
			Bps = baseline_intra_Bps(cm, h->bs.cl, gpu);
		dp += baseline_ring_s(baseline_range_weight_bytes(cm, gpu, l, l) / tp,
				      n, Bps);
	}
	return pipe + dp;
}

/* ---------------------------------------------------------------------
 * The search.
 * ------------------------------------------------------------------- */

/* A plan alone of pipeline @q at its chunks' degrees; NULL when none. */
static int hexi_alone(struct hexiscale *h, const struct hexi_pipe *q,
		      struct costmodel_plan **planp)
{
	struct costmodel_plan *plan = costmodel_plan_create(h->bs.cm);
	int rc;

	*planp = NULL;
	if (!plan)
		return -ENOMEM;
	rc = hexi_template(h, q, plan);
	if (rc < 0) {
		costmodel_plan_free(plan);
		return rc;
	}
	*planp = plan;
	return 0;
}

/* The cost of pipeline @q at its chunks' degrees by the steering's model. */
static int hexi_pipe_cost(struct hexiscale *h, const struct hexi_pipe *q,
			  int micro_batches, double *cost)
{
	struct costmodel_plan *plan;
	int rc;

	*cost = INFINITY;
	rc = hexi_alone(h, q, &plan);
	if (rc < 0)
		return rc == -ENOMEM ? rc : 0;
	h->bs.states++;
	if (baseline_published(&h->bs)) {
		*cost = hexi_pipe_time(h, &plan->templates[0], micro_batches);
		for (int s = 0; s < plan->templates[0].nstages; s++)
			if (!hexi_stage_fits(h, &plan->templates[0].stages[s]))
				*cost = INFINITY;
	} else {
		struct costmodel_fill_opts opts;

		baseline_fill_opts(&opts);
		h->bs.plans_priced++;
		rc = costmodel_plan_refill(h->bs.cm, h->bs.cl, plan, &opts);
		if (rc == 0)
			*cost = 1 / plan->predicted.samples_per_s;
		else if (baseline_rc_rejects(rc))
			rc = 0;
	}
	costmodel_plan_free(plan);
	return rc;
}

/*
 * hexi_pipe_search() - TP and PP inside pipeline @q on its own GPUs, as
 * HexiScale's tp_pp_tradeoff() does it: machine by machine, the degree (a
 * power of two dividing its GPUs there) that makes the pipeline cheapest
 * with the other machines as chosen so far.  Leaves the chosen degrees in
 * the chunks; *@found false when no choice fits.
 */
static int hexi_pipe_search(struct hexiscale *h, struct hexi_pipe *q,
			    int micro_batches, bool *found)
{
	double best = INFINITY;
	int rc;

	*found = false;
	for (int c = 0; c < q->nchunks; c++) {
		struct hexi_chunk *k = &q->chunks[c];

		/* start deep enough for the stage count to fit */
		k->tp = 1;
		while (k->tp * 2 <= COSTMODEL_MAX_TP && k->tp * 2 <= k->ngpus &&
		       !(k->ngpus % (k->tp * 2)) && q->nchunks * k->ngpus / k->tp >
						     COSTMODEL_MAX_DEPTH)
			k->tp *= 2;
	}
	for (int c = 0; c < q->nchunks; c++) {
		struct hexi_chunk *k = &q->chunks[c];
		int keep = k->tp;

		for (int tp = 1; tp <= COSTMODEL_MAX_TP && tp <= k->ngpus; tp *= 2) {
			double cost;

			if (k->ngpus % tp)
				continue;
			if (baseline_search_expired(&h->bs))
				return 0;
			k->tp = tp;
			rc = hexi_pipe_cost(h, q, micro_batches, &cost);
			if (rc < 0)
				return rc;
			if (cost < best) {
				best = cost;
				keep = tp;
				*found = true;
			}
		}
		k->tp = keep;
	}
	return 0;
}

/*
 * hexi_pipelines() - the plan of @npipes pipelines, each searched on its
 * own GPUs, offered under the steering: estimated as a whole by
 * HexiScale's model, or refilled and priced.
 */
static int hexi_pipelines(struct hexiscale *h, int npipes)
{
	int gbs = baseline_global_batch(h->bs.cm);
	int share = gbs / npipes;
	struct costmodel_plan *plan;
	int rc = 0;

	if (share < 1)
		return 0;
	hexi_partition(h, npipes);
	plan = costmodel_plan_create(h->bs.cm);
	if (!plan)
		return -ENOMEM;
	plan->micro_batch = 1;
	for (int p = 0; p < npipes; p++) {
		bool found;

		rc = hexi_pipe_search(h, &h->pipes[p], share, &found);
		if (rc < 0 || h->bs.expired)
			goto out;	/* a partial plan is not HexiScale's */
		if (!found)
			continue;	/* the model fits nowhere in it: idle */
		rc = hexi_template(h, &h->pipes[p], plan);
		if (rc == -ENOMEM)
			goto out;
		if (rc == 0)
			plan->templates[plan->ntemplates - 1].micro_batches = share;
		rc = 0;
	}
	if (!plan->ntemplates)
		goto out;
	if (baseline_published(&h->bs)) {
		/* every pipeline takes an equal share, micro-batches of one */
		long have = (long)share * plan->ntemplates;

		for (int j = 0; have < gbs; j = (j + 1) % plan->ntemplates, have++)
			plan->templates[j].micro_batches++;
		rc = baseline_search_offer_estimate(&h->bs, plan,
						    hexi_estimate(h, plan));
	} else {
		struct costmodel_fill_opts opts;

		baseline_fill_opts(&opts);
		h->bs.plans_priced++;
		rc = costmodel_plan_refill(h->bs.cm, h->bs.cl, plan, &opts);
		if (rc == 0)
			rc = baseline_search_offer(&h->bs, plan);
		else if (baseline_rc_rejects(rc))
			rc = 0;
	}
out:
	costmodel_plan_free(plan);
	return rc;
}

int planner_hexiscale(const struct policy_request *req,
		      struct costmodel_plan **planp)
{
	struct hexiscale h = { 0 };
	size_t n = req->cl ? req->cl->nnodes : 0;
	int rc, most;

	*planp = NULL;
	rc = baseline_search_init(&h.bs, req, "hexiscale");
	if (rc < 0)
		return rc;
	most = costmodel_cluster_total_gpus(req->cl) / HEXI_GPUS_PER_PIPELINE;
	if (most < 1)
		most = 1;
	h.order = calloc(n + 1, sizeof(*h.order));
	h.pipes = calloc((size_t)most, sizeof(*h.pipes));
	h.chunk_store = calloc((size_t)most * (n + 1), sizeof(*h.chunk_store));
	if (!h.order || !h.pipes || !h.chunk_store) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		h.order[i] = i;
	qsort_r(h.order, n, sizeof(*h.order), hexi_cmp_order, &h);
	for (int k = 1; k <= most; k++) {
		if (baseline_search_expired(&h.bs))
			break;
		rc = hexi_pipelines(&h, k);
		if (rc < 0)
			goto out;
	}
	rc = baseline_search_finish(&h.bs, true, planp);
out:
	free(h.order);
	free(h.pipes);
	free(h.chunk_store);
	baseline_search_fini(&h.bs);
	return rc;
}
