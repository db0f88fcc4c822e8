/*
 * price.c - the memory check and the iteration-time model (§5.2).
 *
 * One pipeline with M micro-batches under 1F1B takes
 *	(M - 1) * max_s t_s + sum_s t_s
 * where t_s is stage s's forward + backward + collectives + p2p time for
 * one micro-batch (on micro_batch / dp samples for a stage with dp groups).  Pipelines of different speed share the global batch
 * in proportion to their speed, then every layer's gradients are
 * all-reduced across all pipelines at the slowest participating link.
 * docs/costmodel.md derives each term and says where we depart from the
 * paper.
 */
#include "config.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define AR_INTERNAL
#include "costmodel_private.h"

static int int_cmp(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

void cm_template_links(const struct costmodel *cm,
		       const struct costmodel_cluster *cl,
		       const struct costmodel_template *t,
		       struct cm_stage_links *links)
{
	int nodes_small[64], *nodes = nodes_small;
	int most = t->replicas;

	for (int s = 0; s < t->nstages; s++)
		if (t->replicas * costmodel_stage_dp(&t->stages[s]) > most)
			most = t->replicas * costmodel_stage_dp(&t->stages[s]);
	if (most > 64)
		nodes = malloc((size_t)most * sizeof(*nodes));
	for (int s = 0; s < t->nstages; s++) {
		struct cm_stage_links *l = &links[s];
		int gpu = t->stages[s].gpu, tp = t->stages[s].tp;
		int dp = costmodel_stage_dp(&t->stages[s]);
		int groups = t->replicas * dp, first = -1;
		int run = 0;

		l->intra_Bps = cm_intra_Bps(cm, gpu);
		l->net_Bps = DBL_MAX;
		l->gpus_per_node_min = INT32_MAX;
		l->dp_one_node = true;
		for (int g = 0; g < groups; g++) {
			int node = costmodel_template_group(t, g / dp, s, g % dp)->node;
			double bps = cm_node_net_Bps(cm, cl, node);

			if (bps < l->net_Bps)
				l->net_Bps = bps;
			if (first < 0)
				first = node;
			if (node != first)
				l->dp_one_node = false;
			if (nodes)
				nodes[g] = node;
		}
		/* Fewest GPUs of this stage on one of its nodes: bounds
		 * which expert groups stay inside a node. */
		if (nodes) {
			qsort(nodes, (size_t)groups, sizeof(*nodes), int_cmp);
			for (int r = 0; r < groups; r++) {
				run++;
				if (r + 1 == groups || nodes[r + 1] != nodes[r]) {
					if (run * tp < l->gpus_per_node_min)
						l->gpus_per_node_min = run * tp;
					run = 0;
				}
			}
		} else {
			l->gpus_per_node_min = tp;
		}
		if (l->dp_one_node) {
			l->dp_Bps = l->intra_Bps;
			l->dp_lat = INTRA_LATENCY_S;
		} else {
			l->dp_Bps = l->net_Bps;
			l->dp_lat = INTER_LATENCY_S;
		}
	}
	for (int s = 0; s < t->nstages; s++) {
		struct cm_stage_links *l = &links[s];
		bool same_node = true;
		int dp = costmodel_stage_dp(&t->stages[s]);

		if (s == t->nstages - 1) {
			l->p2p_Bps = 0;
			l->p2p_lat = 0;
			l->p2p_streams = 1;
			continue;
		}
		/* Each of the smaller side's groups exchanges its share. */
		l->p2p_streams = dp < costmodel_stage_dp(&t->stages[s + 1]) ?
				 dp : costmodel_stage_dp(&t->stages[s + 1]);
		for (int r = 0; r < t->replicas && same_node; r++) {
			int node = costmodel_template_group(t, r, s, 0)->node;

			for (int k = 0; k < dp && same_node; k++)
				same_node = costmodel_template_group(t, r, s, k)->node == node;
			for (int k = 0; k < costmodel_stage_dp(&t->stages[s + 1]) && same_node; k++)
				same_node = costmodel_template_group(t, r, s + 1, k)->node == node;
		}
		if (same_node) {
			l->p2p_Bps = l->intra_Bps;
			l->p2p_lat = INTRA_LATENCY_S;
		} else {
			l->p2p_Bps = fmin(l->net_Bps, links[s + 1].net_Bps);
			l->p2p_lat = INTER_LATENCY_S;
		}
	}
	if (nodes != nodes_small)
		free(nodes);
}

static double prof_time_s(const struct costmodel_layer_profile *p)
{
	return (p->fwd_ms + p->bwd_ms + p->comm_ms) * 1e-3;
}

int cm_layer_cost(const struct costmodel *cm, int gpu, int tp, int mbs,
		  enum costmodel_layer_type type, int ep, int etp,
		  const struct cm_stage_links *links,
		  struct cm_layer_cost *cost)
{
	const struct costmodel_model *m = &cm->model;
	const struct costmodel_layer_profile *p, *e;
	double state_mult = m->state_bytes_per_param / 2.0; /* per BF16 weight byte */
	double share, slots, a2a_bytes, a2a_Bps, a2a_lat;

	memset(cost, 0, sizeof(*cost));
	p = cm_prof(cm, gpu, tp, mbs, type);
	if (!p)
		return ar_seterr(-AR_ENOPROFILE, "no profile for %s tp %d micro-batch %d layer type %d",
				 cm->gpus[gpu].name, tp, mbs, type);
	cost->time_s = prof_time_s(p);
	cost->state_bytes = p->param_bytes * state_mult;
	cost->act_bytes = p->act_bytes;
	cost->grad_bytes = p->param_bytes;
	if (type != COSTMODEL_LAYER_ATTN)
		return 0;

	/*
	 * The routed experts of an MoE block on W = tp * replicas GPUs laid
	 * out as EP x ETP x EDP: every GPU computes the same share of the
	 * token slots, etp/tp of what the profile entry covers, and holds
	 * 1/ep of the experts sliced etp ways.
	 */
	e = cm_prof(cm, gpu, etp, mbs, COSTMODEL_LAYER_EXPERT);
	if (!e)
		return ar_seterr(-AR_ENOPROFILE, "no expert profile for %s etp %d micro-batch %d",
				 cm->gpus[gpu].name, etp, mbs);
	share = (double)etp / tp;
	cost->time_s += prof_time_s(e) * share;
	cost->state_bytes += e->param_bytes / ep * state_mult;
	cost->act_bytes += e->act_bytes * share;
	cost->expert_grad_bytes = e->param_bytes / ep;
	if (ep > 1) {
		/* Dispatch and combine, forward and backward. */
		slots = (double)mbs * m->seq_len * m->top_k * share;
		a2a_bytes = slots * m->hidden * 2.0 * (ep - 1) / ep;
		if (ep * etp <= links->gpus_per_node_min) {
			a2a_Bps = links->intra_Bps;
			a2a_lat = INTRA_LATENCY_S;
		} else {
			a2a_Bps = links->net_Bps;
			a2a_lat = INTER_LATENCY_S;
		}
		cost->time_s += 4.0 * (a2a_bytes / a2a_Bps + (ep - 1) * a2a_lat);
	}
	return 0;
}

/* Layers of each type in [first, last]. */
static void count_layers(const struct costmodel *cm, int first, int last,
			 int counts[COSTMODEL_NUM_LAYER_TYPES])
{
	int moe_start = cm->model.experts > 0 ? cm->model.dense_layers + 1 :
			cm->nlayers;	/* first MoE block, if any */
	int blo = first < 1 ? 1 : first;
	int bhi = last > cm->nlayers - 2 ? cm->nlayers - 2 : last;

	memset(counts, 0, sizeof(int) * COSTMODEL_NUM_LAYER_TYPES);
	counts[COSTMODEL_LAYER_EMBED] = first == 0;
	counts[COSTMODEL_LAYER_HEAD] = last == cm->nlayers - 1;
	if (bhi < blo)
		return;
	if (moe_start <= blo) {
		counts[COSTMODEL_LAYER_ATTN] = bhi - blo + 1;
	} else if (moe_start > bhi) {
		counts[COSTMODEL_LAYER_BLOCK] = bhi - blo + 1;
	} else {
		counts[COSTMODEL_LAYER_BLOCK] = moe_start - blo;
		counts[COSTMODEL_LAYER_ATTN] = bhi - moe_start + 1;
	}
}

static const enum costmodel_layer_type priced_types[] = {
	COSTMODEL_LAYER_EMBED, COSTMODEL_LAYER_BLOCK, COSTMODEL_LAYER_ATTN,
	COSTMODEL_LAYER_HEAD,
};

/*
 * A stage's time per micro-batch of @mbs samples (p2p included) and memory
 * pieces.  A stage with dp groups gives each mbs / dp of the samples.
 */
static int stage_cost(const struct costmodel *cm, const struct costmodel_stage *st,
		      int mbs, const struct cm_stage_links *links,
		      double *time_s, double *state_bytes, double *act_bytes)
{
	int counts[COSTMODEL_NUM_LAYER_TYPES];
	int sent = mbs;
	int rc;

	if (mbs % costmodel_stage_dp(st))
		return ar_seterr(-AR_EINVAL, "a stage of dp %d cannot share a micro-batch of %d",
				 st->dp, mbs);
	mbs /= costmodel_stage_dp(st);
	count_layers(cm, st->first_layer, st->last_layer, counts);
	*time_s = *state_bytes = *act_bytes = 0;
	for (size_t i = 0; i < ARRAY_SIZE(priced_types); i++) {
		enum costmodel_layer_type type = priced_types[i];
		struct cm_layer_cost c;

		if (!counts[type])
			continue;
		rc = cm_layer_cost(cm, st->gpu, st->tp, mbs, type, st->ep,
				   st->etp, links, &c);
		if (rc < 0)
			return rc;
		*time_s += counts[type] * c.time_s;
		*state_bytes += counts[type] * c.state_bytes;
		*act_bytes += counts[type] * c.act_bytes;
	}
	if (links->p2p_Bps > 0) {
		/* Activations forward, their gradients backward. */
		double bytes = (double)sent / links->p2p_streams *
			       cm->model.seq_len * cm->model.hidden * 2.0;

		*time_s += 2.0 * (bytes / links->p2p_Bps + links->p2p_lat);
	}
	return 0;
}

int cm_stage_memory(const struct costmodel *cm, const struct costmodel_stage *st,
		    int mbs, int inflight, const struct cm_stage_links *links,
		    double *bytes)
{
	double t, state, act;
	int rc = stage_cost(cm, st, mbs, links, &t, &state, &act);

	if (rc < 0)
		return rc;
	*bytes = state + inflight * act + cm->overhead_bytes;
	return 0;
}

/*
 * Give each template a micro-batch count per replica so that together
 * they cover the global batch and finish as close together as possible:
 * the continuous optimum first, then one micro-batch at a time to the
 * template that finishes earliest with it.
 */
static void split_batch(struct costmodel_plan *plan, const double *tmax,
			const double *tsum)
{
	int n = plan->ntemplates;
	long need = (plan->global_batch + plan->micro_batch - 1) / plan->micro_batch;
	double rate = 0, fixed = 0, T;
	long have = 0;

	for (int j = 0; j < n; j++) {
		const struct costmodel_template *t = &plan->templates[j];

		rate += t->replicas / tmax[j];
		fixed += t->replicas * (1.0 - tsum[j] / tmax[j]);
	}
	/* sum_j r_j * ((T - tsum_j) / tmax_j + 1) = need */
	T = (need - fixed) / rate;
	for (int j = 0; j < n; j++) {
		struct costmodel_template *t = &plan->templates[j];
		double m = floor((T - tsum[j]) / tmax[j] + 1.0 + 1e-9);

		t->micro_batches = m < 1 ? 1 : (int)fmin(m, 1 << 30);
		have += (long)t->replicas * t->micro_batches;
	}
	while (have < need) {
		int best = 0;
		double best_T = DBL_MAX;

		for (int j = 0; j < n; j++) {
			/* (M + 1 - 1) * tmax + tsum */
			double Tj = plan->templates[j].micro_batches * tmax[j] +
				    tsum[j];

			if (Tj < best_T) {
				best_T = Tj;
				best = j;
			}
		}
		plan->templates[best].micro_batches++;
		have += plan->templates[best].replicas;
	}
}

int costmodel_plan_price(const struct costmodel *cm,
			 const struct costmodel_cluster *cl,
			 struct costmodel_plan *plan)
{
	struct cm_stage_links links_small[8 * COSTMODEL_MAX_DEPTH], *links = links_small;
	double tmax_small[8], tsum_small[8], *tmax = tmax_small, *tsum = tsum_small;
	double *gsync = NULL;
	double pipeline_s = 0, sync_s = 0;
	int n = plan->ntemplates, L = cm->nlayers, mbs = plan->micro_batch;
	int rc = 0;
	bool distribute = false;

	if (n < 1)
		return ar_seterr(-AR_EINVAL, "plan has no templates");
	if (n > 8) {
		links = malloc((size_t)n * COSTMODEL_MAX_DEPTH * sizeof(*links));
		tmax = malloc((size_t)n * sizeof(*tmax));
		tsum = malloc((size_t)n * sizeof(*tsum));
	}
	gsync = calloc((size_t)L * 2, sizeof(*gsync)); /* dense, expert */
	if (!links || !tmax || !tsum || !gsync) {
		rc = -ENOMEM;
		goto out;
	}

	/* Per-stage time for one micro-batch. */
	for (int j = 0; j < n; j++) {
		struct costmodel_template *t = &plan->templates[j];
		struct cm_stage_links *lk = &links[j * COSTMODEL_MAX_DEPTH];

		cm_template_links(cm, cl, t, lk);
		tmax[j] = tsum[j] = 0;
		for (int s = 0; s < t->nstages; s++) {
			double state, act;

			rc = stage_cost(cm, &t->stages[s], mbs, &lk[s],
					&t->stages[s].time_s, &state, &act);
			if (rc < 0)
				goto out;
			tmax[j] = fmax(tmax[j], t->stages[s].time_s);
			tsum[j] += t->stages[s].time_s;
		}
		if (t->micro_batches == 0)
			distribute = true;
	}
	if (distribute) {
		split_batch(plan, tmax, tsum);
	} else {
		long have = 0;

		for (int j = 0; j < n; j++)
			have += (long)plan->templates[j].replicas *
				plan->templates[j].micro_batches;
		if (have * mbs < plan->global_batch) {
			rc = ar_seterr(-AR_EINVAL, "plan covers %ld samples of the global batch of %d",
				       have * mbs, plan->global_batch);
			goto out;
		}
	}

	/* The memory check, now that the in-flight counts are known. */
	for (int j = 0; j < n; j++) {
		struct costmodel_template *t = &plan->templates[j];
		struct cm_stage_links *lk = &links[j * COSTMODEL_MAX_DEPTH];

		for (int s = 0; s < t->nstages; s++) {
			struct costmodel_stage *st = &t->stages[s];
			int inflight = t->nstages - s;
			double bytes, cap = cm->gpus[st->gpu].memory_gib * GIB;

			if (inflight > t->micro_batches)
				inflight = t->micro_batches;
			rc = cm_stage_memory(cm, st, mbs, inflight, &lk[s], &bytes);
			if (rc < 0)
				goto out;
			st->peak_mem_gib = bytes / GIB;
			if (bytes > cap) {
				rc = ar_seterr(-AR_EINFEASIBLE, "template %d stage %d (%s, tp %d, layers %d-%d, micro-batch %d) needs %.1f GiB of %.0f GiB",
					       j, s, cm->gpus[st->gpu].name, st->tp,
					       st->first_layer, st->last_layer, mbs,
					       bytes / GIB, cm->gpus[st->gpu].memory_gib);
				goto out;
			}
		}
		pipeline_s = fmax(pipeline_s,
				  (t->micro_batches - 1) * tmax[j] + tsum[j]);
	}

	/*
	 * Gradient synchronization: every layer is all-reduced over all the
	 * TP groups that hold it, one a pipeline or dp of them in a stage
	 * with data parallelism of its own (experts over their EDP ranks in
	 * every template); the slowest holder sets the time of each layer's
	 * collective.
	 */
	int edp_total_small[256], holders_small[256];
	int *edp_total = edp_total_small, *holders = holders_small;

	if (L > 256) {
		edp_total = calloc((size_t)L, sizeof(*edp_total));
		holders = calloc((size_t)L, sizeof(*holders));
	} else {
		memset(edp_total_small, 0, sizeof(edp_total_small));
		memset(holders_small, 0, sizeof(holders_small));
	}
	if (!edp_total || !holders) {
		rc = -ENOMEM;
		goto out_sync;
	}
	for (int j = 0; j < n; j++) {
		struct costmodel_template *t = &plan->templates[j];

		for (int s = 0; s < t->nstages; s++) {
			for (int l = t->stages[s].first_layer; l <= t->stages[s].last_layer; l++) {
				edp_total[l] += t->stages[s].edp;
				holders[l] += t->replicas *
					      costmodel_stage_dp(&t->stages[s]);
			}
		}
	}
	for (int j = 0; j < n; j++) {
		struct costmodel_template *t = &plan->templates[j];
		struct cm_stage_links *lk = &links[j * COSTMODEL_MAX_DEPTH];

		for (int s = 0; s < t->nstages; s++) {
			struct costmodel_stage *st = &t->stages[s];
			int counts[COSTMODEL_NUM_LAYER_TYPES];
			double grad_bytes[COSTMODEL_NUM_LAYER_TYPES] = { 0 };
			double exp_grad_bytes = 0;
			/* Another template's replicas sit on other nodes. */
			double dp_Bps = n > 1 ? lk[s].net_Bps : lk[s].dp_Bps;
			double dp_lat = n > 1 ? INTER_LATENCY_S : lk[s].dp_lat;

			count_layers(cm, st->first_layer, st->last_layer, counts);
			for (size_t i = 0; i < ARRAY_SIZE(priced_types); i++) {
				enum costmodel_layer_type type = priced_types[i];
				struct cm_layer_cost c;

				if (!counts[type])
					continue;
				cm_layer_cost(cm, st->gpu, st->tp,
					      mbs / costmodel_stage_dp(st), type,
					      st->ep, st->etp, &lk[s], &c);
				grad_bytes[type] = c.grad_bytes;
				if (type == COSTMODEL_LAYER_ATTN)
					exp_grad_bytes = c.expert_grad_bytes;
			}
			for (int l = st->first_layer; l <= st->last_layer; l++) {
				enum costmodel_layer_type type = cm_layer_type(cm, l);

				gsync[2 * l] = fmax(gsync[2 * l],
					cm_ring_allreduce_s(grad_bytes[type], holders[l],
							    dp_Bps, dp_lat));
				if (type == COSTMODEL_LAYER_ATTN)
					gsync[2 * l + 1] = fmax(gsync[2 * l + 1],
						cm_ring_allreduce_s(exp_grad_bytes,
								    edp_total[l],
								    dp_Bps, dp_lat));
			}
		}
	}
out_sync:
	if (edp_total != edp_total_small)
		free(edp_total);
	if (holders != holders_small)
		free(holders);
	if (rc < 0)
		goto out;
	for (int j = 0; j < n; j++) {
		struct costmodel_template *t = &plan->templates[j];

		for (int s = 0; s < t->nstages; s++) {
			struct costmodel_stage *st = &t->stages[s];

			st->sync_s = 0;
			for (int l = st->first_layer; l <= st->last_layer; l++)
				st->sync_s += gsync[2 * l] + gsync[2 * l + 1];
			sync_s = fmax(sync_s, st->sync_s);
		}
	}

	/* Every input is range-checked; this holds the promise for outputs. */
	if (!isfinite(pipeline_s + sync_s) || pipeline_s + sync_s <= 0) {
		rc = ar_seterr(-AR_EINVAL, "plan: the predicted iteration time (%g s) is not a positive number",
			       pipeline_s + sync_s);
		goto out;
	}
	plan->predicted.pipeline_s = pipeline_s;
	plan->predicted.sync_s = sync_s;
	plan->predicted.iter_s = pipeline_s + sync_s;
	plan->predicted.iters_per_s = 1.0 / plan->predicted.iter_s;
	plan->predicted.samples_per_s = plan->global_batch / plan->predicted.iter_s;
	plan->predicted.usd_per_hour = 0;
	for (int j = 0; j < n; j++) {
		const struct costmodel_template *t = &plan->templates[j];

		for (int s = 0; s < t->nstages; s++)
			plan->predicted.usd_per_hour += (double)t->replicas *
				costmodel_stage_dp(&t->stages[s]) * t->stages[s].tp *
				cm->gpus[t->stages[s].gpu].price_per_hour;
	}
	plan->predicted.usd_per_sample = plan->predicted.usd_per_hour / 3600.0 /
					 plan->predicted.samples_per_s;
out:
	free(gsync);
	if (links != links_small)
		free(links);
	if (tmax != tmax_small)
		free(tmax);
	if (tsum != tsum_small)
		free(tsum);
	return rc;
}
