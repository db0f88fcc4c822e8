/*
 * hexiscale.c - the HexiScale baseline, as the Arachne paper's §3.1
 * describes it: first partition the cluster into disjoint data-parallel
 * groups by bandwidth-based graph partitioning, then search TP and PP
 * inside each group on its own GPUs only.  Each group becomes one
 * pipeline (a template of one replica); groups may differ in depth, GPU
 * types and TP, and the global batch is shared among them by speed.
 *
 * The graph: GPUs are vertices, GPUs of one node are joined by the node's
 * intra-node bandwidth and GPUs of different nodes by the network.  Every
 * intra-node edge is heavier than any inter-node one, so a minimum cut
 * never splits a node: the partition works on whole nodes and balances
 * the groups' compute (peak TFLOPS), greedily, largest node first into
 * the group with the least compute.  The number of groups is searched
 * from the most the memory allows down to one.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ar.h"
#include "baseline.h"

/* A group's chosen pipeline, remembered by the group's make-up. */
struct hexi_choice {
	char *key;			/* sorted "type:gpus," node list */
	bool found;
	struct costmodel_shape shape;
};

struct hexiscale {
	struct baseline_search bs;
	size_t *order;			/* nodes, most compute first */
	int *group_of;			/* node -> group */
	bool *keep;			/* scratch: nodes of one group */
	double *load;			/* scratch: compute per group */
	struct hexi_choice *memo;
	size_t nmemo;
	bool complete;
};

static double hexi_node_tflops(const struct hexiscale *h, size_t node)
{
	const struct costmodel_node *n = &h->bs.cl->nodes[node];

	return n->gpus * costmodel_gpu(h->bs.cm, n->gpu)->peak_tflops;
}

/* The groups' nodes: largest first into the least loaded group. */
static void hexi_partition(struct hexiscale *h, int ngroups)
{
	for (int k = 0; k < ngroups; k++)
		h->load[k] = 0;
	for (size_t i = 0; i < h->bs.cl->nnodes; i++) {
		size_t node = h->order[i];
		int least = 0;

		for (int k = 1; k < ngroups; k++)
			if (h->load[k] < h->load[least])
				least = k;
		h->group_of[node] = least;
		h->load[least] += hexi_node_tflops(h, node);
	}
}

static int hexi_cmp_key(const void *a, const void *b)
{
	const int *x = a, *y = b;

	return x[0] != y[0] ? x[0] - y[0] : x[1] - y[1];
}

/* "type:gpus,..." of group @k's nodes in sorted order (caller frees). */
static char *hexi_group_key(const struct hexiscale *h, int k)
{
	const struct costmodel_cluster *cl = h->bs.cl;
	int (*nodes)[2];
	size_t n = 0, len = 0;
	char *key;

	nodes = calloc(cl->nnodes, sizeof(*nodes));
	key = calloc(cl->nnodes * 12 + 1, 1);
	if (!nodes || !key) {
		free(nodes);
		free(key);
		return NULL;
	}
	for (size_t i = 0; i < cl->nnodes; i++) {
		if (h->group_of[i] != k)
			continue;
		nodes[n][0] = cl->nodes[i].gpu;
		nodes[n][1] = cl->nodes[i].gpus;
		n++;
	}
	qsort(nodes, n, sizeof(*nodes), hexi_cmp_key);
	for (size_t i = 0; i < n; i++)
		len += sprintf(key + len, "%d:%d,", nodes[i][0], nodes[i][1]);
	free(nodes);
	return key;
}

/*
 * hexi_shape() - the pipeline of one group for a TP degree per type
 * (@tp_of[type]): every node cut into TP groups of its type's degree, one
 * stage each, node after node; false when it has no stage or too many.
 */
static bool hexi_shape(const struct hexiscale *h, int k, const int *tp_of,
		       struct costmodel_shape *shape)
{
	const struct costmodel_cluster *cl = h->bs.cl;
	int blocks = costmodel_num_layers(h->bs.cm) - 2;

	shape->depth = 0;
	for (size_t i = 0; i < cl->nnodes; i++) {
		int g = cl->nodes[i].gpu;

		if (h->group_of[i] != k || !tp_of[g])
			continue;
		for (int n = cl->nodes[i].gpus / tp_of[g]; n > 0; n--) {
			if (shape->depth == COSTMODEL_MAX_DEPTH ||
			    shape->depth == blocks)
				return false;
			shape->gpu[shape->depth] = g;
			shape->tp[shape->depth] = tp_of[g];
			shape->depth++;
		}
	}
	return shape->depth > 0;
}

/* Price @shape alone on group @k's GPUs; its samples/s, or 0. */
static int hexi_try_shape(struct hexiscale *h, int k,
			  const struct costmodel_shape *shape, double *rate)
{
	struct costmodel_fill_opts opts;
	struct costmodel_pool pool = { 0 };
	struct costmodel_plan *plan;
	int rc;

	*rate = 0;
	plan = costmodel_plan_create(h->bs.cm);
	if (!plan)
		return -ENOMEM;
	rc = costmodel_pool_init(&pool, h->bs.cl);
	if (rc < 0)
		goto out;
	for (size_t i = 0; i < h->bs.cl->nnodes; i++)
		h->keep[i] = h->group_of[i] == k;
	baseline_pool_restrict(&pool, h->bs.cl, h->keep);
	baseline_fill_opts(&opts);
	opts.max_replicas = 1;
	h->bs.plans_priced++;
	rc = costmodel_fill_add(h->bs.cm, h->bs.cl, &pool, plan, shape, &opts);
	if (rc == 0)
		*rate = plan->predicted.samples_per_s;
	else if (baseline_rc_rejects(rc))
		rc = 0;
out:
	costmodel_pool_fini(&pool);
	costmodel_plan_free(plan);
	return rc;
}

/*
 * hexi_group_search() - TP and PP of group @k on its own GPUs: every TP
 * degree per GPU type (up to its smallest node in the group), the stages
 * they cut, the fastest one alone.  Remembered by the group's make-up.
 */
static int hexi_group_search(struct hexiscale *h, int k,
			     struct hexi_choice **choicep)
{
	const struct costmodel_cluster *cl = h->bs.cl;
	int tp_max[COSTMODEL_MAX_GPU_TYPES] = { 0 };
	int tp_of[COSTMODEL_MAX_GPU_TYPES];
	int types[COSTMODEL_MAX_GPU_TYPES], ntypes = 0;
	struct hexi_choice *c;
	double best = 0;
	char *key;
	int rc = 0;

	*choicep = NULL;
	key = hexi_group_key(h, k);
	if (!key)
		return -ENOMEM;
	for (size_t i = 0; i < h->nmemo; i++) {
		if (!strcmp(h->memo[i].key, key)) {
			free(key);
			*choicep = &h->memo[i];
			return 0;
		}
	}
	c = realloc(h->memo, sizeof(*c) * (h->nmemo + 1));
	if (!c) {
		free(key);
		return -ENOMEM;
	}
	h->memo = c;
	c = &h->memo[h->nmemo++];
	memset(c, 0, sizeof(*c));
	c->key = key;
	for (size_t i = 0; i < cl->nnodes; i++) {
		int g = cl->nodes[i].gpu, n = cl->nodes[i].gpus;

		if (h->group_of[i] != k)
			continue;
		if (!tp_max[g])
			types[ntypes++] = g;
		if (!tp_max[g] || n < tp_max[g])
			tp_max[g] = n;
	}
	/* An odometer over the TP degrees 1, 2, 4, 8 of each type. */
	for (int i = 0; i < COSTMODEL_MAX_GPU_TYPES; i++)
		tp_of[i] = 0;
	for (int i = 0; i < ntypes; i++)
		tp_of[types[i]] = 1;
	for (;;) {
		struct costmodel_shape shape;
		double rate;
		int i;

		if (baseline_search_expired(&h->bs))
			break;
		if (hexi_shape(h, k, tp_of, &shape)) {
			rc = hexi_try_shape(h, k, &shape, &rate);
			if (rc < 0)
				break;
			if (rate > best) {
				best = rate;
				c->found = true;
				c->shape = shape;
			}
		}
		for (i = 0; i < ntypes; i++) {
			int g = types[i];

			if (tp_of[g] * 2 <= tp_max[g] &&
			    tp_of[g] * 2 <= COSTMODEL_MAX_TP) {
				tp_of[g] *= 2;
				break;
			}
			tp_of[g] = 1;
		}
		if (i == ntypes)
			break;
	}
	if (h->bs.expired) {
		/* a half-searched group is not remembered */
		free(c->key);
		h->nmemo--;
		return rc;
	}
	*choicep = c;
	return rc;
}

/*
 * hexi_place() - group @k's pipeline @shape placed on the group's own
 * nodes (a fill alone on them), appended to @plan as a template.
 */
static int hexi_place(struct hexiscale *h, int k,
		      const struct costmodel_shape *shape,
		      struct costmodel_plan *plan)
{
	struct costmodel_fill_opts opts;
	struct costmodel_pool pool = { 0 };
	struct costmodel_plan *alone;
	struct costmodel_template *src, *dst;
	int rc;

	alone = costmodel_plan_create(h->bs.cm);
	if (!alone)
		return -ENOMEM;
	rc = costmodel_pool_init(&pool, h->bs.cl);
	if (rc < 0)
		goto out;
	for (size_t i = 0; i < h->bs.cl->nnodes; i++)
		h->keep[i] = h->group_of[i] == k;
	baseline_pool_restrict(&pool, h->bs.cl, h->keep);
	baseline_fill_opts(&opts);
	opts.max_replicas = 1;
	h->bs.plans_priced++;
	rc = costmodel_fill_add(h->bs.cm, h->bs.cl, &pool, alone, shape, &opts);
	if (rc < 0)
		goto out;
	src = &alone->templates[0];
	dst = baseline_template_alloc(plan, src->nstages, src->replicas);
	if (!dst) {
		rc = -ENOMEM;
		goto out;
	}
	memcpy(dst->stages, src->stages, sizeof(dst->stages));
	memcpy(dst->placement, src->placement,
	       sizeof(*dst->placement) * src->replicas * src->nstages);
out:
	costmodel_pool_fini(&pool);
	costmodel_plan_free(alone);
	return rc;
}

/*
 * hexi_groups() - the plan of @ngroups groups, each group's pipeline on
 * its own GPUs, then the layer split and micro-batch chosen and the batch
 * shared among the groups for the plan as a whole.
 */
static int hexi_groups(struct hexiscale *h, int ngroups)
{
	struct costmodel_fill_opts opts;
	struct costmodel_plan *plan;
	int rc = 0;

	hexi_partition(h, ngroups);
	plan = costmodel_plan_create(h->bs.cm);
	if (!plan)
		return -ENOMEM;
	for (int k = 0; k < ngroups; k++) {
		struct hexi_choice *c;

		if (baseline_search_expired(&h->bs))
			goto out;	/* a partial plan is not HexiScale's */
		rc = hexi_group_search(h, k, &c);
		if (rc < 0 || !c)
			goto out;
		if (!c->found)
			continue;	/* the model fits nowhere in it: idle */
		rc = hexi_place(h, k, &c->shape, plan);
		if (rc == -ENOMEM)
			goto out;
		rc = 0;
	}
	if (!plan->ntemplates)
		goto out;
	baseline_fill_opts(&opts);
	h->bs.plans_priced++;
	rc = costmodel_plan_refill(h->bs.cm, h->bs.cl, plan, &opts);
	if (rc == 0)
		rc = baseline_search_offer(&h->bs, plan);
	else if (baseline_rc_rejects(rc))
		rc = 0;
out:
	costmodel_plan_free(plan);
	return rc;
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
 * hexi_most_groups() - no more groups than nodes, and no more than the
 * cluster's memory holds copies of the model's state.
 */
static int hexi_most_groups(const struct hexiscale *h)
{
	const struct costmodel *cm = h->bs.cm;
	const struct costmodel_cluster *cl = h->bs.cl;
	double state = 0, memory = 0;
	int most;

	for (int l = 0; l < costmodel_num_layers(cm); l++) {
		double b = INFINITY;

		for (int g = 0; g < costmodel_num_gpus(cm); g++) {
			double x = baseline_layer_state_bytes(cm, g, 1, l);

			if (x < b)
				b = x;
		}
		state += b;
	}
	for (size_t i = 0; i < cl->nnodes; i++)
		memory += cl->nodes[i].gpus *
			  costmodel_gpu(cm, cl->nodes[i].gpu)->memory_gib * GIB;
	most = isfinite(state) && state > 0 ? (int)(memory / state) : 1;
	if (most > (int)cl->nnodes)
		most = (int)cl->nnodes;
	return most > 0 ? most : 1;
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
	h.order = calloc(n + 1, sizeof(*h.order));
	h.group_of = calloc(n + 1, sizeof(*h.group_of));
	h.keep = calloc(n + 1, sizeof(*h.keep));
	h.load = calloc(n + 1, sizeof(*h.load));
	if (!h.order || !h.group_of || !h.keep || !h.load) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		h.order[i] = i;
	qsort_r(h.order, n, sizeof(*h.order), hexi_cmp_order, &h);
	most = hexi_most_groups(&h);
	for (int k = most; k >= 1; k--) {
		if (baseline_search_expired(&h.bs))
			break;
		rc = hexi_groups(&h, k);
		if (rc < 0)
			goto out;
	}
	rc = baseline_search_finish(&h.bs, true, planp);
out:
	for (size_t i = 0; i < h.nmemo; i++)
		free(h.memo[i].key);
	free(h.memo);
	free(h.order);
	free(h.group_of);
	free(h.keep);
	free(h.load);
	baseline_search_fini(&h.bs);
	return rc;
}
