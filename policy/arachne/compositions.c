/*
 * compositions.c - random compositions of a model's profiled GPU types, for
 * training and for the property tests: types (at most 4) and GPUs drawn
 * in the caller's ranges (training: 2-4 types, 16 to --max-gpus GPUs), one
 * type dominant or all balanced, nodes of 1, 2, 4 or 8 GPUs, and some
 * types spread over nodes of two sizes (the non-uniform mixes of §6.1).
 */
#define AR_INTERNAL 1
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ar.h"
#include "arachne_private.h"

static const int node_sizes[] = { 1, 2, 4, 8 };

void policy_compose_free(struct costmodel_cluster *cl)
{
	costmodel_cluster_free(cl);
}

/* Append @count nodes of @gpus GPUs of @type. */
static int add_nodes(const struct costmodel *cm, struct costmodel_cluster *cl,
		     size_t *cap, int type, int gpus, int count)
{
	for (int i = 0; i < count; i++) {
		char name[64];

		if (AR_GROW(cl->nodes, *cap, cl->nnodes + 1, 64) < 0)
			return -1;
		snprintf(name, sizeof(name), "%s-%04zu", costmodel_gpu(cm, type)->name,
			 cl->nnodes);
		/* network fields 0: the GPU profile's defaults */
		cl->nodes[cl->nnodes] = (struct costmodel_node){
			.name = strdup(name), .gpu = type, .gpus = gpus,
		};
		if (!cl->nodes[cl->nnodes].name)
			return -1;
		cl->nnodes++;
	}
	return 0;
}

static int pick_node_size(const struct costmodel *cm, struct policy_rng *rng,
			  int type)
{
	int max = costmodel_gpu(cm, type)->max_gpus_per_node;
	int n = 0;

	for (size_t i = 0; i < ARRAY_SIZE(node_sizes); i++)
		if (node_sizes[i] <= max || max <= 0)
			n++;
	/* 4-GPU nodes are the common case; weight them up */
	if (max >= 4 && policy_rng_uniform(rng) < 0.4)
		return 4;
	return node_sizes[policy_rng_below(rng, n ? n : 1)];
}

struct costmodel_cluster *policy_compose_random(const struct costmodel *cm,
						struct policy_rng *rng,
						const struct policy_compose_opts *o)
{
	int usable[COSTMODEL_MAX_GPU_TYPES], nusable = 0, ntypes, total;
	int chosen[4];
	double share[4], sum = 0.0;
	struct costmodel_cluster *cl;
	size_t cap = 0;

	for (int t = 0; t < costmodel_num_gpus(cm); t++)
		if (costmodel_stage_speed(cm, t, 1) > 0.0)
			usable[nusable++] = t;
	if (nusable == 0)
		return NULL;
	ntypes = o->min_types + policy_rng_below(rng, o->max_types - o->min_types + 1);
	if (ntypes > nusable)
		ntypes = nusable;
	if (ntypes > 4)
		ntypes = 4;
	for (int i = 0; i < ntypes; i++) {	/* partial Fisher-Yates */
		int j = i + policy_rng_below(rng, nusable - i), t = usable[j];

		usable[j] = usable[i];
		usable[i] = t;
		chosen[i] = t;
	}
	total = (int)round(exp(log(o->min_gpus) + policy_rng_uniform(rng) *
			       (log(o->max_gpus) - log(o->min_gpus))));

	/* Balanced, or one type dominant with the rest uneven. */
	if (policy_rng_uniform(rng) < 0.3) {
		for (int i = 0; i < ntypes; i++)
			share[i] = 1.0;
	} else {
		int dom = policy_rng_below(rng, ntypes);

		for (int i = 0; i < ntypes; i++)
			share[i] = 0.2 + policy_rng_uniform(rng);
		share[dom] += 1.0 + 2.0 * policy_rng_uniform(rng);
	}
	for (int i = 0; i < ntypes; i++)
		sum += share[i];

	cl = calloc(1, sizeof(*cl));
	if (!cl)
		return NULL;
	cl->name = strdup("generated");
	if (!cl->name)
		goto err;
	for (int i = 0; i < ntypes; i++) {
		int t = chosen[i], gpus = (int)round(total * share[i] / sum);
		int size = pick_node_size(cm, rng, t);

		if (gpus < 1)
			gpus = 1;
		if (size > 1 && policy_rng_uniform(rng) < 0.3) {
			/* non-uniform: part of this type on single-GPU nodes */
			int singles = gpus / 4 + 1;

			if (add_nodes(cm, cl, &cap, t, 1, singles) < 0)
				goto err;
			gpus -= singles;
		}
		if (gpus > 0 &&
		    add_nodes(cm, cl, &cap, t, size, (gpus + size - 1) / size) < 0)
			goto err;
	}
	if (costmodel_cluster_index(cl) < 0)
		goto err;
	return cl;
err:
	policy_compose_free(cl);
	return NULL;
}

bool policy_compose_equal(const struct costmodel_cluster *a,
			  const struct costmodel_cluster *b)
{
	static const int W = COSTMODEL_MAX_NODE_GPUS + 1;
	int count[COSTMODEL_MAX_GPU_TYPES * (COSTMODEL_MAX_NODE_GPUS + 1)];

	if (a->nnodes != b->nnodes)
		return false;
	memset(count, 0, sizeof(count));
	for (size_t i = 0; i < a->nnodes; i++)
		count[a->nodes[i].gpu * W + a->nodes[i].gpus]++;
	for (size_t i = 0; i < b->nnodes; i++)
		if (--count[b->nodes[i].gpu * W + b->nodes[i].gpus] < 0)
			return false;
	return true;
}
