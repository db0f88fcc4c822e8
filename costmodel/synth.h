/*
 * synth.h - the work of one layer as a list of operations, and its
 * analytic price (synth.c).  Internal to libarachne, arachne-profile and
 * their tests.
 *
 * A layer's forward pass is described once, as the GEMMs, attention
 * kernels, memory-bound passes and TP collectives one GPU of a TP group
 * runs.  synth.c prices that list from FLOPs and bytes; arachne-profile
 * measure times the same list on a GPU.  docs/profiles.md gives the model.
 */
#ifndef AR_COSTMODEL_SYNTH_H
#define AR_COSTMODEL_SYNTH_H

#ifndef AR_INTERNAL
#error "synth.h is internal to libarachne; define AR_INTERNAL"
#endif

#include <stdbool.h>
#include <stdio.h>

#include "costmodel.h"

/*
 * The efficiency model's constants (docs/profiles.md explains each):
 * the best fraction of peak a GEMM reaches; F_half = peak x HALF_S is the
 * work at which a GEMM reaches half of that; flash attention's best
 * fraction of peak (Megatron's FLOP count); the achievable fractions of
 * memory and link bandwidth; one kernel launch; the rows of a grouped
 * GEMM's tile; one step of a ring collective.
 */
#define SYNTH_GEMM_EFF_MAX	0.75
#define SYNTH_GEMM_HALF_S	15e-6
#define SYNTH_ATTN_EFF_MAX	0.45
#define SYNTH_HBM_EFF		0.8
#define SYNTH_LINK_EFF		0.8
#define SYNTH_LAUNCH_S		5e-6
#define SYNTH_GROUP_TILE_M	128
#define SYNTH_HOP_LATENCY_S	5e-6

enum synth_op_kind {
	SYNTH_OP_GEMM,		/* count x (m x n x k), BF16, FP32 sums;
				 * count > 1: one grouped GEMM */
	SYNTH_OP_ATTN,		/* fused attention: flops, bytes */
	SYNTH_OP_MEM,		/* memory-bound pass: bytes in + out */
	SYNTH_OP_ALLREDUCE,	/* ring all-reduce over the TP group */
};

struct synth_op {
	enum synth_op_kind kind;
	const char *what;	/* "qkv", "ffn_up", ... for measure's report */
	/* re-run in the backward under selective recomputation (a norm, the
	 * attention core, the expert activation) */
	bool selective;
	double m, n, k;		/* GEMM shape: (m x k) . (k x n) */
	double count;		/* GEMM: independent GEMMs of that shape */
	double flops;		/* ATTN: FLOPs as Megatron counts them */
	double bytes;		/* ATTN, MEM, ALLREDUCE: bytes moved */
	/* ATTN: the shape measure times (batched QK^T and PV products) */
	double attn_batch, attn_q, attn_kv, attn_dqk, attn_dv;
};

#define SYNTH_MAX_OPS	32

/*
 * The forward work of one layer on one GPU of a TP group of @tp at
 * micro-batch @mbs, and what the layer keeps.  Backward is priced as
 * twice the forward compute; @bwd_allreduces collectives run in the
 * backward pass.  Under recomputation the layer keeps
 * @act_bytes_recompute[mode] instead of @act_bytes and re-runs, in its
 * backward, the operations marked selective (SELECTIVE) or its whole
 * forward with its collectives (FULL, when @full_recompute).
 */
struct synth_layer {
	struct synth_op ops[SYNTH_MAX_OPS];	/* the forward pass */
	int nops;
	int bwd_allreduces;	/* backward collectives, each of: */
	double bwd_allreduce_bytes;
	double act_bytes;	/* activations kept per micro-batch */
	double act_bytes_recompute[COSTMODEL_NUM_RECOMPUTE];
	bool full_recompute;	/* FULL re-runs this layer (not the embedding, head) */
	double param_bytes;	/* BF16 weights on this GPU */
	double fwd_flops;	/* forward FLOPs (tests, MFU) */
};

/*
 * costmodel_synth_entry() - a profile entry from the times of @ly's
 * operations: @op_fwd_s[i] and @op_bwd_s[i] for each (NULL @op_bwd_s:
 * twice the forward), the collectives' forward time in @op_fwd_s and
 * @bwd_comm_s for the backward ones.  Shared by synth and measure so that
 * both derive the attention core, the recomputation and the forward
 * collectives the same way.
 */
void costmodel_synth_entry(const struct synth_layer *ly, const double *op_fwd_s,
			   const double *op_bwd_s, double bwd_comm_s,
			   struct costmodel_layer_profile *prof);

/*
 * costmodel_synth_tp_ok() - whether a TP (for experts: ETP) group of @tp
 * GPUs of @gpu can run @model: @tp is 1, 2, 4 or 8, at most the GPU's node
 * size, divides the attention heads and (MoE) the expert FFN width.
 */
bool costmodel_synth_tp_ok(const struct costmodel_model *model,
			   const struct costmodel_gpu *gpu, int tp);

/* Whether @model's layer list holds layers of @type. */
bool costmodel_synth_has_type(const struct costmodel_model *model,
			      enum costmodel_layer_type type);

/*
 * costmodel_synth_describe() - fill @ly with the work of a layer of @type.
 * Returns 0, or -AR_ENOTFOUND (message set) when the model has no such
 * layer or @tp is not usable (costmodel_synth_tp_ok()).
 */
int costmodel_synth_describe(const struct costmodel_model *model,
			     const struct costmodel_gpu *gpu, int tp, int mbs,
			     enum costmodel_layer_type type,
			     struct synth_layer *ly);

/* Analytic time in seconds of one operation on @gpu over a group of @tp. */
double costmodel_synth_op_s(const struct costmodel_gpu *gpu,
			    const struct synth_op *op, int tp);

/* costmodel_synth_gemm_s() - one m x n x k GEMM, launch included. */
double costmodel_synth_gemm_s(const struct costmodel_gpu *gpu, double m,
			      double n, double k);

/* costmodel_synth_allreduce_s() - ring all-reduce of @bytes over @tp GPUs. */
double costmodel_synth_allreduce_s(const struct costmodel_gpu *gpu,
				   double bytes, int tp);

/*
 * costmodel_synth_layer() - the analytic profile entry of a layer of @type
 * (present = true, measured = false).  Errors as costmodel_synth_describe().
 */
int costmodel_synth_layer(const struct costmodel_model *model,
			  const struct costmodel_gpu *gpu, int tp, int mbs,
			  enum costmodel_layer_type type,
			  struct costmodel_layer_profile *prof);

/* Section name of @type in a layer profile ("block"); NULL if out of range. */
const char *costmodel_synth_type_name(enum costmodel_layer_type type);

/*
 * costmodel_synth_write_header() / _write_entry() - the layer-profile INI
 * format shared by synth and measure: the [profile] section, then one
 * [tpK.mbsB.TYPE] section per entry.
 */
int costmodel_synth_write_header(FILE *out, const char *comment,
				 const char *model, const char *gpu,
				 const char *source, int seq_len);
int costmodel_synth_write_entry(FILE *out, int tp, int mbs,
				enum costmodel_layer_type type,
				const struct costmodel_layer_profile *prof);

/* costmodel_synth_write() - the whole analytic profile of @model on @gpu. */
int costmodel_synth_write(const struct costmodel_model *model,
			  const struct costmodel_gpu *gpu, FILE *out);

#endif /* AR_COSTMODEL_SYNTH_H */
