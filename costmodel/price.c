/*
 * price.c - the memory check and the iteration-time model (§5.2).
 *
 * One pipeline with M micro-batches under 1F1B takes
 *	(M - 1) * max_s t_s + sum_s t_s
 * where t_s is stage s's forward + backward (+ recomputation) +
 * collectives + p2p time for one micro-batch (on micro_batch / dp samples
 * for a stage with dp groups of its own).  Pipelines of different
 * speed share the global batch in proportion to their speed.  Every
 * layer's gradients are then reduced over all its replicas, in buckets,
 * hierarchically where replicas share nodes, at the slowest link each
 * step crosses, under the backward of the last micro-batches as far as
 * 1F1B leaves room; the optimizer steps; the distributed optimizer
 * gathers the parameters back under the next forward.
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

/* Nodes a scratch count array covers on the stack; larger clusters allocate. */
#define LINKS_STACK_NODES 4096

void cm_template_links(const struct costmodel *cm,
		       const struct costmodel_cluster *cl,
		       const struct costmodel_template *t,
		       struct cm_stage_links *links)
{
	/* groups per node of the stage at hand, and the nodes seen */
	uint16_t count_small[LINKS_STACK_NODES], *count = count_small;
	int seen_small[64], *seen = seen_small;
	int slots = costmodel_template_slots(t), most = 0, off = 0;
	size_t nnodes = cl->nnodes;
	const struct costmodel_node *last = NULL;	/* links computed for */
	double net = 0, intra = 0;

	for (int s = 0; s < t->nstages; s++)
		if (t->replicas * costmodel_stage_dp(&t->stages[s]) > most)
			most = t->replicas * costmodel_stage_dp(&t->stages[s]);
	if (most > 64)
		seen = malloc((size_t)most * sizeof(*seen));
	if (nnodes > LINKS_STACK_NODES)
		count = calloc(nnodes, sizeof(*count));
	else
		memset(count_small, 0, nnodes * sizeof(*count));
	for (int s = 0; s < t->nstages; s++) {
		struct cm_stage_links *l = &links[s];
		int tp = t->stages[s].tp, dp = costmodel_stage_dp(&t->stages[s]);
		double profile_intra = cm->gpus[t->stages[s].gpu].intra_node_GBps *
				       1e9 * LINK_EFFICIENCY;

		l->intra_Bps = DBL_MAX;
		l->net_Bps = DBL_MAX;
		l->nodes = 0;
		l->local_min = INT32_MAX;
		if (!seen || !count) {
			/* Out of memory for the scratch: assume a group a node. */
			l->nodes = t->replicas * dp;
			l->local_min = 1;
		}
		for (int r = 0; r < t->replicas; r++) {
			const struct costmodel_group *g = &t->placement[(size_t)r * slots + off];

			for (int k = 0; k < dp; k++) {
				int node = g[k].node;

				const struct costmodel_node *n = &cl->nodes[node];

				if (seen && count && count[node]++)
					continue;
				/* A node first seen: its links, unless it is built
				 * like the last one (nodes of a group are). */
				if (!last || n->gpu != last->gpu || n->gpus != last->gpus ||
				    n->nics != last->nics || n->nic_gbps != last->nic_gbps ||
				    n->intra_node_GBps != last->intra_node_GBps) {
					last = n;
					net = cm_node_net_Bps(cm, cl, node);
					intra = cm_intra_Bps(cm, cl, node);
				}
				if (net < l->net_Bps)
					l->net_Bps = net;
				if (intra < l->intra_Bps)
					l->intra_Bps = intra;
				if (seen && count)
					seen[l->nodes++] = node;
			}
		}
		/* TP groups per node: how the stage's DP group spreads. */
		for (int i = 0; seen && count && i < l->nodes; i++) {
			if (count[seen[i]] < l->local_min)
				l->local_min = count[seen[i]];
			count[seen[i]] = 0;
		}
		l->gpus_per_node_min = l->local_min * tp;
		l->intra_step_s = cm_intra_step_s(l->intra_Bps / 1e9 / LINK_EFFICIENCY);
		/* The profiles' TP collectives ran on the GPU profile's link. */
		l->tp_comm_scale = profile_intra / l->intra_Bps;
		off += dp;
	}
	off = 0;
	for (int s = 0; s < t->nstages; s++) {
		struct cm_stage_links *l = &links[s];
		int dp = costmodel_stage_dp(&t->stages[s]), next_dp;
		bool same_node = true;

		if (s == t->nstages - 1) {
			l->p2p_Bps = 0;
			l->p2p_lat = 0;
			l->p2p_streams = 1;
			l->p2p_shards = 1;
			continue;
		}
		/*
		 * Sequence parallelism leaves each GPU of a TP group 1/tp of
		 * the activation along the sequence; each sends its part
		 * (Megatron's scatter/gather between stages did the same).
		 */
		l->p2p_shards = t->stages[s].tp < t->stages[s + 1].tp ?
				t->stages[s].tp : t->stages[s + 1].tp;
		/* Each of the smaller side's groups exchanges its share. */
		next_dp = costmodel_stage_dp(&t->stages[s + 1]);
		l->p2p_streams = dp < next_dp ? dp : next_dp;
		for (int r = 0; r < t->replicas && same_node; r++) {
			const struct costmodel_group *g = &t->placement[(size_t)r * slots + off];

			/* this stage's dp groups, then the next stage's */
			for (int k = 1; k < dp + next_dp && same_node; k++)
				same_node = g[k].node == g[0].node;
		}
		if (same_node) {
			l->p2p_Bps = l->intra_Bps;
			l->p2p_lat = NCCL_BASE_LAT_S + l->intra_step_s;
		} else {
			l->p2p_Bps = fmin(l->net_Bps, links[s + 1].net_Bps);
			l->p2p_lat = NCCL_BASE_LAT_S + NCCL_NET_STEP_S;
		}
		off += dp;
	}
	if (seen != seen_small)
		free(seen);
	if (count != count_small)
		free(count);
}

static double prof_time_s(const struct costmodel_layer_profile *p,
			  enum costmodel_recompute rc, double comm_scale)
{
	return (p->fwd_ms + p->bwd_ms + p->comm_ms * comm_scale +
		p->recompute_ms[rc]) * 1e-3;
}

static double prof_fwd_s(const struct costmodel_layer_profile *p,
			 double comm_scale)
{
	double comm = p->fwd_comm_ms >= 0 ? p->fwd_comm_ms : p->comm_ms / 2;

	return (p->fwd_ms + comm * comm_scale) * 1e-3;
}

static const char *const recompute_key[COSTMODEL_NUM_RECOMPUTE] = {
	[COSTMODEL_RECOMPUTE_SELECTIVE] = "recompute_selective_ms and act_bytes_selective",
	[COSTMODEL_RECOMPUTE_FULL] = "recompute_full_ms and act_bytes_full",
};

/* @p has what recomputation @rc needs. */
static bool prof_recompute_ok(const struct costmodel_layer_profile *p,
			      enum costmodel_recompute rc)
{
	return p->recompute_ms[rc] >= 0 && p->recompute_act_bytes[rc] >= 0;
}

int cm_layer_cost(const struct costmodel *cm, int gpu, int tp, int mbs,
		  enum costmodel_layer_type type, int ep, int etp,
		  enum costmodel_recompute rc,
		  const struct cm_stage_links *links,
		  struct cm_layer_cost *cost)
{
	const struct costmodel_model *m = &cm->model;
	const struct costmodel_layer_profile *p, *e;
	double share, slots, a2a_bytes, a2a_Bps, a2a_lat, a2a_s;
	double scale = links->tp_comm_scale;

	memset(cost, 0, sizeof(*cost));
	p = cm_prof(cm, gpu, tp, mbs, type);
	if (!p)
		return ar_seterr(-AR_ENOPROFILE, "no profile for %s tp %d micro-batch %d layer type %d",
				 cm->gpus[gpu].name, tp, mbs, type);
	if (!prof_recompute_ok(p, rc))
		return ar_seterr(-AR_ENOPROFILE, "the profile of %s tp %d micro-batch %d layer type %d has no %s",
				 cm->gpus[gpu].name, tp, mbs, type, recompute_key[rc]);
	cost->time_s = prof_time_s(p, rc, scale);
	cost->fwd_s = prof_fwd_s(p, scale);
	cost->act_bytes = p->recompute_act_bytes[rc];
	cost->act_full_bytes = p->act_bytes;
	cost->params = p->param_bytes / 2;
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
	if (!prof_recompute_ok(e, rc))
		return ar_seterr(-AR_ENOPROFILE, "the expert profile of %s etp %d micro-batch %d has no %s",
				 cm->gpus[gpu].name, etp, mbs, recompute_key[rc]);
	share = (double)etp / tp;
	cost->time_s += prof_time_s(e, rc, scale) * share;
	cost->fwd_s += prof_fwd_s(e, scale) * share;
	cost->act_bytes += e->recompute_act_bytes[rc] * share;
	cost->act_full_bytes += e->act_bytes * share;
	cost->expert_params = e->param_bytes / 2 / ep;
	if (ep > 1) {
		/* Dispatch and combine, forward and backward (and again in a
		 * fully recomputed forward). */
		slots = (double)mbs * m->seq_len * m->top_k * share;
		a2a_bytes = slots * m->hidden * 2.0 * (ep - 1) / ep;
		if (ep * etp <= links->gpus_per_node_min) {
			a2a_Bps = links->intra_Bps;
			a2a_lat = links->intra_step_s;
		} else {
			a2a_Bps = links->net_Bps;
			a2a_lat = NCCL_NET_STEP_S;
		}
		a2a_s = a2a_bytes / a2a_Bps + NCCL_BASE_LAT_S + (ep - 1) * a2a_lat;
		cost->time_s += (rc == COSTMODEL_RECOMPUTE_FULL ? 6 : 4) * a2a_s;
		cost->fwd_s += 2 * a2a_s;
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
#define NUM_PRICED ARRAY_SIZE(priced_types)

/* What one stage costs per micro-batch and holds. */
struct stage_cost {
	double time_s, fwd_s;		/* p2p included */
	double act_bytes;		/* per micro-batch in flight */
	double transient_bytes;		/* a recomputed layer's activations */
	struct cm_layer_cost per_type[COSTMODEL_NUM_LAYER_TYPES];
	int counts[COSTMODEL_NUM_LAYER_TYPES];
};

/*
 * A stage's time per micro-batch of @mbs samples (p2p included) and what
 * it holds.  A stage with dp groups gives each mbs / dp of the samples.
 */
static int stage_cost(const struct costmodel *cm, const struct costmodel_stage *st,
		      int mbs, enum costmodel_recompute rc,
		      const struct cm_stage_links *links, struct stage_cost *sc)
{
	int sent = mbs, rc_err;

	memset(sc, 0, sizeof(*sc));
	if (mbs % costmodel_stage_dp(st))
		return ar_seterr(-AR_EINVAL, "a stage of dp %d cannot share a micro-batch of %d",
				 st->dp, mbs);
	mbs /= costmodel_stage_dp(st);
	count_layers(cm, st->first_layer, st->last_layer, sc->counts);
	for (size_t i = 0; i < NUM_PRICED; i++) {
		enum costmodel_layer_type type = priced_types[i];
		struct cm_layer_cost *c = &sc->per_type[type];
		int n = sc->counts[type];

		if (!n)
			continue;
		rc_err = cm_layer_cost(cm, st->gpu, st->tp, mbs, type, st->ep,
				       st->etp, rc, links, c);
		if (rc_err < 0)
			return rc_err;
		sc->time_s += n * c->time_s;
		sc->fwd_s += n * c->fwd_s;
		sc->act_bytes += n * c->act_bytes;
		/* Full recomputation rebuilds one layer's activations at a
		 * time in the backward. */
		if (rc != COSTMODEL_RECOMPUTE_NONE)
			sc->transient_bytes = fmax(sc->transient_bytes,
						   c->act_full_bytes - c->act_bytes);
	}
	if (links->p2p_Bps > 0) {
		/* Activations forward, their gradients backward. */
		double bytes = (double)sent / links->p2p_streams / links->p2p_shards *
			       cm->model.seq_len * cm->model.hidden * 2.0;
		double one = bytes / links->p2p_Bps + links->p2p_lat;

		sc->time_s += 2 * one;
		sc->fwd_s += one;
	}
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

/*
 * Every holder of one layer, over all templates, as its data-parallel
 * collectives see them: the dense part's group (one rank per pipeline
 * and TP shard) and the routed experts' (their EDP ranks).
 */
struct layer_group {
	struct cm_group dense, expert;
	int tp_min, tp_max;		/* finest and coarsest holder */
	double rs_window, ag_window;	/* the holders' least overlap room */
	double dense_s, dense_ag_s;	/* bandwidth time, slowest holder */
	double expert_s, expert_ag_s;
};

static void group_add(struct cm_group *g, int n, const struct cm_stage_links *l,
		      int nodes, int local)
{
	if (g->n == 0) {
		g->intra_Bps = l->intra_Bps;
		g->net_Bps = l->net_Bps;
		g->intra_step_s = l->intra_step_s;
		g->local = local;
	} else {
		g->intra_Bps = fmin(g->intra_Bps, l->intra_Bps);
		g->net_Bps = fmin(g->net_Bps, l->net_Bps);
		g->intra_step_s = fmax(g->intra_step_s, l->intra_step_s);
		if (local < g->local)
			g->local = local;
	}
	g->n += n;
	/* Templates hold disjoint GPUs and, but where a node has room for
	 * both, disjoint nodes. */
	g->nodes += nodes;
}

int costmodel_plan_price(const struct costmodel *cm,
			 const struct costmodel_cluster *cl,
			 struct costmodel_plan *plan)
{
	struct cm_stage_links links_small[8 * COSTMODEL_MAX_DEPTH], *links = links_small;
	struct stage_cost *costs = NULL;
	double tmax_small[8], tsum_small[8], *tmax = tmax_small, *tsum = tsum_small;
	struct layer_group *lg = NULL;
	const struct costmodel_model *m = &cm->model;
	double pipeline_s = 0, sync_s = 0, step_s = 0;
	double grad_bytes = m->grad_bytes_per_param;
	int n = plan->ntemplates, L = cm->nlayers, mbs = plan->micro_batch;
	enum costmodel_recompute rc = plan->recompute;
	bool dist = plan->distributed_optimizer, distribute = false;
	int err = 0;

	if (n < 1)
		return ar_seterr(-AR_EINVAL, "plan has no templates");
	if ((int)rc < 0 || rc >= COSTMODEL_NUM_RECOMPUTE)
		return ar_seterr(-AR_EINVAL, "plan: recompute mode %d is not none, selective or full",
				 (int)rc);
	if (n > 8) {
		links = malloc((size_t)n * COSTMODEL_MAX_DEPTH * sizeof(*links));
		tmax = malloc((size_t)n * sizeof(*tmax));
		tsum = malloc((size_t)n * sizeof(*tsum));
	}
	costs = malloc((size_t)n * COSTMODEL_MAX_DEPTH * sizeof(*costs));
	lg = calloc((size_t)L, sizeof(*lg));
	if (!links || !tmax || !tsum || !costs || !lg) {
		err = -ENOMEM;
		goto out;
	}

	/* Per-stage time for one micro-batch. */
	for (int j = 0; j < n; j++) {
		struct costmodel_template *t = &plan->templates[j];
		struct cm_stage_links *lk = &links[j * COSTMODEL_MAX_DEPTH];

		cm_template_links(cm, cl, t, lk);
		tmax[j] = tsum[j] = 0;
		for (int s = 0; s < t->nstages; s++) {
			struct stage_cost *sc = &costs[j * COSTMODEL_MAX_DEPTH + s];

			err = stage_cost(cm, &t->stages[s], mbs, rc, &lk[s], sc);
			if (err < 0)
				goto out;
			t->stages[s].time_s = sc->time_s;
			tmax[j] = fmax(tmax[j], sc->time_s);
			tsum[j] += sc->time_s;
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
			err = ar_seterr(-AR_EINVAL, "plan covers %ld samples of the global batch of %d",
					have * mbs, plan->global_batch);
			goto out;
		}
	}
	for (int j = 0; j < n; j++)
		pipeline_s = fmax(pipeline_s, (plan->templates[j].micro_batches - 1) *
				  tmax[j] + tsum[j]);

	/*
	 * Each layer's data-parallel groups: its holders in every template,
	 * and the overlap room each holder leaves.  Under 1F1B the last
	 * micro-batch's backward runs from the last stage to the first, so
	 * stage s's gradients are complete sum_{s' < s} b_s' before its
	 * pipeline ends, and its buckets go out during its own last backward
	 * as they fill: (1 - 1/buckets) of it.  A pipeline that ends before
	 * the slowest adds its lead.  The parameter gather likewise runs
	 * under the next iteration's forward.
	 */
	for (int l = 0; l < L; l++) {
		lg[l].rs_window = lg[l].ag_window = DBL_MAX;
		lg[l].tp_min = INT32_MAX;
	}
	for (int j = 0; j < n; j++) {
		struct costmodel_template *t = &plan->templates[j];
		struct cm_stage_links *lk = &links[j * COSTMODEL_MAX_DEPTH];
		double lead = pipeline_s - ((t->micro_batches - 1) * tmax[j] + tsum[j]);
		double bwd_before = 0, fwd_before = 0;

		for (int s = 0; s < t->nstages; s++) {
			struct costmodel_stage *st = &t->stages[s];
			struct stage_cost *sc = &costs[j * COSTMODEL_MAX_DEPTH + s];
			double params = 0, buckets, rs_w = 0, ag_w = 0;
			int dp = costmodel_stage_dp(st);

			for (size_t i = 0; i < NUM_PRICED; i++)
				params += sc->counts[priced_types[i]] *
					  sc->per_type[priced_types[i]].params;
			buckets = ceil(params / cm_bucket_params(cm, t->replicas * dp));
			if (buckets < 1)
				buckets = 1;
			if (plan->overlap_grad_reduce)
				rs_w = (1 - 1 / buckets) * (sc->time_s - sc->fwd_s) +
				       bwd_before + lead;
			if (plan->overlap_param_gather)
				ag_w = (1 - 1 / buckets) * sc->fwd_s + fwd_before;
			bwd_before += sc->time_s - sc->fwd_s;
			fwd_before += sc->fwd_s;
			for (int l = st->first_layer; l <= st->last_layer; l++) {
				struct layer_group *g = &lg[l];
				int elocal = lk[s].gpus_per_node_min / (st->ep * st->etp);

				group_add(&g->dense, t->replicas * dp, &lk[s],
					  lk[s].nodes, lk[s].local_min);
				group_add(&g->expert, st->edp, &lk[s], lk[s].nodes,
					  elocal < 1 ? 1 : elocal);
				if (st->tp < g->tp_min)
					g->tp_min = st->tp;
				if (st->tp > g->tp_max)
					g->tp_max = st->tp;
				g->rs_window = fmin(g->rs_window, rs_w);
				g->ag_window = fmin(g->ag_window, ag_w);
			}
		}
	}

	/* The memory check, now that the in-flight counts and the optimizer's
	 * data-parallel groups are known. */
	for (int j = 0; j < n; j++) {
		struct costmodel_template *t = &plan->templates[j];

		for (int s = 0; s < t->nstages; s++) {
			struct costmodel_stage *st = &t->stages[s];
			struct stage_cost *sc = &costs[j * COSTMODEL_MAX_DEPTH + s];
			int inflight = t->nstages - s;
			double bytes, cap = cm->gpus[st->gpu].memory_gib * GIB;

			if (inflight > t->micro_batches)
				inflight = t->micro_batches;
			bytes = inflight * sc->act_bytes + sc->transient_bytes +
				cm->overhead_bytes;
			for (int l = st->first_layer; l <= st->last_layer; l++) {
				const struct cm_layer_cost *c =
					&sc->per_type[cm_layer_type(cm, l)];

				bytes += cm_state_bytes(cm, c->params,
							dist ? lg[l].dense.n : 1) +
					 cm_state_bytes(cm, c->expert_params,
							dist ? lg[l].expert.n : 1);
			}
			st->peak_mem_gib = bytes / GIB;
			if (bytes > cap) {
				err = ar_seterr(-AR_EINFEASIBLE, "template %d stage %d (%s, tp %d, layers %d-%d, micro-batch %d, recompute %s) needs %.1f GiB of %.0f GiB",
						j, s, cm->gpus[st->gpu].name, st->tp,
						st->first_layer, st->last_layer, mbs,
						costmodel_recompute_name(rc),
						bytes / GIB, cm->gpus[st->gpu].memory_gib);
				goto out;
			}
		}
	}

	/*
	 * Each layer's collectives at the bandwidth of its slowest holder
	 * (the finest-grained one holds the most bytes): an all-reduce of the
	 * gradients, or with the distributed optimizer a reduce-scatter of
	 * the gradients and an all-gather of the BF16 weights.
	 */
	for (int j = 0; j < n; j++) {
		struct costmodel_template *t = &plan->templates[j];

		for (int s = 0; s < t->nstages; s++) {
			struct costmodel_stage *st = &t->stages[s];
			struct stage_cost *sc = &costs[j * COSTMODEL_MAX_DEPTH + s];

			for (int l = st->first_layer; l <= st->last_layer; l++) {
				struct layer_group *g = &lg[l];
				const struct cm_layer_cost *c =
					&sc->per_type[cm_layer_type(cm, l)];
				double d = c->params, e = c->expert_params;

				if (dist) {
					g->dense_s = fmax(g->dense_s, 0.5 *
						cm_allreduce_bw_s(&g->dense, d * grad_bytes));
					g->dense_ag_s = fmax(g->dense_ag_s, 0.5 *
						cm_allreduce_bw_s(&g->dense, d * 2));
					g->expert_s = fmax(g->expert_s, 0.5 *
						cm_allreduce_bw_s(&g->expert, e * grad_bytes));
					g->expert_ag_s = fmax(g->expert_ag_s, 0.5 *
						cm_allreduce_bw_s(&g->expert, e * 2));
				} else {
					g->dense_s = fmax(g->dense_s,
						cm_allreduce_bw_s(&g->dense, d * grad_bytes));
					g->expert_s = fmax(g->expert_s,
						cm_allreduce_bw_s(&g->expert, e * grad_bytes));
				}
			}
		}
	}

	/*
	 * Per stage: bandwidth over its layers, latency per bucket (a holder
	 * coarser than the finest joins one collective per finer shard: the
	 * resharding mixed TP needs), the exposure 1F1B leaves, and the
	 * optimizer step over the state the stage updates.
	 */
	for (int j = 0; j < n; j++) {
		struct costmodel_template *t = &plan->templates[j];

		for (int s = 0; s < t->nstages; s++) {
			struct costmodel_stage *st = &t->stages[s];
			struct stage_cost *sc = &costs[j * COSTMODEL_MAX_DEPTH + s];
			double rs = 0, ag = 0, rs_window = DBL_MAX, ag_window = DBL_MAX;
			double dparams = 0, eparams = 0, updated = 0, lat = 0, elat = 0;
			double buckets, ebuckets, exposed, step;
			int dp = 1, edp = 1;

			for (int l = st->first_layer; l <= st->last_layer; l++) {
				struct layer_group *g = &lg[l];
				const struct cm_layer_cost *c =
					&sc->per_type[cm_layer_type(cm, l)];
				double shards = (double)g->tp_max / st->tp;

				rs += g->dense_s + g->expert_s;
				ag += g->dense_ag_s + g->expert_ag_s;
				rs_window = fmin(rs_window, g->rs_window);
				ag_window = fmin(ag_window, g->ag_window);
				dparams += c->params;
				eparams += c->expert_params;
				updated += c->params / (dist ? g->dense.n : 1) +
					   c->expert_params / (dist ? g->expert.n : 1);
				lat = fmax(lat, shards * cm_allreduce_lat_s(&g->dense));
				elat = fmax(elat, cm_allreduce_lat_s(&g->expert));
				if (g->dense.n > dp)
					dp = g->dense.n;
				if (g->expert.n > edp)
					edp = g->expert.n;
			}
			buckets = dp > 1 ? ceil(dparams / cm_bucket_params(cm, dp)) : 0;
			ebuckets = edp > 1 && eparams > 0 ?
				   ceil(eparams / cm_bucket_params(cm, edp)) : 0;
			/* A reduce-scatter or an all-gather is half an
			 * all-reduce's steps, each with the base latency. */
			if (dist) {
				double half = 0.5 * (buckets * lat + ebuckets * elat) +
					      (buckets + ebuckets) * NCCL_BASE_LAT_S / 2;

				rs += half;
				ag += half;
			} else {
				rs += buckets * lat + ebuckets * elat;
			}
			st->sync_s = rs + ag;
			exposed = fmax(0, rs - rs_window);
			/* Adam over the local shard, the gradient buffer zeroed. */
			step = (updated * OPT_STEP_BYTES +
				(dparams + eparams) * grad_bytes) /
			       (cm->gpus[st->gpu].hbm_GBps * 1e9 * HBM_EFFICIENCY);
			sync_s = fmax(sync_s, exposed);
			step_s = fmax(step_s, step + fmax(0, ag - ag_window));
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
	plan->predicted.step_s = step_s;
	plan->predicted.iter_s = pipeline_s + sync_s + step_s;
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
	free(lg);
	free(costs);
	if (links != links_small)
		free(links);
	if (tmax != tmax_small)
		free(tmax);
	if (tsum != tsum_small)
		free(tsum);
	return err;
}
