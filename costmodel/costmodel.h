/*
 * costmodel.h - libarachne: GPU, model and layer profiles, cluster
 * compositions, plans and their JSON form, the memory check, the
 * iteration-time model and the arithmetic fill of the paper's §5.3.
 *
 * Every planner (the learned one, the baselines, the exhaustive reference)
 * prices plans through this one model, so their numbers compare.
 *
 * Conventions: int functions return 0 on success and -errno or -AR_E*
 * (common/ar.h) on failure, with a message naming what was wrong in
 * ar_errmsg().  A loaded struct costmodel is read-only afterwards: any
 * number of threads may price and fill plans with it at once.
 *
 * Units: time in seconds unless a name says _ms, memory in bytes unless a
 * name says _gib (2^30 bytes), bandwidth in GB/s (10^9 bytes/s) unless a
 * name says _gbps (10^9 bits/s, as network links are sold).
 */
#ifndef AR_COSTMODEL_H
#define AR_COSTMODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COSTMODEL_MAX_GPU_TYPES	16	/* GPU profiles one model may load */
#define COSTMODEL_MAX_DEPTH	16	/* stages in one pipeline (Dmax bound) */
#define COSTMODEL_MAX_TP	8	/* largest TP degree (a node's GPUs) */
#define COSTMODEL_NUM_TP	4	/* TP degrees 1, 2, 4, 8 */
#define COSTMODEL_MAX_MBS	16	/* largest micro-batch size profiled */
#define COSTMODEL_NUM_MBS	5	/* micro-batch sizes 1, 2, 4, 8, 16 */
#define COSTMODEL_MAX_NODE_GPUS	16	/* GPUs one node may have */
#define COSTMODEL_MAX_STAGE_DP	4096	/* TP groups of one stage in one replica */
#define COSTMODEL_NAME_MAX	32

/* ---------------------------------------------------------------------
 * Profiles (profiles/gpus/NAME.ini, profiles/models/NAME.ini,
 * profiles/layers/MODEL/GPU.ini; docs/profiles.md gives the formats).
 * ------------------------------------------------------------------- */

struct costmodel_gpu {
	char name[COSTMODEL_NAME_MAX];	/* "h100" */
	double memory_gib;		/* device memory */
	double peak_tflops;		/* dense BF16 */
	double hbm_GBps;		/* device memory bandwidth */
	double intra_node_GBps;		/* GPU to GPU inside a node, per direction */
	double network_gbps;		/* one node's network link */
	int max_gpus_per_node;		/* largest node built with this GPU */
	double price_per_hour;		/* USD per GPU-hour */
};

struct costmodel_model {
	char name[COSTMODEL_NAME_MAX];	/* "llama3-8b" */
	int blocks;			/* transformer blocks */
	int hidden;
	int ffn;			/* dense FFN width */
	int heads;
	int kv_heads;
	int head_dim;
	int vocab;
	int experts;			/* routed experts; 0 for a dense model */
	int top_k;
	int expert_ffn;			/* FFN width of one expert */
	int shared_experts;		/* always-active experts per MoE block */
	int dense_layers;		/* leading blocks that are dense in an MoE model */
	int q_lora_rank;		/* MLA query compression; 0 for GQA */
	int kv_lora_rank;		/* MLA key/value compression; 0 for GQA */
	bool gated;			/* SwiGLU FFN (three matrices) */
	bool tied_embeddings;		/* head shares the embedding matrix */
	/* training defaults */
	int seq_len;
	int global_batch;
	double grad_bytes_per_param;	/* main gradient buffer, also what is reduced */
	double optimizer_bytes_per_param; /* FP32 master weight + Adam moments */
	/* BF16 weight + gradient + optimizer: a replica's state without the
	 * distributed optimizer */
	double state_bytes_per_param;
	double bucket_params;		/* gradient bucket; 0: Megatron's default */
};

/*
 * Activation recomputation (Megatron's --recompute-granularity), a plan
 * option: NONE keeps every activation (flash attention), SELECTIVE re-runs
 * the norms, the attention core and the MoE expert activation in the
 * backward (Megatron-Core's recompute modules layernorm, core_attn and
 * moe_act), FULL keeps only each block's input and re-runs its forward.
 */
enum costmodel_recompute {
	COSTMODEL_RECOMPUTE_NONE,
	COSTMODEL_RECOMPUTE_SELECTIVE,
	COSTMODEL_RECOMPUTE_FULL,
	COSTMODEL_NUM_RECOMPUTE
};

/* "none", "selective", "full"; NULL out of range. */
const char *costmodel_recompute_name(enum costmodel_recompute r);
/* The mode called @name, or -1. */
int costmodel_recompute_find(const char *name);

/* Layer types: the repeated structures a model's layer list is made of. */
enum costmodel_layer_type {
	COSTMODEL_LAYER_EMBED,		/* token embedding */
	COSTMODEL_LAYER_BLOCK,		/* dense transformer block */
	COSTMODEL_LAYER_ATTN,		/* MoE block without its routed experts */
	COSTMODEL_LAYER_EXPERT,		/* the routed experts of an MoE block */
	COSTMODEL_LAYER_HEAD,		/* final norm, LM head and loss */
	COSTMODEL_NUM_LAYER_TYPES
};

/*
 * One profile entry: one layer of @type on one GPU of a TP group of @tp
 * (for EXPERT: an ETP group) at micro-batch size mbs.  For EXPERT the
 * entry covers the expert work of mbs * seq_len * top_k token slots on a
 * GPU that holds every expert sliced @tp ways; the cost model scales it to
 * the stage's actual share (docs/costmodel.md).
 */
struct costmodel_layer_profile {
	double fwd_ms;			/* forward compute */
	double bwd_ms;			/* backward compute, no recomputation */
	double comm_ms;			/* TP/ETP collectives, forward + backward */
	double act_bytes;		/* activations kept per micro-batch */
	double param_bytes;		/* BF16 weights held per GPU */
	/* parts and variants (docs/profiles.md); < 0 when a file lacks them */
	double fwd_attn_ms;		/* of fwd_ms: the attention core (~ seq^2) */
	double bwd_attn_ms;		/* of bwd_ms: the attention core */
	double fwd_comm_ms;		/* of comm_ms: the forward's collectives */
	double recompute_ms[COSTMODEL_NUM_RECOMPUTE]; /* forward work re-run */
	double recompute_act_bytes[COSTMODEL_NUM_RECOMPUTE]; /* kept instead */
	bool present;			/* false: the profiles lack this entry */
	bool measured;			/* from arachne-profile measure */
};

/* ---------------------------------------------------------------------
 * The loaded model: one model's architecture, every GPU profile, and the
 * layer profiles of the model on each GPU.
 * ------------------------------------------------------------------- */

struct costmodel;

struct costmodel_opts {
	const char *profiles_dir;	/* NULL: $AR_PROFILES, else the installed dir */
	int global_batch;		/* 0: the model's default */
	/* 0: the model's default; another length scales the layer profiles
	 * (docs/costmodel.md) or fails naming the entry that cannot scale */
	int seq_len;
	double runtime_overhead_gib;	/* 0: default (1.5 GiB per GPU) */
	bool no_layer_profiles;		/* GPU and model profiles only (synth) */
	/* new plans do not overlap the gradient reduction and the parameter
	 * gather with compute (Megatron without --overlap-grad-reduce and
	 * --overlap-param-gather) */
	bool no_overlap;
};

/*
 * costmodel_load() - load model @model_name with every GPU profile and the
 * model's layer profiles from @opts->profiles_dir.  Stores a new model in
 * *@cmp (caller frees with costmodel_destroy()).  -AR_ENOTFOUND names an
 * unknown model; -AR_EINVAL names the file and field that is broken.
 */
int costmodel_load(const char *model_name, const struct costmodel_opts *opts,
		   struct costmodel **cmp);
void costmodel_destroy(struct costmodel *cm);

const struct costmodel_model *costmodel_model(const struct costmodel *cm);
int costmodel_num_gpus(const struct costmodel *cm);
const struct costmodel_gpu *costmodel_gpu(const struct costmodel *cm, int type);
int costmodel_gpu_find(const struct costmodel *cm, const char *name); /* -1 */
const char *costmodel_profiles_dir(const struct costmodel *cm);

/*
 * The model's layer list: 0 is the embedding, 1..blocks the transformer
 * blocks, blocks+1 the head.  Plans name layers by these indices.
 */
int costmodel_num_layers(const struct costmodel *cm);
bool costmodel_layer_is_moe(const struct costmodel *cm, int layer);

/*
 * costmodel_profile() - the entry for (@gpu, @tp, @mbs, @type); NULL when
 * the profiles hold none (exact lookups only, as in the paper).
 */
const struct costmodel_layer_profile *
costmodel_profile(const struct costmodel *cm, int gpu, int tp, int mbs,
		  enum costmodel_layer_type type);

/*
 * costmodel_synth_profile() - write the analytic layer profile of the
 * loaded model on GPU type @gpu to @out, in the INI format of
 * profiles/layers/MODEL/GPU.ini (every TP degree up to the GPU's node size
 * and every micro-batch size), labelled "source = analytic".  The
 * efficiency model is documented in docs/profiles.md.
 */
int costmodel_synth_profile(const struct costmodel *cm, int gpu, FILE *out);

/* ---------------------------------------------------------------------
 * Cluster compositions (cluster JSON, ARCHITECTURE.md).
 * ------------------------------------------------------------------- */

struct costmodel_node {
	char *name;			/* hostname, or "h100-0007" when anonymous */
	int gpu;			/* GPU type index */
	int gpus;			/* GPUs in this node */
	/* as the node's group gives them; 0: not given (the defaults apply) */
	int nics;			/* network links of the node */
	double nic_gbps;		/* one link's rate */
	double intra_node_GBps;		/* GPU to GPU inside the node, per direction */
};

struct costmodel_cluster {
	char *name;
	struct costmodel_node *nodes;
	size_t nnodes;
	/* > 0: the network of every node whose group gives no nic_gbps */
	double inter_node_gbps;
	/* Node indices sorted by name, for costmodel_cluster_node_find();
	 * set by costmodel_cluster_from_json(), NULL: found by a scan. */
	int *by_name;
	/*
	 * The free-GPU pools' order, set by costmodel_cluster_index(): node
	 * indices grouped by GPU type, in index order within a type;
	 * type_first[g] .. type_first[g + 1] - 1 are type g's places, and
	 * type_pos[i] is node i's place.
	 */
	int *by_type;
	int *type_pos;
	int type_first[COSTMODEL_MAX_GPU_TYPES + 1];
};

/*
 * costmodel_cluster_from_json() / _load() - parse a cluster composition.
 * Node names come from "hosts" (a Slurm hostlist) or are generated for
 * "count" entries.  The caller frees *@clp with costmodel_cluster_free().
 */
int costmodel_cluster_from_json(const struct costmodel *cm, const json_t *root,
				struct costmodel_cluster **clp);
int costmodel_cluster_load(const struct costmodel *cm, const char *path,
			   struct costmodel_cluster **clp);
json_t *costmodel_cluster_to_json(const struct costmodel *cm,
				  const struct costmodel_cluster *cl);
void costmodel_cluster_free(struct costmodel_cluster *cl);
/*
 * costmodel_cluster_index() - order @cl's nodes by GPU type for the
 * pools (costmodel_pool_init() needs it).  costmodel_cluster_from_json()
 * calls it; a cluster built in memory calls it once its nodes are in.
 * 0 or -ENOMEM, -AR_EINVAL for a node of no valid GPU type.
 */
int costmodel_cluster_index(struct costmodel_cluster *cl);
int costmodel_cluster_total_gpus(const struct costmodel_cluster *cl);
/*
 * A node's network, all its links together, in Gb/s: nics x nic_gbps, the
 * link rate defaulting to the cluster's inter_node_gbps, then to the GPU
 * profile's network_gbps.
 */
double costmodel_node_network_gbps(const struct costmodel *cm,
				   const struct costmodel_cluster *cl, int node);
/* A node's GPU-to-GPU link per direction, GB/s: its own or the profile's. */
double costmodel_node_intra_GBps(const struct costmodel *cm,
				 const struct costmodel_cluster *cl, int node);
/*
 * Per-direction GB/s of an intra-node link class ("nvlink3", "pcie4",
 * docs/costmodel.md lists them and their sources); 0 for an unknown name.
 */
double costmodel_link_class_GBps(const char *name);
/* The link class names, comma-separated, for messages. */
const char *costmodel_link_class_names(void);
/* Index of the node called @name, or -1. */
int costmodel_cluster_node_find(const struct costmodel_cluster *cl,
				const char *name);

/* ---------------------------------------------------------------------
 * Plans.  A plan is a list of templates; a template is a pipeline of
 * stages replicated @replicas times.  Placement names, for each replica
 * and stage, the node and the GPUs of each of that stage's TP groups: one
 * group, or @dp groups for a stage with data parallelism of its own.
 * ------------------------------------------------------------------- */

struct costmodel_stage {
	int gpu;			/* GPU type index */
	int tp;				/* TP degree of attention/dense layers */
	int first_layer;		/* inclusive indices into the layer list */
	int last_layer;
	int ep, etp, edp;		/* expert layout over tp * dp * replicas GPUs */
	/*
	 * Data parallelism inside the stage (Metis's device groups of
	 * unequal size): each replica runs the stage on dp TP groups, each
	 * taking micro_batch / dp samples of every micro-batch, and the
	 * stage's gradients are reduced over dp * replicas groups.  0 or 1:
	 * one group, as every planner but Metis builds (docs/costmodel.md).
	 */
	int dp;
	double peak_mem_gib;		/* filled by pricing */
	double time_s;			/* per micro-batch, fwd+bwd+comm; pricing */
	double sync_s;			/* its gradient collectives in all; pricing */
};

struct costmodel_group {
	int node;			/* node index in the cluster */
	uint8_t gpu[COSTMODEL_MAX_TP];	/* GPU indices inside the node; tp used */
};

struct costmodel_template {
	int nstages;
	struct costmodel_stage stages[COSTMODEL_MAX_DEPTH];
	int replicas;
	int micro_batches;		/* per replica and iteration */
	/* [replicas][slots], owned: a replica's groups stage by stage, a
	 * stage's dp groups one after the other (slots = nstages when no
	 * stage has dp > 1); costmodel_template_group() indexes it */
	struct costmodel_group *placement;
};

/* A stage's data-parallel degree: its dp, 1 when unset. */
int costmodel_stage_dp(const struct costmodel_stage *st);
/* TP groups one replica of @t occupies: the sum of its stages' dp. */
int costmodel_template_slots(const struct costmodel_template *t);
/* Group @k (0 .. dp - 1) of stage @stage in replica @replica of @t. */
struct costmodel_group *costmodel_template_group(const struct costmodel_template *t,
						 int replica, int stage, int k);

/* iter_s = pipeline_s + sync_s + step_s (docs/costmodel.md). */
struct costmodel_prediction {
	double iter_s;			/* one iteration of the global batch */
	double iters_per_s;
	double samples_per_s;
	double pipeline_s;		/* slowest pipeline's 1F1B time */
	double sync_s;			/* gradient reduction the backward does not hide */
	double step_s;			/* optimizer step and unhidden parameter gather */
	/* the GPUs the plan uses at their profiles' price_per_hour */
	double usd_per_hour;
	double usd_per_sample;
};

struct costmodel_plan {
	int micro_batch;		/* micro-batch size, the same plan-wide */
	int global_batch;
	int seq_len;
	/* how the job runs (Megatron's flags of the same names) */
	enum costmodel_recompute recompute;
	bool distributed_optimizer;	/* optimizer state sharded over DP */
	bool overlap_grad_reduce;	/* gradient reduction under the backward */
	bool overlap_param_gather;	/* distributed optimizer: gather under the forward */
	int ntemplates;
	struct costmodel_template *templates;	/* owned */
	struct costmodel_prediction predicted;	/* filled by pricing */
	/* what produced it */
	char planner[COSTMODEL_NAME_MAX];
	double planning_s;
	long plans_priced;
	long states_explored;		/* points of its search space it looked at */
	char steering[COSTMODEL_NAME_MAX]; /* a baseline's: "published", "shared" */
	char objective[COSTMODEL_NAME_MAX]; /* "throughput", "cost"; "" unset */
	/* a baseline's own estimate of the plan it chose (published steering) */
	double planner_estimate_samples_per_s;
	bool search_complete;
};

/* A new empty plan for @cm (no templates, the model's batch and seq len). */
struct costmodel_plan *costmodel_plan_create(const struct costmodel *cm);
void costmodel_plan_free(struct costmodel_plan *plan);
/* Deep copy; NULL on ENOMEM. */
struct costmodel_plan *costmodel_plan_clone(const struct costmodel_plan *plan);
/* Deep copy into an existing plan, reusing its storage. */
int costmodel_plan_copy(struct costmodel_plan *dst,
			const struct costmodel_plan *src);
int costmodel_plan_total_gpus(const struct costmodel_plan *plan);

/*
 * costmodel_plan_to_json() - the plan JSON of ARCHITECTURE.md, with the
 * unused GPUs of @cl listed.  Caller owns the reference.
 */
json_t *costmodel_plan_to_json(const struct costmodel *cm,
			       const struct costmodel_cluster *cl,
			       const struct costmodel_plan *plan);
/*
 * costmodel_plan_from_json() - parse plan JSON against @cl and check it:
 * known GPU types matching the placement's nodes, layers covering the
 * model exactly once per pipeline, every GPU used at most once, TP groups
 * inside one node, expert layouts that multiply out.  It does not price.
 */
int costmodel_plan_from_json(const struct costmodel *cm,
			     const struct costmodel_cluster *cl,
			     const json_t *root, struct costmodel_plan **planp);

/*
 * costmodel_plan_check() - the structural invariants above, for a plan
 * built in memory.  0 or -AR_EINVAL with the broken invariant named.
 */
int costmodel_plan_check(const struct costmodel *cm,
			 const struct costmodel_cluster *cl,
			 const struct costmodel_plan *plan);

/*
 * costmodel_plan_price() - the memory check, then the iteration time.
 * Fills every stage's peak_mem_gib, time_s and sync_s, and
 * @plan->predicted.  Templates with micro_batches == 0 get the global
 * batch split among them in proportion to their speed first.
 * -AR_EINFEASIBLE (with the stage that does not fit named) when a stage
 * exceeds its GPU's memory; -AR_ENOPROFILE when a lookup misses.
 */
int costmodel_plan_price(const struct costmodel *cm,
			 const struct costmodel_cluster *cl,
			 struct costmodel_plan *plan);

/* ---------------------------------------------------------------------
 * The arithmetic fill (§5.3).
 * ------------------------------------------------------------------- */

/* A structural template: what a planner chooses. */
struct costmodel_shape {
	int depth;
	int gpu[COSTMODEL_MAX_DEPTH];
	int tp[COSTMODEL_MAX_DEPTH];
};

/*
 * Free GPUs of a cluster: what the templates placed so far leave.  Cheap
 * to copy (one flat block), so searches keep one per branch.
 *
 * free_bits[k - 1] has bit p set when the node at place p of the
 * cluster's by_type order has exactly k free GPUs, and free_sum[k - 1]
 * bit w when word w of free_bits[k - 1] is not zero, so that a best-fit
 * take finds its node in O(nodes / 4096) words, not a scan of the nodes.
 * free_mask starts the block that holds all three; free(free_mask) frees it.
 */
struct costmodel_pool {
	int nnodes;
	uint16_t *free_mask;		/* [nnodes] bit g: GPU g of the node is free */
	uint64_t *free_bits;		/* [COSTMODEL_MAX_NODE_GPUS][nwords] */
	uint64_t *free_sum;		/* [COSTMODEL_MAX_NODE_GPUS][nsum] */
	int nwords, nsum;
	int free_by_type[COSTMODEL_MAX_GPU_TYPES];
	/* free_hist[type][k]: nodes of this type with exactly k free GPUs */
	int free_hist[COSTMODEL_MAX_GPU_TYPES][COSTMODEL_MAX_NODE_GPUS + 1];
};

int costmodel_pool_init(struct costmodel_pool *pool,
			const struct costmodel_cluster *cl);
void costmodel_pool_fini(struct costmodel_pool *pool);
int costmodel_pool_copy(struct costmodel_pool *dst,
			const struct costmodel_pool *src);
/*
 * costmodel_pool_reindex() - recount @pool from its free_mask, after a
 * caller changed free_mask itself (the baselines' restricted pools).
 */
void costmodel_pool_reindex(struct costmodel_pool *pool,
			    const struct costmodel_cluster *cl);
/* Largest number of free GPUs of @type in one node. */
int costmodel_pool_largest_free(const struct costmodel_pool *pool, int type);
/*
 * costmodel_pool_take() - take @t GPUs of type @gpu from @pool into group
 * @g, best fit: the node of that type with the fewest free GPUs that
 * still has @t.  -AR_EINFEASIBLE (nothing taken) when no node has.
 */
int costmodel_pool_take(const struct costmodel_cluster *cl,
			struct costmodel_pool *pool, int gpu, int t,
			struct costmodel_group *g);

/*
 * The order a template's replicas are placed in.  By stage (the
 * default): stage 0 of every replica, then stage 1, as Megatron-LM ranks
 * them, so a stage's data-parallel group shares nodes and the gradient
 * sync stays inside them.  By replica: each replica's stages side by side,
 * so its point-to-point traffic stays inside them.  Neither wins
 * everywhere (docs/costmodel.md): the default places by stage, prices the
 * same split placed by replica and, only where that is faster, fills the
 * template placed so and keeps the faster of the two.
 */
enum costmodel_placement {
	COSTMODEL_PLACE_BEST,		/* by stage, by replica if faster */
	COSTMODEL_PLACE_BY_STAGE,
	COSTMODEL_PLACE_BY_REPLICA,
};

/* Options of the fill; zeroed means the defaults. */
struct costmodel_fill_opts {
	enum costmodel_placement placement;
	int max_replicas;		/* > 0 caps the replica count */
	int fixed_micro_batch;		/* > 0: price only this size */
	bool uniform_layers;		/* the layer list dealt evenly, the remainder
					   to the last stages (Sailor's rule) */
	bool no_expert_tiling;		/* pin ETP = TP, EP = 1 (baselines) */
	/* recomputation modes the fill may choose from, as bits
	 * 1 << COSTMODEL_RECOMPUTE_*; 0: every mode */
	unsigned recompute_modes;
	bool no_distributed_optimizer;	/* replicate the optimizer state */
	/*
	 * Pack and place the template only: its stages get ETP = TP, EP = 1
	 * and no layers, nothing is split, tiled or priced, and memory is not
	 * checked.  For planners that split and choose with their own model
	 * and have only their final plan priced (docs/baselines.md).
	 */
	bool place_only;
};

/*
 * costmodel_fill_add() - the paper's one call: complete @shape against the
 * GPUs left in @pool and the plan so far, and price the result.
 *
 * Packs each stage's TP group into a node of its GPU type (exact-size
 * nodes first, a group never crosses a node), takes the largest replica
 * count the packing admits, places them in @opts->placement's order,
 * splits the layers by profiled speed within each stage's memory, tiles
 * every MoE stage over the EP x ETP x EDP factorizations that fit, and
 * selects the micro-batch size that makes the whole plan fastest.  On
 * success @plan holds the new template, the chosen micro-batch and the
 * prediction, and @pool has the GPUs taken.
 * On failure @plan and @pool are unchanged and the reason is in
 * ar_errmsg() (-AR_EINFEASIBLE for "does not fit", -AR_ENOPROFILE).
 */
int costmodel_fill_add(const struct costmodel *cm,
		       const struct costmodel_cluster *cl,
		       struct costmodel_pool *pool,
		       struct costmodel_plan *plan,
		       const struct costmodel_shape *shape,
		       const struct costmodel_fill_opts *opts);

/*
 * costmodel_fill_replicas() - the replica count that packing @shape into
 * @pool admits (0 when not one fits), without changing anything.
 */
int costmodel_fill_replicas(const struct costmodel *cm,
			    const struct costmodel_pool *pool,
			    const struct costmodel_shape *shape);

/*
 * costmodel_plan_refill() - re-run the split, tiling and micro-batch
 * choice for an existing plan whose placement is fixed, and price it.
 */
int costmodel_plan_refill(const struct costmodel *cm,
			  const struct costmodel_cluster *cl,
			  struct costmodel_plan *plan,
			  const struct costmodel_fill_opts *opts);

/*
 * costmodel_stage_speed() - samples per second one replica of a stage of
 * (@gpu, @tp) would sustain on the whole model at its best profiled
 * micro-batch, ignoring memory and pipeline bubbles; an optimistic rate
 * that search bounds and policy features use.  0 when no profile exists.
 */
double costmodel_stage_speed(const struct costmodel *cm, int gpu, int tp);

/*
 * Bytes one block's state takes on a GPU at @tp (weights+grads+optimizer),
 * the optimizer's share sharded over @dp data-parallel replicas as the
 * distributed optimizer does (1: a replica alone).
 */
double costmodel_block_state_bytes(const struct costmodel *cm, int gpu, int tp,
				   int dp);

#ifdef __cplusplus
}
#endif
#endif /* AR_COSTMODEL_H */
