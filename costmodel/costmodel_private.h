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

/*
 * Training state per parameter besides the BF16 weight: Megatron-LM and
 * NeMo keep and reduce the gradients of BF16 training in FP32 (NeMo's
 * bf16_mixed recipe: grad_reduce_in_fp32=True; Megatron-LM's arguments.py
 * turns accumulate_allreduce_grads_in_fp32 on for --bf16), and Adam keeps
 * an FP32 master weight and two FP32 moments (4 + 4 + 4).
 */
#define DEFAULT_GRAD_BYTES	4
#define DEFAULT_OPTIMIZER_BYTES	12
#define DEFAULT_OVERHEAD_GIB	1.5	/* CUDA context, NCCL buffers, fragmentation */
/*
 * Achieved over nominal bandwidth of a link.  nccl-tests' all_reduce_perf
 * reaches a bus bandwidth of about 80 % of NVLink's per-direction rate on
 * DGX A100 and H100 (docs/costmodel.md gives the figures and sources).
 */
#define LINK_EFFICIENCY		0.8
/*
 * NCCL's own latency model (src/graph/tuning.cc, ring algorithm, Simple
 * protocol, the one large buckets use): a collective's base latency and
 * one ring step over NVLink, PCIe or the network.
 */
#define NCCL_BASE_LAT_S		8.4e-6
#define NCCL_NVLINK_STEP_S	3.4e-6
#define NCCL_PCI_STEP_S		5.7e-6
#define NCCL_NET_STEP_S		9.6e-6
/* An intra-node link at or below this many GB/s a direction is PCIe. */
#define PCIE_MAX_GBPS		64
/*
 * Megatron-Core's gradient buckets: max(40M, 1M x DP) parameters unless
 * bucket_size is set (distributed_data_parallel_config.py).
 */
#define BUCKET_MIN_PARAMS	40e6
#define BUCKET_PER_DP_PARAMS	1e6
/*
 * HBM traffic of the optimizer step per parameter the GPU updates: Adam
 * reads the FP32 gradient (4), reads and writes the FP32 master weight
 * and both moments (3 x 8), writes the BF16 weight (2), and the gradient
 * norm for clipping reads the gradient once more (4).  Every local
 * parameter's gradient buffer is also zeroed for the next iteration
 * (grad_bytes_per_param each).
 */
#define OPT_STEP_BYTES		34.0
#define HBM_EFFICIENCY		0.8	/* as synth's SYNTH_HBM_EFF */

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
	bool no_overlap;		/* new plans: no communication overlap */
	int model_seq_len;		/* the model profile's own sequence length */
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

/* Network bandwidth one GPU of @node gets, in bytes/s: its node's links
 * (costmodel_node_network_gbps()) shared by its GPUs, at LINK_EFFICIENCY. */
static inline double cm_node_net_Bps(const struct costmodel *cm,
				     const struct costmodel_cluster *cl, int node)
{
	const struct costmodel_node *n = &cl->nodes[node];
	double link = n->nic_gbps > 0 ? n->nic_gbps :
		      cl->inter_node_gbps > 0 ? cl->inter_node_gbps :
		      cm->gpus[n->gpu].network_gbps;

	return (n->nics > 0 ? n->nics : 1) * link * (1e9 / 8 * LINK_EFFICIENCY) /
	       n->gpus;
}

/* Intra-node bandwidth of @node, bytes/s (costmodel_node_intra_GBps()). */
static inline double cm_intra_Bps(const struct costmodel *cm,
				  const struct costmodel_cluster *cl, int node)
{
	const struct costmodel_node *n = &cl->nodes[node];

	return (n->intra_node_GBps > 0 ? n->intra_node_GBps :
		cm->gpus[n->gpu].intra_node_GBps) * (1e9 * LINK_EFFICIENCY);
}

/* NCCL's ring step latency over an intra-node link of @GBps. */
static inline double cm_intra_step_s(double GBps)
{
	return GBps <= PCIE_MAX_GBPS ? NCCL_PCI_STEP_S : NCCL_NVLINK_STEP_S;
}

/*
 * A data-parallel group as its collectives see it: @n ranks on @nodes
 * nodes, at least @local of them on each; every rank's intra-node link and
 * its share of its node's network.
 */
struct cm_group {
	int n, nodes, local;
	double intra_Bps;		/* slowest intra-node link */
	double net_Bps;			/* slowest per-GPU network share */
	double intra_step_s;		/* NCCL's step latency inside a node */
};

/*
 * Bandwidth time of an all-reduce of @bytes per rank.  Inside one node a
 * ring over the intra-node links.  Across nodes hierarchically, as NCCL's
 * rings and the reduce-scatter / all-reduce / all-gather decomposition
 * move the data: each node's ranks reduce-scatter over its links, the
 * shards are all-reduced across the nodes, and gathered back; the phases
 * pipeline chunk by chunk, so the time is the slowest link's load: the
 * intra-node ring's 2(l-1)/l x bytes, or the network's 2(N-1)/N x bytes
 * over the l ranks' shares of their node's links.
 */
static inline double cm_allreduce_bw_s(const struct cm_group *g, double bytes)
{
	double intra, inter;

	if (g->n <= 1 || bytes <= 0)
		return 0;
	if (g->nodes <= 1)
		return 2.0 * (g->n - 1) / g->n * bytes / g->intra_Bps;
	intra = 2.0 * (g->local - 1) / g->local * bytes / g->intra_Bps;
	inter = 2.0 * (g->nodes - 1) / g->nodes * bytes / (g->local * g->net_Bps);
	return intra > inter ? intra : inter;
}

/* NCCL's ring latency of one all-reduce over @g (tuning.cc). */
static inline double cm_allreduce_lat_s(const struct cm_group *g)
{
	int steps = 2 * (g->n - 1), inter = g->nodes > 1 ? 2 * (g->nodes - 1) : 0;

	if (g->n <= 1)
		return 0;
	return NCCL_BASE_LAT_S + (steps - inter) * g->intra_step_s +
	       inter * NCCL_NET_STEP_S;
}

/* Megatron-Core's bucket size for a data-parallel group of @dp ranks. */
static inline double cm_bucket_params(const struct costmodel *cm, int dp)
{
	double b = BUCKET_PER_DP_PARAMS * dp;

	if (cm->model.bucket_params > 0)
		return cm->model.bucket_params;
	return b > BUCKET_MIN_PARAMS ? b : BUCKET_MIN_PARAMS;
}

/*
 * Per-stage facts derived from a template's placement, computed once per
 * pricing: where p2p and gradient traffic go.
 */
struct cm_stage_links {
	double p2p_Bps;			/* to the next stage; 0 for the last */
	double p2p_lat;
	double net_Bps;			/* slowest per-GPU network share */
	double intra_Bps;		/* slowest intra-node link of its nodes */
	double intra_step_s;		/* NCCL step latency on that link */
	double tp_comm_scale;		/* profiles' intra link over intra_Bps */
	int nodes;			/* distinct nodes of its replicas */
	int local_min;			/* fewest of its replicas on one node */
	int gpus_per_node_min;		/* fewest stage GPUs on a node it uses */
	int p2p_shards;			/* each GPU sends 1/shards of an activation */
	int p2p_streams;		/* parallel sends to the next stage: the
					   smaller dp of the two */
};

void cm_template_links(const struct costmodel *cm,
		       const struct costmodel_cluster *cl,
		       const struct costmodel_template *t,
		       struct cm_stage_links *links);

/* The data-parallel group of one stage's replicas alone. */
static inline struct cm_group cm_stage_group(const struct cm_stage_links *l,
					     int replicas)
{
	struct cm_group g = {
		.n = replicas, .nodes = l->nodes, .local = l->local_min,
		.intra_Bps = l->intra_Bps, .net_Bps = l->net_Bps,
		.intra_step_s = l->intra_step_s,
	};
	return g;
}

/*
 * Per-layer cost of a layer of @type on stage @st for one micro-batch
 * under recomputation @rc: compute + TP/ETP comm + all-to-all (MoE) +
 * recomputation, and what it holds.  Returns -AR_ENOPROFILE when a
 * profile entry (or its recomputation part) is missing.
 */
struct cm_layer_cost {
	double time_s;			/* fwd + bwd + collectives + recompute */
	double fwd_s;			/* of which the forward pass */
	double act_bytes;		/* kept per in-flight micro-batch */
	double act_full_bytes;		/* without recomputation (its transient) */
	double params;			/* dense parameters held per GPU */
	double expert_params;		/* routed-expert parameters per GPU */
};

int cm_layer_cost(const struct costmodel *cm, int gpu, int tp, int mbs,
		  enum costmodel_layer_type type, int ep, int etp,
		  enum costmodel_recompute rc,
		  const struct cm_stage_links *links,
		  struct cm_layer_cost *cost);

/* Training state of @params parameters with the optimizer state over @dp. */
static inline double cm_state_bytes(const struct costmodel *cm, double params,
				    int dp)
{
	return params * (2 + cm->model.grad_bytes_per_param +
			 cm->model.optimizer_bytes_per_param / (dp > 1 ? dp : 1));
}

/* Template placement storage. */
int cm_template_alloc_placement(struct costmodel_template *t);

#endif /* AR_COSTMODEL_PRIVATE_H */
