/*
 * costmodel_private.h - libarachne internals, shared by its .c files and
 * its unit tests.  Not installed.
 */
#ifndef AR_COSTMODEL_PRIVATE_H
#define AR_COSTMODEL_PRIVATE_H

#ifndef AR_INTERNAL
#error "costmodel_private.h is internal to libarachne and its tests"
#endif

#include <limits.h>

#include "ar.h"
#include "costmodel.h"

#define DEFAULT_OVERHEAD_GIB	1.5	/* CUDA context, NCCL buffers, fragmentation */
#define INTRA_LATENCY_S		5e-6	/* one collective step inside a node */
#define INTER_LATENCY_S		20e-6	/* one collective step across nodes */
#define LINK_EFFICIENCY		0.8	/* achieved over nominal bandwidth */

struct costmodel {
	char profiles_dir[PATH_MAX];
	struct costmodel_model model;
	int ngpus;
	struct costmodel_gpu gpus[COSTMODEL_MAX_GPU_TYPES];
	/* prof[gpu][tp index][mbs index][layer type] */
	struct costmodel_layer_profile
		prof[COSTMODEL_MAX_GPU_TYPES][COSTMODEL_NUM_TP][COSTMODEL_NUM_MBS]
		    [COSTMODEL_NUM_LAYER_TYPES];
	double overhead_bytes;		/* runtime overhead per GPU */
	int nlayers;			/* blocks + 2 */
};

/* log2 of a power of two up to 16, or -1. */
static inline int cm_log2(int v)
{
	switch (v) {
	case 1: return 0;
	case 2: return 1;
	case 4: return 2;
	case 8: return 3;
	case 16: return 4;
	default: return -1;
	}
}

static inline const struct costmodel_layer_profile *
cm_prof(const struct costmodel *cm, int gpu, int tp, int mbs,
	enum costmodel_layer_type type)
{
	int ti = cm_log2(tp), mi = cm_log2(mbs);

	if (gpu < 0 || gpu >= cm->ngpus || ti < 0 || ti >= COSTMODEL_NUM_TP ||
	    mi < 0 || mi >= COSTMODEL_NUM_MBS)
		return NULL;
	const struct costmodel_layer_profile *p = &cm->prof[gpu][ti][mi][type];
	return p->present ? p : NULL;
}

/* The type of layer @layer of the layer list. */
static inline enum costmodel_layer_type cm_layer_type(const struct costmodel *cm,
						      int layer)
{
	if (layer == 0)
		return COSTMODEL_LAYER_EMBED;
	if (layer == cm->nlayers - 1)
		return COSTMODEL_LAYER_HEAD;
	if (cm->model.experts > 0 && layer > cm->model.dense_layers)
		return COSTMODEL_LAYER_ATTN;	/* an MoE block: ATTN + EXPERT */
	return COSTMODEL_LAYER_BLOCK;
}

/* Network bandwidth one GPU of @node gets, in bytes/s. */
double cm_node_net_Bps(const struct costmodel *cm,
		       const struct costmodel_cluster *cl, int node);
/* Intra-node bandwidth of GPU type @gpu, bytes/s. */
static inline double cm_intra_Bps(const struct costmodel *cm, int gpu)
{
	return cm->gpus[gpu].intra_node_GBps * 1e9 * LINK_EFFICIENCY;
}

/* Ring all-reduce of @bytes per rank over @n ranks at @Bps with @lat. */
static inline double cm_ring_allreduce_s(double bytes, int n, double Bps,
					 double lat)
{
	if (n <= 1 || bytes <= 0)
		return 0;
	return 2.0 * (n - 1) / n * bytes / Bps + 2.0 * (n - 1) * lat;
}

/*
 * Per-stage facts derived from a template's placement, computed once per
 * pricing: where p2p and gradient traffic go.
 */
struct cm_stage_links {
	double p2p_Bps;			/* to the next stage; 0 for the last */
	double p2p_lat;
	double dp_Bps;			/* slowest link of the stage's DP ring */
	double dp_lat;
	double net_Bps;			/* slowest per-GPU network share */
	double intra_Bps;		/* inside a node of the stage's type */
	bool dp_one_node;		/* every replica of the stage in one node */
	int gpus_per_node_min;		/* fewest stage GPUs on a node it uses */
	int p2p_streams;		/* parallel sends to the next stage: the
					   smaller dp of the two */
};

void cm_template_links(const struct costmodel *cm,
		       const struct costmodel_cluster *cl,
		       const struct costmodel_template *t,
		       struct cm_stage_links *links);

/*
 * Per-layer cost of a layer of @type on stage @st for one micro-batch:
 * compute + TP/ETP comm + all-to-all (MoE), and the memory it needs.
 * Returns -AR_ENOPROFILE when a profile entry is missing.
 */
struct cm_layer_cost {
	double time_s;			/* fwd + bwd + collectives */
	double state_bytes;		/* weights, grads, optimizer */
	double act_bytes;		/* per in-flight micro-batch */
	double grad_bytes;		/* all-reduced per GPU: dense part */
	double expert_grad_bytes;	/* all-reduced per GPU over EDP */
};

int cm_layer_cost(const struct costmodel *cm, int gpu, int tp, int mbs,
		  enum costmodel_layer_type type, int ep, int etp,
		  const struct cm_stage_links *links,
		  struct cm_layer_cost *cost);

/* Memory a stage holds, in bytes, with @inflight micro-batches. */
int cm_stage_memory(const struct costmodel *cm, const struct costmodel_stage *st,
		    int mbs, int inflight, const struct cm_stage_links *links,
		    double *bytes);

/* Template placement storage. */
int cm_template_alloc_placement(struct costmodel_template *t);

#endif /* AR_COSTMODEL_PRIVATE_H */
