/*
 * arachne_private.h - internals of the learned planner ("arachne"): the
 * state features and masks (Table 2), the policy network, its weights in
 * safetensors format, template construction (Algorithm 1), training
 * (GRPO + PPO clipping) and inference.  docs/policy.md describes them.
 *
 * Shapes in comments: N = rows (decisions) in a batch, S = state vector,
 * H = backbone width, A = head width, C = candidates of a head.
 */
#ifndef AR_ARACHNE_PRIVATE_H
#define AR_ARACHNE_PRIVATE_H

#ifndef AR_INTERNAL
#error "arachne_private.h is internal to libarpolicy and its tests"
#endif

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "costmodel.h"
#include "policy.h"
#include "policy_private.h"

/* ---------------------------------------------------------------------
 * Feature layout.  Bump POLICY_FEATURE_VERSION whenever a feature, its
 * order or its scaling changes: weights record it and loading refuses a
 * file written for another layout.
 * ------------------------------------------------------------------- */

#define POLICY_FEATURE_VERSION	5

#define POLICY_SLOTS		8	/* GPU-type slots (canonical order) */
#define POLICY_NUM_TP		4	/* TP degrees 1, 2, 4, 8 */
#define POLICY_DMAX		16	/* deepest pipeline the depth head offers */
#define POLICY_DEPTH_CANDS	(POLICY_DMAX + 1)	/* STOP, 1..DMAX */
#define POLICY_MAX_STEPS	8	/* templates one construction may add */
#define POLICY_MAX_CANDS	POLICY_DEPTH_CANDS

/* Per-slot (per GPU type) features; offsets inside one slot block. */
enum policy_type_feature {
	PT_PRESENT,		/* 1 when the slot holds a type of this cluster */
	PT_FREE_FRAC,		/* rho: free GPUs of the type over its GPUs */
	PT_NODE_FRAC,		/* eta: nodes with a free GPU over its nodes */
	PT_SHARE,		/* s: the type's GPUs over all GPUs */
	PT_FREE_SHARE,		/* free GPUs of the type over all GPUs */
	PT_TFLOPS,		/* peak TFLOPS / 1000 */
	PT_MEMORY,		/* memory / 100 GiB */
	PT_ALPHA,		/* [NUM_TP] stage speed at TP k / best stage speed */
	PT_PHI = PT_ALPHA + POLICY_NUM_TP, /* [NUM_TP] per-GPU speed at k / best per-GPU speed */
	PT_MU = PT_PHI + POLICY_NUM_TP,	/* [NUM_TP] one block's state at k / GPU memory */
	PT_NEED = PT_MU + POLICY_NUM_TP,	/* [NUM_TP] stages the model needs at k / DMAX */
	PT_NODES = PT_NEED + POLICY_NUM_TP,	/* [NUM_TP] nodes with >= k free / nodes */
	PT_CLAIMED = PT_NODES + POLICY_NUM_TP,	/* GPUs this template's stages took / free */
	PT_PREV,		/* 1 when the previous stage uses this type */
	PT_TP_OK,		/* [NUM_TP] 1 when TP k fits a free node now */
	/* [NUM_TP] the template's replicas with a TP-k stage here / free GPUs per stage */
	PT_REPLICAS = PT_TP_OK + POLICY_NUM_TP,
	PT_SHRINK = PT_REPLICAS + POLICY_NUM_TP, /* [NUM_TP] those / its replicas before */
	POLICY_TYPE_FEATURES = PT_SHRINK + POLICY_NUM_TP
};

/* Cluster-wide and construction features, after the slot blocks. */
enum policy_global_feature {
	PG_LOG_SIZE,		/* log2(GPUs) / 12 */
	PG_STEP,		/* t / T_max */
	PG_FREE,		/* free GPUs / GPUs */
	PG_PER_DEPTH,		/* [DMAX] log2(1 + free / d) / 12 */
	PG_DEPTH = PG_PER_DEPTH + POLICY_DMAX, /* chosen depth / DMAX (0 at the depth decision) */
	PG_STAGE,		/* stage index / depth */
	PG_STAGES_LEFT,		/* stages still to choose / DMAX */
	PG_PHASE,		/* [3] one-hot: depth, device, TP decision */
	PG_HELD = PG_PHASE + 3,	/* blocks the chosen stages can hold / blocks, capped at 2 */
	PG_THROUGHPUT,		/* plan so far / the composition's reference */
	PG_TEMPLATES,		/* templates placed / T_max */
	PG_PREV_TP,		/* log2(previous stage's TP) / 3 */
	POLICY_GLOBAL_FEATURES
};

/* Composition summary: the input of the FiLM generator. */
enum policy_comp_feature {
	PC_LOG_SIZE,		/* log2(GPUs) / 12 */
	PC_SHARE,		/* [SLOTS] share of each slot */
	PC_UNEVEN = PC_SHARE + POLICY_SLOTS,	/* largest minus smallest share */
	PC_TYPES,		/* number of types / SLOTS */
	PC_SMALL_NODES,		/* GPUs on nodes of fewer than 4 GPUs / GPUs */
	PC_MEAN_NODE,		/* mean GPUs a node / 8 */
	POLICY_COMP_FEATURES
};

#define POLICY_TYPES_OFF	0
#define POLICY_GLOBAL_OFF	(POLICY_SLOTS * POLICY_TYPE_FEATURES)
#define POLICY_COMP_OFF		(POLICY_GLOBAL_OFF + POLICY_GLOBAL_FEATURES)
/*
 * Per candidate depth d = 1..DMAX, after the composition block: the share
 * of the free GPUs a d-stage pipeline leaves idle, its bubble, the blocks
 * per stage against the mean stage capacity, and the share left usable
 * where the blocks fit (depth_features() in construct.c).
 */
#define POLICY_DEPTH_FEATURES	4
#define POLICY_DEPTHF_OFF	(POLICY_COMP_OFF + POLICY_COMP_FEATURES)
#define POLICY_STATE_DIM	(POLICY_DEPTHF_OFF + POLICY_DMAX * POLICY_DEPTH_FEATURES)

/* Candidate features of the TP head beyond the chosen type's block. */
/* one-hot k, alpha, phi, mu, nodes, ok, replicas, shrink */
#define POLICY_TP_FEATURES	(POLICY_NUM_TP + 7)

/* ---------------------------------------------------------------------
 * The network (net.c).
 * ------------------------------------------------------------------- */

#define POLICY_HIDDEN		64	/* backbone width H */
#define POLICY_HEAD		32	/* head width A */
#define POLICY_FILM_HIDDEN	32	/* FiLM generator width */
#define POLICY_BACKBONE_LAYERS	2

enum policy_head {
	POLICY_HEAD_DEPTH,
	POLICY_HEAD_DEVICE,
	POLICY_HEAD_TP,
	POLICY_NUM_HEADS
};

/*
 * FiLM outputs: per backbone layer H scales then H shifts, then per head A
 * scales then A shifts.
 */
#define POLICY_FILM_OUT	(POLICY_BACKBONE_LAYERS * 2 * POLICY_HIDDEN + \
			 POLICY_NUM_HEADS * 2 * POLICY_HEAD)

#define POLICY_DEV_IN	(POLICY_HIDDEN + POLICY_TYPE_FEATURES)
#define POLICY_TP_IN	(POLICY_HIDDEN + POLICY_TYPE_FEATURES + POLICY_TP_FEATURES)
/* depth candidate row: z, one-hot candidate, replicas term, the depth features */
#define POLICY_DEPTH_IN	(POLICY_HIDDEN + POLICY_DEPTH_CANDS + 1 + POLICY_DEPTH_FEATURES)

/* Parameter tensors, in the order of the arena and of the weights file. */
enum policy_tensor {
	PW_FILM1_W, PW_FILM1_B,		/* (FH, COMP), (FH) */
	PW_FILM2_W, PW_FILM2_B,		/* (FILM_OUT, FH), (FILM_OUT) */
	PW_BB1_W, PW_BB1_B,		/* (H, S), (H) */
	PW_BB2_W, PW_BB2_B,		/* (H, H), (H) */
	PW_DEPTH1_W, PW_DEPTH1_B,	/* (A, H), (A) */
	PW_DEPTH2_W, PW_DEPTH2_B,	/* (DEPTH_CANDS, A), (DEPTH_CANDS) */
	PW_DEV1_W, PW_DEV1_B,		/* (A, DEV_IN), (A) */
	PW_DEV2_W, PW_DEV2_B,		/* (1, A), (1) */
	PW_TP1_W, PW_TP1_B,		/* (A, TP_IN), (A) */
	PW_TP2_W, PW_TP2_B,		/* (1, A), (1) */
	POLICY_NUM_TENSORS
};

struct policy_tensor_info {
	const char *name;
	int rows;
	int cols;			/* 1 for a bias vector */
};

/* Name and shape of tensor @t. */
const struct policy_tensor_info *policy_tensor_info(enum policy_tensor t);

struct policy_net {
	size_t num_params;
	float *params;			/* arena: every tensor, in enum order */
	float *grads;			/* same layout; NULL until training */
	float *adam_m;
	float *adam_v;
	long adam_t;
	size_t offset[POLICY_NUM_TENSORS];
};

/* One decision, as the network sees it. */
struct policy_decision {
	uint8_t head;			/* enum policy_head */
	uint8_t action;			/* chosen candidate */
	uint8_t slot;			/* TP head: the chosen type's slot */
	uint8_t forced;			/* not drawn from the policy: no PPO term */
	uint32_t mask;			/* bit c: candidate c allowed */
	float old_logp;			/* log-probability when it was drawn */
	float x[POLICY_STATE_DIM];
};

/* Per-thread activations for up to @cap decisions (llm.c's acts arena). */
struct policy_work {
	int cap;
	float *memory;
	float *film_h;		/* (N, FH)  FiLM hidden, post-ReLU */
	float *film;		/* (N, FILM_OUT) */
	float *bb1;		/* (N, H) pre-FiLM */
	float *h1;		/* (N, H) post FiLM + ReLU */
	float *bb2;		/* (N, H) */
	float *z;		/* (N, H) backbone output */
	float *head_in;		/* (N * C, TP_IN) candidate rows */
	float *head_pre;	/* (N * C, A) pre-FiLM */
	float *head_h;		/* (N * C, A) post FiLM + ReLU */
	float *logits;		/* (N, MAX_CANDS), -inf where masked */
	float *scores;		/* (N * C) device and TP scores */
	/* backward scratch, same shapes */
	float *d_film_h, *d_film, *d_bb1, *d_h1, *d_bb2, *d_z;
	float *d_head_in, *d_head_pre, *d_head_h;
	float *d_logits;
	float *d_scores;
	int *row_dec;		/* (N * C) candidate row -> decision */
	int *row_of;		/* (N) decision -> its first candidate row */
	int head_start[POLICY_NUM_HEADS];	/* first row of each head */
	int head_count[POLICY_NUM_HEADS];	/* rows of each head */
};

int policy_net_init(struct policy_net *net, uint64_t seed);
int policy_net_enable_training(struct policy_net *net);
void policy_net_fini(struct policy_net *net);
float *policy_net_tensor(struct policy_net *net, enum policy_tensor t);
float *policy_net_grad(struct policy_net *net, enum policy_tensor t);

int policy_work_init(struct policy_work *w, int cap);
void policy_work_fini(struct policy_work *w);

/* Number of candidates a head scores. */
int policy_head_cands(enum policy_head head);

/*
 * policy_net_forward() - logits of @n decisions into @w->logits (row r at
 * r * POLICY_MAX_CANDS), masked candidates at -INFINITY.
 */
void policy_net_forward(const struct policy_net *net, struct policy_work *w,
			const struct policy_decision *d, int n);

/*
 * policy_net_backward() - given d(loss)/d(logits) in @w->d_logits (from the
 * last forward on the same @d, @n), accumulate (+=) into @grads (the
 * arena layout of net->params).
 */
void policy_net_backward(const struct policy_net *net, struct policy_work *w,
			 const struct policy_decision *d, int n, float *grads);

/* Adam step on net->params from net->grads; grads are left untouched. */
/* Keep a threaded BLAS to one thread: our callers parallelize above it. */
void policy_blas_single_thread(void);

void policy_net_adam(struct policy_net *net, float lr, float beta1, float beta2,
		     float eps, float weight_decay);

/* Softmax over the allowed candidates of row @logits; log-probs to @logp. */
void policy_log_softmax(const float *logits, uint32_t mask, int ncand,
			float *logp);

/* The allowed candidate of @ncand with the highest @score, the first among equals; -1 if none. */
static inline int policy_masked_argmax(const float *score, uint32_t mask, int ncand)
{
	int best = -1;

	for (int c = 0; c < ncand; c++)
		if ((mask & (1u << c)) && (best < 0 || score[c] > score[best]))
			best = c;
	return best;
}

/* ---------------------------------------------------------------------
 * The loss (loss.c): PPO-clipped GRPO surrogate, entropy bonus and
 * self-imitation over a batch of decisions.
 * ------------------------------------------------------------------- */

struct policy_loss_row {
	float advantage;		/* group-normalized advantage of the rollout */
	float entropy_weight;		/* entropy coefficient / decisions in step */
	float imitation_weight;		/* > 0: self-imitation row */
	float scale;			/* 1 / rollouts in the batch */
};

struct policy_loss_opts {
	float clip;			/* PPO epsilon */
};

/*
 * policy_loss() - loss of @n decisions from the logits of the last
 * forward; writes d(loss)/d(logits) to @w->d_logits and returns the loss.
 */
float policy_loss(struct policy_work *w, const struct policy_decision *d,
		  const struct policy_loss_row *rows, int n,
		  const struct policy_loss_opts *opts);

/* ---------------------------------------------------------------------
 * Weights in safetensors format (weights.c).
 * ------------------------------------------------------------------- */

struct policy_meta {
	char model[COSTMODEL_NAME_MAX];
	int feature_version;
	unsigned long seed;
	long episodes;
	char command[512];
};

/* Write @net (params only) to @path atomically with @meta. */
int policy_weights_save(const struct policy_net *net,
			const struct policy_meta *meta, const char *path);
/*
 * policy_weights_load() - read @path into an initialized @net; every
 * field is checked (header length, JSON, dtypes, shapes, offsets, the
 * feature version) and a failure names what is wrong.  @meta may be NULL.
 */
int policy_weights_load(struct policy_net *net, struct policy_meta *meta,
			const char *path);
/* Same, from a buffer (tests feed corrupted bytes through it). */
int policy_weights_parse(struct policy_net *net, struct policy_meta *meta,
			 const unsigned char *buf, size_t len, const char *what);

/* ---------------------------------------------------------------------
 * Random numbers: splitmix64-seeded xoshiro256** (rng.c), one per thread.
 * ------------------------------------------------------------------- */

struct policy_rng {
	uint64_t s[4];
};

void policy_rng_seed(struct policy_rng *r, uint64_t seed, uint64_t stream);
uint64_t policy_rng_next(struct policy_rng *r);
double policy_rng_uniform(struct policy_rng *r);	/* [0, 1) */
int policy_rng_below(struct policy_rng *r, int n);	/* [0, n) */
float policy_rng_normal(struct policy_rng *r);

/* ---------------------------------------------------------------------
 * Environment: one composition seen by the policy (env.c).
 * ------------------------------------------------------------------- */

/* What never changes during a construction on one composition. */
struct policy_env {
	const struct costmodel *cm;
	const struct costmodel_cluster *cl;
	int nslots;			/* GPU types present */
	int slot_type[POLICY_SLOTS];	/* slot -> costmodel GPU type */
	int type_slot[COSTMODEL_MAX_GPU_TYPES];	/* type -> slot or -1 */
	int gpus;			/* all GPUs of the cluster */
	int type_gpus[POLICY_SLOTS];
	int type_nodes[POLICY_SLOTS];
	int blocks;			/* layers a pipeline must hold */
	/*
	 * A TP-1 block with one micro-batch in flight, per slot: the bytes
	 * every replica keeps whole, the optimizer state the distributed
	 * optimizer shards over the replicas, and the GPU's usable bytes
	 * (policy_env_mean_capacity()).
	 */
	double block_whole[POLICY_SLOTS];
	double block_sharded[POLICY_SLOTS];
	double usable[POLICY_SLOTS];
	double speed[POLICY_SLOTS][POLICY_NUM_TP];	/* costmodel_stage_speed(), cached */
	int largest_node[POLICY_SLOTS];	/* GPUs of the type's largest node */
	double reference;		/* optimistic samples/s: reward scale */
	float type_static[POLICY_SLOTS][POLICY_TYPE_FEATURES];
	float comp[POLICY_COMP_FEATURES];
	int max_tp;			/* largest TP any node admits */
};

int policy_env_init(struct policy_env *env, const struct costmodel *cm,
		    const struct costmodel_cluster *cl);

/* The TP degree of index @k (1, 2, 4, 8). */
static inline int policy_tp_of(int k)
{
	return 1 << k;
}

/*
 * Layers a stage of (@slot, TP index @k) can hold when it is stage @stage
 * of @depth, its type has @free GPUs left (MoE experts tile over them) and
 * its template packs @replicas (a dense model's optimizer state is
 * sharded over them; 1 never overstates).
 */
double policy_env_stage_capacity(const struct policy_env *env, int slot, int k,
				 int stage, int depth, int free, int replicas);

/*
 * Blocks a TP-1 stage with one micro-batch in flight holds when its
 * template packs @replicas, averaged over the composition's GPUs.
 */
double policy_env_mean_capacity(const struct policy_env *env, int replicas);

/* ---------------------------------------------------------------------
 * Construction (construct.c): Algorithm 1 on one composition.
 * ------------------------------------------------------------------- */

/*
 * A template under construction.  The masks track one replica of the
 * chosen stages against per-type histograms of free GPUs a node (the
 * pool's free_hist), which is all that node packing depends on.
 */
struct policy_partial {
	struct costmodel_shape shape;	/* stages chosen so far in shape.depth */
	int target_depth;
	int hist[POLICY_SLOTS][COSTMODEL_MAX_NODE_GPUS + 1];	/* nodes by free GPUs */
	int free[POLICY_SLOTS];
	int claimed[POLICY_SLOTS];
	double held;			/* layers the chosen stages can hold */
};

struct policy_episode {
	const struct policy_env *env;
	struct costmodel_pool pool;
	struct costmodel_plan *plan;
	struct costmodel_plan *best;	/* best plan seen (a prefix may win) */
	int step;
	double throughput;		/* samples/s of the plan so far */
	struct policy_partial part;
	bool relax_memory;		/* the memory estimate refused every depth */
	bool look_ahead;		/* an MoE template stepped back: see construct.c */
	long plans_priced;
	/* scratch for the exact check of an MoE template's last stage */
	struct costmodel_pool *trial_pool;
	struct costmodel_plan *trial_plan;
};

int policy_episode_init(struct policy_episode *ep, const struct policy_env *env);
void policy_episode_fini(struct policy_episode *ep);
int policy_episode_reset(struct policy_episode *ep);

/* The state vector for the next decision of @head. */
void policy_state_build(const struct policy_episode *ep, enum policy_head head,
			int slot, float *x);

/* Masks (bit c allowed) for the next decision; 0 means none is allowed. */
uint32_t policy_mask_depth(const struct policy_episode *ep);
uint32_t policy_mask_device(const struct policy_episode *ep);
uint32_t policy_mask_tp(const struct policy_episode *ep, int slot);

/* Take the stage (@slot, TP index @k) into the template under construction. */
void policy_partial_push(struct policy_episode *ep, int slot, int k);
void policy_partial_begin(struct policy_episode *ep, int depth);

/* How a construction draws its decisions. */
enum policy_draw {
	POLICY_DRAW_GREEDY,		/* argmax */
	POLICY_DRAW_SAMPLE,		/* from the softmax */
	POLICY_DRAW_UNIFORM,		/* uniformly among the allowed: no network */
};

struct policy_candidate;

struct policy_rollout_opts {
	enum policy_draw draw;
	double forced_depth_p;		/* probability of a uniform feasible depth per step */
	bool uniform_devices;		/* draw GPU types uniformly */
	/* Sampling temperatures (1, or 0 when unset: the policy as trained). */
	float depth_temperature;	/* of the depth decisions */
	float stage_temperature;	/* of the GPU-type and TP decisions */
	bool record;			/* keep decisions for training */
	/*
	 * Replay these templates instead of drawing (training distils the
	 * climb's plans so): every decision is forced to the candidate's,
	 * then STOP.  A decision the masks refuse ends the rollout with
	 * -AR_EINFEASIBLE.
	 */
	const struct policy_candidate *follow;
};

/* One rollout's outcome and, when recorded, its decisions. */
struct policy_trace {
	struct policy_decision *dec;	/* [ndec], owned */
	uint8_t *dec_step;		/* [ndec] step of each decision */
	int ndec;
	size_t cap, step_cap;		/* of dec and dec_step */
	int decisions_in_step[POLICY_MAX_STEPS];
	int nsteps;
	float rewards[POLICY_MAX_STEPS];	/* throughput deltas / reference */
	float ret;			/* sum of rewards */
	double throughput;		/* samples/s of the best prefix plan */
	int first_depth;
	struct costmodel_shape shapes[POLICY_MAX_STEPS];	/* templates placed, in order */
	int nshapes;
	int best_nshapes;		/* templates of the best prefix */
	int steps_back;			/* MoE last stages stepped back from */
};

void policy_trace_fini(struct policy_trace *tr);
void policy_trace_clear(struct policy_trace *tr);

#define POLICY_INFEASIBLE_PENALTY	0.5f	/* delta of Eq. (1), in reference units */

/*
 * policy_rollout() - one construction on @ep (reset first).  Leaves the
 * final plan in ep->plan, the best prefix plan in ep->best and, with
 * @opts->record, the decisions in @tr.  @net and @w may be NULL when
 * every decision is drawn uniformly.
 */
int policy_rollout(struct policy_episode *ep, const struct policy_net *net,
		   struct policy_work *w, struct policy_rng *rng,
		   const struct policy_rollout_opts *opts,
		   struct policy_trace *tr);

/* ---------------------------------------------------------------------
 * Planning: the planner (arachne.c), the plans its local improvement
 * starts from (starts.c) and the improvement itself (improve.c).  The
 * planner edits a template as an array of stages.
 * ------------------------------------------------------------------- */

/* The planner "arachne": what policy_plan() calls. */
int planner_arachne(const struct policy_request *req,
			struct costmodel_plan **planp);

/*
 * policy_default_path() - the shipped weights for @cm's model:
 * profiles/policies/<model>.safetensors, else the model it borrows from
 * (qwen3-64b -> qwen3-32b), else one of its kind (dense or MoE).
 * -AR_ENOTFOUND when none exists.
 */
int policy_default_path(const struct costmodel *cm, char *buf, size_t len);

/* Load the weights for @req (its path or the shipped default) into @net. */
int policy_net_load_for(struct policy_net *net, const struct costmodel *cm,
			const char *path);

/*
 * policy_explain_infeasible() - -AR_EINFEASIBLE with the reason no plan
 * fits: what the fill says of the template that needs the least memory.
 */
int policy_explain_infeasible(const struct policy_request *req);

/*
 * A batch of constructions run in parallel: rollout k (first + i) draws
 * from a generator seeded by (seed, k + 1), greedily for k = 0, sampled
 * otherwise, or every decision uniformly when @net is NULL.
 */
#define POLICY_BATCH		32
/*
 * The temperatures the planner samples its constructions at (the greedy
 * one takes the argmax): a flatter depth and sharper stages.  A
 * template's depth is one decision that sets everything after it, where
 * the policy's likeliest depth is often not the best plan's; its stages
 * are many decisions, each usually right, whose small errors add up over
 * a 16-stage pipeline.  Measured against temperature 1 over eight
 * planning seeds (docs/policy.md, "Sampling temperatures by head").
 */
#define POLICY_PLAN_DEPTH_TEMPERATURE	1.5f
#define POLICY_PLAN_STAGE_TEMPERATURE	0.8f

struct policy_batch {
	const struct policy_env *env;
	const struct policy_net *net;	/* NULL: uniform draws (no network) */
	unsigned long seed;
	int first;
	int n;				/* rollouts in this batch, <= POLICY_BATCH */
	/* non-NULL: once it passes, rollouts after the batch's first are
	 * not started (rc -AR_ETIMEOUT) */
	const struct planner_deadline *dl;
	struct policy_trace trace[POLICY_BATCH];
	struct costmodel_plan *plan[POLICY_BATCH];	/* best plan of each; NULL: none */
	int rc[POLICY_BATCH];
	char err[POLICY_BATCH][256];
	long priced[POLICY_BATCH];	/* templates each filled */
};

void policy_batch_run(struct policy_batch *b, int threads);
/* Free what a run left (traces and plans), ready for the next. */
void policy_batch_clear(struct policy_batch *b);
/* The rollout with the fastest plan (the first of equals), or -1. */
int policy_batch_best(const struct policy_batch *b);

#define POLICY_MAX_TEMPLATES	(POLICY_MAX_STEPS + 4) /* templates of a candidate plan */

/* One stage of a template: a GPU type and its TP degree. */
struct policy_stage {
	int gpu;			/* costmodel GPU type */
	int tp;
};

/*
 * A structural template: its stages in pipeline order, and at most
 * @max_replicas replicas of it (0: as many as the GPUs left admit; only
 * the paired start sets a cap, see starts.c).
 */
struct policy_template {
	int depth;
	int max_replicas;
	struct policy_stage stage[POLICY_DMAX];
};

/* A candidate plan: templates the fill places in order. */
struct policy_candidate {
	struct policy_template t[POLICY_MAX_TEMPLATES];
	int n;
	double thr;			/* samples/s once priced; 0: nothing fits */
};

void policy_template_from_shape(struct policy_template *t,
				const struct costmodel_shape *sh);
void policy_template_to_shape(const struct policy_template *t,
			      struct costmodel_shape *sh);
bool policy_template_equal(const struct policy_template *a,
			   const struct policy_template *b);
/* Insert @st before stage @at (0..depth); the caller checks the room. */
void policy_template_insert(struct policy_template *t, int at,
			    struct policy_stage st);
/* Remove stage @at. */
void policy_template_remove(struct policy_template *t, int at);

/*
 * policy_candidate_fill() - fill @x's templates in order into a fresh
 * plan, skipping those that no longer fit; x->thr is the result's
 * throughput (0 when none fits).  The plan goes to *@planp and the GPUs
 * left to *@left when they are not NULL (the caller frees both).
 */
int policy_candidate_fill(const struct policy_env *env,
			  struct policy_candidate *x,
			  struct costmodel_plan **planp,
			  struct costmodel_pool *left);

/* Keep only @x's templates that the fill places, in order. */
int policy_candidate_drop_unplaced(const struct policy_env *env,
				   struct policy_candidate *x);

/*
 * policy_candidates_price() - fill and price @n candidates on @threads
 * threads (each x->thr set, 0 when it fails); returns the templates
 * filled, the unit of plans_priced.
 */
long policy_candidates_price(const struct policy_env *env,
			     struct policy_candidate *x, int n, int threads);

/* Can a stage of GPU type @type run at TP @tp in this cluster at all? */
bool policy_env_tp_usable(const struct policy_env *env, int type, int tp);
/* Fewest stages of (@slot, TP index @k) that hold the model, or 0. */
int policy_env_uniform_depth(const struct policy_env *env, int slot, int k);

/*
 * policy_structured_start() - the best of the structured plans (one
 * template of every type or all but one in proportion to its GPUs, at
 * each TP degree and depth; one pipeline per type) into *@out.  Returns
 * 1 when one fits, 0 when none does; adds what it priced to *@priced.
 */
int policy_structured_start(const struct policy_env *env, int threads,
			    struct policy_candidate *out, long *priced);

/*
 * policy_paired_start() - the best of the paired plans: two templates of
 * one depth whose proportional roundings complement each other (together
 * the proportional pipeline of twice the depth), the first capped at the
 * replicas the pair admits.  Returns 1 with *@out set, 0 when none fits.
 */
int policy_paired_start(const struct policy_env *env, int threads,
			struct policy_candidate *out, long *priced);

/*
 * policy_planner_starts() - with --seed-planners: the plans of the fast
 * search planners (AMP; HexiScale up to 256 GPUs) as candidates; the best
 * replaces *@out when faster, and the best plan as they priced it is
 * kept in *@rawp (never worse than theirs, the caller may return it).
 */
void policy_planner_starts(const struct policy_request *req,
			   const struct policy_env *env, int threads,
			   struct policy_candidate *out,
			   struct costmodel_plan **rawp, long *priced);

/*
 * policy_rollout_starts() - the @max best rollout plans of @tr[0..@n-1]
 * with distinct templates, fastest first (the lowest index among equals),
 * into @out; @ok[k] false skips rollout k.  Returns how many.
 */
int policy_rollout_starts(const struct policy_trace *tr, const bool *ok,
			  int n, struct policy_candidate *out, int max);

/*
 * The candidate plans one planning run has priced, with their throughput
 * (priced.c): a climb that meets a plan again takes its number instead
 * of filling it again.
 */
struct policy_priced_entry {
	size_t key_off, key_len;	/* its key in the key arena */
	double thr;			/* samples/s, once known */
	bool known;			/* priced: thr holds its number */
	int first;			/* while not known: the neighbour of
					   the round that prices it */
};

struct policy_priced {
	uint64_t *slot_hash;		/* [nslots]: 0 empty, else a key's hash */
	int *slot_entry;		/* [nslots]: its entry */
	size_t nslots;
	struct policy_priced_entry *entry;	/* in the order added */
	int nentries, entry_cap;
	uint8_t *keys;			/* the entries' keys, back to back */
	size_t keys_len, keys_cap;
};

void policy_priced_init(struct policy_priced *p);
void policy_priced_fini(struct policy_priced *p);

/*
 * policy_priced_find() - the entry of @x's templates; a new entry (not
 * known, *@added true) when there is none.  Returns its index or -ENOMEM.
 */
int policy_priced_find(struct policy_priced *p, const struct policy_candidate *x,
		       bool *added);

/* A bounded local improvement (improve.c). */
struct policy_climb {
	const struct policy_env *env;
	int threads;
	const struct planner_deadline *dl;
	double work;			/* spent so far, in policy_candidate_work() units */
	long priced;			/* templates filled so far */
	/*
	 * Candidates priced before in this run, shared by every climb that
	 * is given it; NULL: every neighbour is filled.  The work counts a
	 * neighbour whose number is known as if it were filled, so that
	 * the climb goes as far either way.
	 */
	struct policy_priced *priced_set;
	/*
	 * Also the whole-template depth moves (twice as deep, cut in two):
	 * the planner's climb makes them; training's climbs do not, since
	 * policies trained with them were no clear gain (docs/policy.md).
	 */
	bool depth_moves;
	/*
	 * Also, once no other move gains, each stage moved elsewhere in its
	 * template; one that gains is taken and every move comes back.  The
	 * planner's last climb makes them, from its best plan only: in
	 * every climb they take work the other moves need (docs/policy.md).
	 */
	bool order_moves;
};

/*
 * The climb's work from one start at planning time, in
 * policy_candidate_work() units: about a second of CPU on the
 * development machine whatever the cluster and model.  Training climbs
 * its teacher plans as far.
 */
#define POLICY_START_WORK	1600000.0

/* What filling @x costs: per template, the cluster's nodes plus its stages times the layers. */
double policy_candidate_work(const struct policy_env *env,
			     const struct policy_candidate *x);

/*
 * policy_climb_run() - move @cur to its best neighbour while that gains,
 * for at most @max_work more work and a bounded number of rounds.
 */
int policy_climb_run(struct policy_climb *c, struct policy_candidate *cur,
		     double max_work);

/* Move single layers across stage boundaries of *@planp while it gains. */
int policy_layer_moves(const struct policy_env *env,
		       struct costmodel_plan **planp, long *priced,
		       const struct planner_deadline *dl);

/* ---------------------------------------------------------------------
 * Training (train.c).
 * ------------------------------------------------------------------- */

struct policy_train_opts {
	const char *model;
	const char *clusters_dir;	/* evaluation compositions to avoid; may be NULL */
	long episodes;			/* updates of the policy */
	unsigned long seed;
	int threads;
	int compositions;		/* training compositions generated */
	int group;			/* rollouts per composition and update */
	int batch;			/* compositions per update */
	int max_gpus;			/* largest generated composition; 0: 1024 */
	const char *out;
	const char *command;		/* recorded in the metadata */
	bool quiet;
	long checkpoint_every;		/* 0: none */
	const char *init;		/* start from these weights; NULL: random */
	bool no_expert;			/* no climbed plans in the imitation (ablation) */
	bool no_teacher;		/* no climbed structured plans (ablation) */
	long imitation_steps;		/* updates imitating the teachers first */
	bool fit_report;		/* measure how closely the policy builds its targets */
	/* tests: train on these compositions instead of generated ones */
	const struct costmodel_cluster *const *fixed;
	int nfixed;
};

struct policy_train_result {
	double first_mean;		/* mean normalized throughput, first 10% of updates */
	double last_mean;		/* the same, last 10% */
	double best;
	double elapsed_s;
	long distilled;			/* climbed plans that entered the imitation */
	int teachers;			/* compositions with a teacher plan */
	/*
	 * The imitation before the first rollout: the mean negative
	 * log-likelihood per teacher decision in its first window of
	 * updates, its lowest window (ending at update
	 * imitation_lowest_update) and its last (windows: 0, no imitation),
	 * and the times a rising loss took it back to the lowest window's
	 * weights.
	 */
	int imitation_windows;
	double imitation_first, imitation_lowest, imitation_last;
	long imitation_lowest_update;
	int imitation_rollbacks;
	/*
	 * With opts->fit_report, on the training compositions, against each
	 * one's best replay entry (its teacher plan unless a rollout or a
	 * climb passed it): the share of the entry's decisions where the
	 * policy's argmax is the entry's, per head; of entries matched in
	 * every decision; of compositions where the greedy construction,
	 * and the best of the planner's POLICY_BATCH, reach the entry's
	 * samples/s, with the geometric mean of theirs over the entry's.
	 */
	int fit_compositions;
	double fit_decisions[POLICY_NUM_HEADS];
	double fit_whole;
	double fit_greedy, fit_greedy_gmean;
	double fit_best, fit_best_gmean;
};

int policy_train(const struct costmodel *cm, const struct policy_train_opts *opts,
		 struct policy_train_result *res);

/* Training and tests: a random composition of the model's profiled types. */
struct policy_compose_opts {
	int min_types, max_types;
	int min_gpus, max_gpus;
};

struct costmodel_cluster *policy_compose_random(const struct costmodel *cm,
						struct policy_rng *rng,
						const struct policy_compose_opts *o);
void policy_compose_free(struct costmodel_cluster *cl);
/* True when @a and @b hold the same node multiset (type, GPUs a node). */
bool policy_compose_equal(const struct costmodel_cluster *a,
			  const struct costmodel_cluster *b);

#endif /* AR_ARACHNE_PRIVATE_H */
