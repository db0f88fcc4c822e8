/*
 * gpt.h - arachne-gpt, the project's reference trainer: a GPT-2-style
 * decoder in FP32 on the CPU (CBLAS) that executes an Arachne plan exactly
 * under MPI (tensor parallelism inside a stage, pipelines of uneven stages
 * in 1F1B, several templates, data parallelism over every replica that
 * holds a layer) and moves its live state through libarachne-migrate when
 * the plan changes.  docs/gpt.md explains the design; arachne-gpt(1) the
 * command.
 *
 * Internal to the program.  It uses only the public API of costmodel.h
 * and migrate.h (and ar_errmsg()), as a framework integrating Arachne
 * would.
 */
#ifndef AR_GPT_H
#define AR_GPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <mpi.h>

#include "costmodel.h"
#include "migrate.h"

/* ---------------------------------------------------------------------
 * The model.
 *
 * Layers follow the cost model's list: 0 is the embedding (token and
 * position), 1..L the blocks, L + 1 the head (final LayerNorm and the LM
 * head tied to the token embedding, with the loss).
 *
 * TP units.  Every layer's parameters are cut into U equal units, U the
 * largest TP degree the model admits (4 heads: U = 4).  A TP group of t
 * GPUs gives rank k the units [k U / t, (k + 1) U / t).  Unit u holds its
 * slice of every sharded matrix (heads u H / U.. of the QKV rows, the
 * matching input columns of the attention projection, a quarter of the
 * MLP's hidden units, a quarter of the vocabulary) and the u-th slice of
 * every replicated vector (LayerNorm, row-parallel biases, position
 * embedding).  A unit is the grain of everything: products run one unit at
 * a time, so a row computes the same bits at any TP degree, and the state
 * of a layer laid out unit after unit is what libarachne-migrate shards:
 * TP rank k of t holds bytes [B k / t, B (k + 1) / t) of each tensor.
 * ------------------------------------------------------------------- */

#define GPT_MAX_UNITS	COSTMODEL_MAX_TP

enum gpt_layer_kind {
	GPT_EMBED,
	GPT_BLOCK,
	GPT_HEAD,
	GPT_NUM_KINDS
};

/* The parameters of each kind, in the order a unit stores them. */
enum gpt_param {
	P_WTE,			/* embed: token embedding rows (Vu, C) */
	P_WPE,			/* embed: position embedding, replicated (T, C) */
	P_QKVW,			/* block: (3 Cu, C) query, key, value rows */
	P_QKVB,			/* block: (3 Cu) */
	P_ATTPROJW,		/* block: (C, Cu) attention projection columns */
	P_FCW,			/* block: (Fu, C) MLP input rows */
	P_FCB,			/* block: (Fu) */
	P_FCPROJW,		/* block: (C, Fu) MLP output columns */
	P_LN1W,			/* block, replicated (C) */
	P_LN1B,
	P_ATTPROJB,
	P_LN2W,
	P_LN2B,
	P_FCPROJB,
	P_HEAD_WTE,		/* head: its copy of the token embedding (Vu, C) */
	P_LNFW,			/* head, replicated (C) */
	P_LNFB,
	GPT_NUM_PARAMS
};

struct gpt_config {
	int blocks;		/* L */
	int nlayers;		/* L + 2 */
	int C, NH, hd, F, V, T;
	int U;			/* TP units */
	int Cu, Fu, Vu, hu;	/* per unit: C / U, F / U, V / U, heads / U */
	int global_batch;	/* the model's default */
	/* per parameter: floats in one unit, offset in the unit */
	size_t unit_size[GPT_NUM_PARAMS];
	size_t unit_off[GPT_NUM_PARAMS];
	size_t unit_floats[GPT_NUM_KINDS];	/* one unit of a layer */
	/* per replicated parameter: offset in a layer's full copy */
	size_t rep_off[GPT_NUM_PARAMS];
	size_t rep_floats[GPT_NUM_KINDS];	/* a layer's full copies */
};

struct gpt_param_info {
	const char *name;
	enum gpt_layer_kind kind;
	bool replicated;	/* the whole vector on every TP rank */
	bool decay;		/* AdamW weight decay applies */
};

extern const struct gpt_param_info gpt_params[GPT_NUM_PARAMS];

/*
 * gpt_config_init() - the trainer's configuration for @m (a dense,
 * GELU, multi-head, tied GPT); -AR_EINVAL naming what the trainer cannot
 * run otherwise.
 */
int gpt_config_init(struct gpt_config *cfg, const struct costmodel_model *m);
enum gpt_layer_kind gpt_layer_kind(const struct gpt_config *cfg, int layer);
/* Floats of a unit's optimizer state: m, v and the step counter. */
size_t gpt_optim_floats(const struct gpt_config *cfg, enum gpt_layer_kind k);

/* ---------------------------------------------------------------------
 * A rank's share of the model: layers [first, last], units [u0, u0 + nu).
 *
 * The state buffer is what libarachne-migrate moves, the rank's shards
 * back to back: for each layer, its weights (nu units) then its optimizer
 * state (nu units of m, v and a step counter).  Gradients are FP64
 * accumulators in the same unit layout; the replicated vectors also have a
 * full copy (and full gradients) for the computation.
 * ------------------------------------------------------------------- */

struct gpt_shard {
	int first, last;	/* layers; first > last: none */
	int u0, nu;
	float *state;		/* owned */
	size_t state_floats;
	size_t *w_off, *o_off;	/* per local layer, into state */
	double *grad;		/* owned; per local layer: nu units */
	size_t *g_off;
	float *rep;		/* owned; full replicated vectors per layer */
	double *rep_grad;
	size_t *r_off;
};

int gpt_shard_alloc(struct gpt_shard *sh, const struct gpt_config *cfg,
		    int first, int last, int u0, int nu);
void gpt_shard_free(struct gpt_shard *sh);
bool gpt_shard_has_layer(const struct gpt_shard *sh, int layer);
/* Local unit j's slice of sharded parameter @p of @layer. */
float *gpt_weight(const struct gpt_shard *sh, const struct gpt_config *cfg,
		  int layer, int j, enum gpt_param p);
double *gpt_grad(const struct gpt_shard *sh, const struct gpt_config *cfg,
		 int layer, int j, enum gpt_param p);
/* The full copy of replicated parameter @p of @layer, and its gradient. */
float *gpt_rep(const struct gpt_shard *sh, const struct gpt_config *cfg,
	       int layer, enum gpt_param p);
double *gpt_rep_grad(const struct gpt_shard *sh, const struct gpt_config *cfg,
		     int layer, enum gpt_param p);

/* Initial weights from @seed alone (zero moments, step 0). */
void gpt_shard_init(struct gpt_shard *sh, const struct gpt_config *cfg,
		    uint64_t seed);
void gpt_shard_zero_grad(struct gpt_shard *sh, const struct gpt_config *cfg);
/* Copy the rank's units of the replicated gradients into the unit layout. */
void gpt_shard_rep_grad_to_units(struct gpt_shard *sh,
				 const struct gpt_config *cfg);
/* Copy the rank's own units into the full replicated copies (the other
 * TP ranks' units arrive by gpt_trainer_sync_replicated()). */
void gpt_shard_units_to_rep(struct gpt_shard *sh, const struct gpt_config *cfg);

struct gpt_adamw {
	float lr, beta1, beta2, eps, weight_decay;
};

/* One AdamW step on every unit the rank holds. */
void gpt_shard_adamw(struct gpt_shard *sh, const struct gpt_config *cfg,
		     const struct gpt_adamw *opt);
/* The step counter of the first unit (every unit has the same). */
uint32_t gpt_shard_step(const struct gpt_shard *sh,
			const struct gpt_config *cfg);
/* FNV-1a over the state buffer: the tests compare old and new state. */
uint64_t gpt_shard_checksum(const struct gpt_shard *sh);

/* ---------------------------------------------------------------------
 * Layers (layers.c).  Shapes: N = B * T rows.
 * ------------------------------------------------------------------- */

void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
		       const float *w, const float *b, int N, int C);
void layernorm_backward(float *dinp, double *dw, double *db, const float *dout,
			const float *inp, const float *w, const float *mean,
			const float *rstd, int N, int C);
void matmul_forward(float *out, const float *inp, int ldi, const float *w,
		    const float *b, int N, int IC, int OC);
void matmul_backward_weight(double *dw, double *db, float *scratch,
			    const float *dout, const float *inp, int ldi,
			    int N, int IC, int OC);
void matmul_backward_input(float *dinp, const float *dout, const float *w,
			   int N, int IC, int OC);
void attention_forward(float *out, float *att, const float *qkv, int B, int T,
		       int Cu, int hu);
void attention_backward(float *dqkv, float *scratch, const float *dout,
			const float *qkv, const float *att, int B, int T,
			int Cu, int hu);
void gelu_forward(float *out, const float *inp, size_t n);
void gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void residual_forward(float *out, const float *a, const float *b, size_t n);

/* ---------------------------------------------------------------------
 * Data (data.c): a byte stream; sample s of step k starts at an offset
 * drawn from (seed, k, s) alone.
 * ------------------------------------------------------------------- */

struct gpt_data {
	uint8_t *bytes;		/* owned */
	size_t len;
	char *path;		/* owned */
};

/* The default: a text every Debian system has (base-files). */
#define GPT_DEFAULT_DATA "/usr/share/common-licenses/GPL-3"

int gpt_data_load(struct gpt_data *d, const char *path, int T);
void gpt_data_free(struct gpt_data *d);
/* tokens and targets (T each) of sample @sample of step @step. */
void gpt_data_sample(const struct gpt_data *d, uint64_t seed, long step,
		     int sample, int T, int *tokens, int *targets);

/* splitmix64: the counter-based generator of the weights and the data. */
uint64_t gpt_mix64(uint64_t x);

/* ---------------------------------------------------------------------
 * The plan as the trainer runs it (roles.c).
 * ------------------------------------------------------------------- */

struct gpt_stage_info {
	int tp;
	int first, last;			/* layers */
	int ranks[COSTMODEL_MAX_TP];		/* job ranks, by TP rank */
};

struct gpt_pipe {
	int template, replica;
	int nstages;
	struct gpt_stage_info stages[COSTMODEL_MAX_DEPTH];
	int sample0, samples;		/* its share of the global batch */
	int micro_batches;		/* holding samples */
};

struct gpt_place {
	int pipe;			/* -1: the plan leaves the GPU idle */
	int stage, tp_rank;
};

/*
 * A gradient-synchronization group: the ranks that hold the same units
 * of some layers, whatever their template and TP degree, and the items
 * they sum together.  An item is a range of one unit of one layer, or the
 * token embedding of one unit, which the embedding and the head share.
 */
struct gpt_sync_item {
	int layer;			/* -1: the tied token embedding */
	int unit;
	size_t lo, hi;			/* floats within the unit */
};

struct gpt_sync_group {
	int nmembers;
	int *members;			/* job ranks, ascending */
	int nitems;
	size_t items_cap;
	struct gpt_sync_item *items;
	size_t floats;			/* the items back to back */
	struct gpt_comm *comm;		/* NULL when alone or not a member */
	bool member;
};

struct gpt_plan {
	struct costmodel_plan *plan;	/* owned */
	int mbs, global_batch;
	int npipes;
	struct gpt_pipe *pipes;		/* owned */
	struct gpt_place *place;	/* [job size] */
	int ngroups;
	size_t groups_cap;
	struct gpt_sync_group *groups;	/* owned */
};

struct gpt_job;

bool gpt_group_has(const struct gpt_sync_group *g, int rank);

/*
 * gpt_plan_create() - what every rank needs of @plan: pipelines, each
 * rank's place, each pipeline's share of @global_batch in micro-batches
 * of the plan's size, and the synchronization groups.  No MPI calls.
 */
int gpt_plan_create(const struct gpt_job *job, struct costmodel_plan *plan,
		    struct gpt_plan **gpp);
/* The plan of one process: one stage of TP 1 over every layer. */
int gpt_plan_single(const struct gpt_job *job, int mbs, struct gpt_plan **gpp);
void gpt_plan_free(struct gpt_plan *gp);

/* ---------------------------------------------------------------------
 * The job: every rank, its GPU, and the model.
 * ------------------------------------------------------------------- */

struct gpt_job {
	struct gpt_config cfg;
	const struct costmodel *cm;
	const struct costmodel_cluster *cl;	/* NULL: one process */
	struct gpt_comm *comm;			/* every rank of the job */
	int rank, size;
	int *node_of, *gpu_of;			/* [size]: each rank's GPU */
	bool trace;				/* log communicators (tests) */
};

/* Job rank of GPU (@node, @gpu), or -1. */
int gpt_job_rank_of(const struct gpt_job *job, int node, int gpu);

/* ---------------------------------------------------------------------
 * The trainer of one rank under one plan (step.c).
 * ------------------------------------------------------------------- */

struct gpt_acts;

struct gpt_trainer {
	const struct gpt_job *job;
	struct gpt_plan *gp;		/* borrowed */
	struct gpt_place me;
	const struct gpt_pipe *pipe;	/* NULL: idle */
	const struct gpt_stage_info *stage;
	int tp, tp_rank;
	struct gpt_comm *tp_comm;	/* NULL at TP 1 */
	struct gpt_shard shard;
	/* micro-batch slots: activations of the micro-batches in flight */
	int nslots;
	struct gpt_acts *slots;
	void *scratch;
	struct gpt_req *reqs;		/* [slot][direction][peer]: sends */
	int *nreqs;			/* [slot][direction] */
	float *drecv;			/* a gradient from the next stage */
	double **sync_buf;		/* [group]: its items, packed */
	uint64_t seed;
	struct gpt_adamw opt;
	/* loss of the last step: its sum on this pipeline's last stage */
	double loss_sum;
};

int gpt_trainer_create(struct gpt_trainer *tr, const struct gpt_job *job,
		       struct gpt_plan *gp, uint64_t seed,
		       const struct gpt_adamw *opt);
void gpt_trainer_destroy(struct gpt_trainer *tr);
/* Communicators of the plan's groups this rank is in (collective over
 * each group's members only). */
int gpt_trainer_comms(struct gpt_trainer *tr);
/* One training step (step counts from 1); -errno / -AR_E* on failure. */
int gpt_trainer_step(struct gpt_trainer *tr, const struct gpt_data *data,
		     long step);
/* After new weights arrived: the full replicated copies from the units. */
int gpt_trainer_sync_replicated(struct gpt_trainer *tr);
/*
 * The loss of step @step on the reporter (job rank 0), from every
 * pipeline's last stage; other ranks send theirs.  *@loss is set on the
 * reporter only.
 */
int gpt_trainer_report(struct gpt_trainer *tr, double *loss);

/* Forward and backward of one micro-batch on this rank's stage (model.c). */
struct gpt_acts *gpt_acts_alloc(const struct gpt_trainer *tr, int nslots);
void gpt_acts_free(struct gpt_acts *a, int nslots);
struct gpt_acts *gpt_acts_slot(struct gpt_acts *a, int slot);
void *gpt_scratch_alloc(const struct gpt_trainer *tr);
float *gpt_acts_input(struct gpt_acts *a);
float *gpt_acts_output(struct gpt_acts *a, const struct gpt_trainer *tr);
float *gpt_acts_dinput(struct gpt_acts *a);
void gpt_scratch_free(void *scratch);
/* The micro-batch of samples [@sample0, @sample0 + @B) of step @step. */
void gpt_acts_set_batch(struct gpt_acts *a, const struct gpt_trainer *tr,
			const struct gpt_data *data, long step, int sample0,
			int B);
/* Its loss summed over its tokens (after the forward on the last stage). */
double gpt_acts_loss(const struct gpt_acts *a);
/* Its input tokens (B, T), and the probabilities the head computed for
 * the rank's first vocabulary unit (B, T, Vu): for the tests. */
int *gpt_acts_tokens(struct gpt_acts *a);
float *gpt_acts_probs(struct gpt_acts *a);
void gpt_stage_forward(struct gpt_trainer *tr, struct gpt_acts *a);
/* @dout: gradient of the stage's output (NULL on the last stage). */
void gpt_stage_backward(struct gpt_trainer *tr, struct gpt_acts *a,
			const float *dout);

/* ---------------------------------------------------------------------
 * Communicators (comm.c): MPI's when one launch started every rank, or
 * the job's own over TCP when several did (two Slurm allocations) and met
 * through a rendezvous.  Ranks are a communicator's own, 0 .. size - 1.
 * Every wait sleeps rather than spins.  Over TCP a peer that ends ends
 * the rank with the reason, which ends its own peers' waits.
 * ------------------------------------------------------------------- */

enum gpt_dtype { GPT_BYTE, GPT_LONG, GPT_FLOAT, GPT_DOUBLE };
enum gpt_op { GPT_SUM, GPT_MAX };

struct gpt_comm;			/* opaque */
struct gpt_net;
struct net_msg;

struct gpt_req {
	MPI_Request mpi;		/* MPI_REQUEST_NULL over TCP */
	struct gpt_net *net;		/* over TCP: the send in flight */
	struct net_msg *send;
	int peer;
};

/* A duplicate of @parent. */
int gpt_comm_mpi(MPI_Comm parent, struct gpt_comm **cp);
/* Collective over @o->size processes: meet in @o->dir, connect each pair. */
int gpt_comm_tcp(const struct migrate_rdzv_opts *o, struct gpt_comm **cp);
/* Made by the @n members alone, @ranks of @parent in their order; @tag
 * tells apart the communicators made at the same time. */
int gpt_comm_sub(struct gpt_comm *parent, const int *ranks, int n, int tag,
		 struct gpt_comm **cp);
void gpt_comm_free(struct gpt_comm *c);
int gpt_comm_rank(const struct gpt_comm *c);
int gpt_comm_size(const struct gpt_comm *c);
/* The rendezvous directory of a TCP world, or NULL over MPI. */
const char *gpt_comm_tcp_dir(const struct gpt_comm *c);
/* MPI's communicator, or MPI_COMM_NULL over TCP. */
MPI_Comm gpt_comm_mpi_of(const struct gpt_comm *c);
/* Ends the job: MPI_Abort, or this rank's end, which its peers see. */
void gpt_comm_abort(struct gpt_comm *c) __attribute__((noreturn));

void gpt_isend(struct gpt_comm *c, const void *buf, size_t count,
	       enum gpt_dtype t, int dst, int tag, struct gpt_req *req);
void gpt_waitall(int n, struct gpt_req *reqs);
void gpt_send(struct gpt_comm *c, const void *buf, size_t count,
	      enum gpt_dtype t, int dst, int tag);
void gpt_recv(struct gpt_comm *c, void *buf, size_t count, enum gpt_dtype t,
	      int src, int tag);
void gpt_allreduce(struct gpt_comm *c, void *buf, size_t count,
		   enum gpt_dtype t, enum gpt_op op);
void gpt_iallreduce(struct gpt_comm *c, void *buf, size_t count,
		    enum gpt_dtype t, enum gpt_op op, struct gpt_req *req);
void gpt_allgather(struct gpt_comm *c, const void *send, size_t count,
		   enum gpt_dtype t, void *recv);
void gpt_bcast(struct gpt_comm *c, void *buf, size_t count, enum gpt_dtype t,
	       int root);
void gpt_barrier(struct gpt_comm *c);

/* ---------------------------------------------------------------------
 * Checkpoints (ckpt.c): DIR/rank-NODE-GPU.bin, one per rank with state.
 * ------------------------------------------------------------------- */

/* Write @tr's state after step @step, atomically (a rank without state
 * writes nothing). */
int gpt_ckpt_save(const struct gpt_trainer *tr, const char *dir, long step);
/*
 * Read @tr's state from its file in @dir; *@stepp is the step it was
 * written after (-1 for a rank without state).  The file must hold this
 * rank's layers and units of the plan.
 */
int gpt_ckpt_load(struct gpt_trainer *tr, const char *dir, long *stepp);
/* A rank left without state by a migration removes its file of @dir. */
int gpt_ckpt_drop(const struct gpt_trainer *tr, const char *dir);
/*
 * DIR/generation: the plan generation @dir's files are in (0: none) on
 * its first line, and on the second "step S", the step they were written
 * after (0 when the line is missing).  When the files were just moved to
 * a pending generation, a third line "op OP" names its change (@op; NULL
 * otherwise): a job's script that finds the change committed by another
 * allocation can say which change is done.
 */
int gpt_ckpt_mark(const char *dir, unsigned gen, long step, const char *op);
int gpt_ckpt_marked(const char *dir, unsigned *genp, long *stepp);

/* ---------------------------------------------------------------------
 * An elastic job's plan directory (plandir.c, docs/elastic.md).
 * Collective: rank 0 reads DIR/state.json and broadcasts what it found.
 * ------------------------------------------------------------------- */

/*
 * The generation the job's state is in (*@genp) and its composition
 * (*@clusterp, a cluster JSON), given the generation @mark the
 * checkpoint is in (0: none); a change pending from it, that the state
 * has yet to move to: its generation (*@pendingp, 0: none) and
 * composition (*@pending_clusterp, NULL: none).
 */
int gpt_plandir_start(const struct gpt_job *job, const char *dir,
		      unsigned mark, unsigned *genp, json_t **clusterp,
		      unsigned *pendingp, json_t **pending_clusterp);
/* The generation the state is in now (*@statep), given that the trainer
 * runs @cur; a change pending from @cur: *@nextp its generation (0: none),
 * @op its kind (join, shrink, leave). */
int gpt_plandir_poll(const struct gpt_job *job, const char *dir,
		     unsigned cur, unsigned *statep, unsigned *nextp,
		     char op[16]);
/* DIR/plan.GEN.json into @buf. */
int gpt_plandir_plan(const char *dir, unsigned gen, char *buf, size_t size);
/* Generations @g1 and @g2 have the same plan (each rank reads both). */
bool gpt_plandir_same(const char *dir, unsigned g1, unsigned g2);

/* ---------------------------------------------------------------------
 * Live migration (live.c).
 * ------------------------------------------------------------------- */

struct gpt_live_opts {
	double timeout_s;		/* migrate_run()'s; 0: 60 s */
	bool verbose;
};

/* The rendezvous every rank of @m meets at over TCP: named after the
 * migration itself (a hash of its JSON), the same in every launch. */
int gpt_live_meeting(const struct migrate *m, char *name, size_t size);

/* The trainer's state as libarachne-migrate lays it out. */
int gpt_live_layout(const struct gpt_config *cfg,
		    struct migrate_layout **layoutp);

/*
 * gpt_live_migrate() - after step @step, move @tr's state to its place in
 * @new_gp and make @tr the trainer of @new_gp.  Collective over the ranks
 * that hold state in either plan.  On failure @tr still holds the old
 * state, unchanged, and the reason is in ar_errmsg().
 */
int gpt_live_migrate(const struct gpt_job *job, struct gpt_trainer *tr,
		     struct gpt_plan *new_gp, long step,
		     const struct gpt_live_opts *o);

#endif /* AR_GPT_H */
