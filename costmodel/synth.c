/*
 * synth.c - analytic layer profiles: the work of each layer type written
 * out as GEMMs, attention kernels, memory-bound passes and TP collectives,
 * priced from FLOPs and bytes with an efficiency that falls for small
 * matrix products.  docs/profiles.md documents the model; the shipped
 * profiles/layers/MODEL/GPU.ini files are this file's output.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define AR_INTERNAL
#include "ar.h"
#include "costmodel.h"
#include "synth.h"

static const int synth_tp_degrees[COSTMODEL_NUM_TP] = { 1, 2, 4, 8 };
static const int synth_mbs_sizes[COSTMODEL_NUM_MBS] = { 1, 2, 4, 8, 16 };

static const char *const synth_type_names[COSTMODEL_NUM_LAYER_TYPES] = {
	[COSTMODEL_LAYER_EMBED] = "embed",
	[COSTMODEL_LAYER_BLOCK] = "block",
	[COSTMODEL_LAYER_ATTN] = "attn",
	[COSTMODEL_LAYER_EXPERT] = "expert",
	[COSTMODEL_LAYER_HEAD] = "head",
};

const char *costmodel_synth_type_name(enum costmodel_layer_type type)
{
	if ((int)type < 0 || type >= COSTMODEL_NUM_LAYER_TYPES)
		return NULL;
	return synth_type_names[type];
}

static bool model_is_moe(const struct costmodel_model *model)
{
	return model->experts > 0;
}

static bool model_is_mla(const struct costmodel_model *model)
{
	return model->kv_lora_rank > 0;
}

bool costmodel_synth_has_type(const struct costmodel_model *model,
			      enum costmodel_layer_type type)
{
	switch (type) {
	case COSTMODEL_LAYER_EMBED:
	case COSTMODEL_LAYER_HEAD:
		return true;
	case COSTMODEL_LAYER_BLOCK:
		return !model_is_moe(model) || model->dense_layers > 0;
	case COSTMODEL_LAYER_ATTN:
	case COSTMODEL_LAYER_EXPERT:
		return model_is_moe(model);
	default:
		return false;
	}
}

bool costmodel_synth_tp_ok(const struct costmodel_model *model,
			   const struct costmodel_gpu *gpu, int tp)
{
	if (tp != 1 && tp != 2 && tp != 4 && tp != 8)
		return false;
	if (tp > gpu->max_gpus_per_node)
		return false;
	/* Megatron splits attention by whole heads. */
	if (model->heads % tp)
		return false;
	if (!model_is_moe(model) || model->dense_layers > 0)
		if (model->ffn % tp)
			return false;
	if (model_is_moe(model) && model->expert_ffn % tp)
		return false;
	return true;
}

/* ------------------------------------------------------------------
 * Building the operation list.
 * ---------------------------------------------------------------- */

static struct synth_op *op_add(struct synth_layer *ly,
			       enum synth_op_kind kind, const char *what)
{
	struct synth_op *op;

	/* The layer builders below add at most 20 operations. */
	if (ly->nops >= SYNTH_MAX_OPS)
		return NULL;
	op = &ly->ops[ly->nops++];
	memset(op, 0, sizeof(*op));
	op->kind = kind;
	op->what = what;
	return op;
}

static void op_gemm(struct synth_layer *ly, const char *what, double count,
		    double m, double n, double k)
{
	struct synth_op *op = op_add(ly, SYNTH_OP_GEMM, what);

	if (!op)
		return;
	op->count = count;
	op->m = m;
	op->n = n;
	op->k = k;
	ly->fwd_flops += count * 2.0 * m * n * k;
}

static void op_mem(struct synth_layer *ly, const char *what, double bytes)
{
	struct synth_op *op = op_add(ly, SYNTH_OP_MEM, what);

	if (op)
		op->bytes = bytes;
}

/* A norm: Megatron-Core's selective recomputation re-runs it (layernorm). */
static void op_norm(struct synth_layer *ly, const char *what, double bytes)
{
	struct synth_op *op = op_add(ly, SYNTH_OP_MEM, what);

	if (op) {
		op->bytes = bytes;
		op->selective = true;
	}
}

static void op_allreduce(struct synth_layer *ly, const char *what,
			 double bytes)
{
	struct synth_op *op = op_add(ly, SYNTH_OP_ALLREDUCE, what);

	if (op)
		op->bytes = bytes;
}

/*
 * Fused (flash) attention over @batch = micro-batch x local heads, each a
 * causal seq x seq product with query/key width @dqk and value width @dv.
 * FLOPs are counted as Megatron counts them (no discount for the causal
 * mask); @bytes are Q, K and V read and O written once (memory-light).
 */
static void op_attn(struct synth_layer *ly, double batch, double seq,
		    double dqk, double dv, double bytes)
{
	struct synth_op *op = op_add(ly, SYNTH_OP_ATTN, "attention");

	if (!op)
		return;
	op->flops = batch * (2.0 * seq * seq * dqk + 2.0 * seq * seq * dv);
	op->bytes = bytes;
	op->attn_batch = batch;
	op->attn_q = seq;
	op->attn_kv = seq;
	op->attn_dqk = dqk;
	op->attn_dv = dv;
	op->selective = true;	/* Megatron-Core's core_attn */
	ly->fwd_flops += op->flops;
}

/* Shared facts about a layer at (tp, mbs). */
struct synth_ctx {
	const struct costmodel_model *model;
	double tp;
	double seq;
	double mbs;
	double tokens;		/* mbs x seq */
	double h;		/* hidden */
	double hq;		/* heads x head_dim, whole model */
	double hkv;		/* kv_heads x head_dim, whole model */
	double hq_local;	/* query width on one GPU of the TP group */
	/* key/value width on one GPU: KV heads replicate when the group
	 * has more GPUs than KV heads */
	double hkv_local;
	double gated_mats;	/* FFN matrices: 3 gated, 2 plain */
};

static void ctx_init(struct synth_ctx *c, const struct costmodel_model *model,
		     int tp, int mbs)
{
	double kv_per_gpu = (double)model->kv_heads / tp;

	memset(c, 0, sizeof(*c));
	c->model = model;
	c->tp = tp;
	c->seq = model->seq_len;
	c->mbs = mbs;
	c->tokens = (double)mbs * model->seq_len;
	c->h = model->hidden;
	c->hq = (double)model->heads * model->head_dim;
	c->hkv = (double)model->kv_heads * model->head_dim;
	c->hq_local = c->hq / tp;
	c->hkv_local = (kv_per_gpu < 1.0 ? 1.0 : kv_per_gpu) * model->head_dim;
	c->gated_mats = model->gated ? 3.0 : 2.0;
}

/* MLA's rotary part of a query/key head: DeepSeek-V3 has 64 of 128. */
static double mla_rope_dim(const struct costmodel_model *model)
{
	return model->head_dim / 2.0;
}

/*
 * Attention with its input norm, TP output all-reduce and residual add.
 * Returns the weight parameters it holds on one GPU.
 */
static double add_attention(struct synth_layer *ly, const struct synth_ctx *c)
{
	const struct costmodel_model *md = c->model;
	double T = c->tokens, h = c->h, tp = c->tp;
	double params;

	op_norm(ly, "attn_norm", T * h * 2 * 2);
	if (model_is_mla(md)) {
		/* DeepSeek-V3's MLA: down-projections replicated, up- and
		 * output projections split by heads. */
		double dn = md->head_dim, dv = md->head_dim;
		double dr = mla_rope_dim(md);
		double qr = md->q_lora_rank, kvr = md->kv_lora_rank;
		double nh = (double)md->heads / tp;

		op_gemm(ly, "q_down", 1, T, qr, h);
		op_norm(ly, "q_norm", T * qr * 2 * 2);
		op_gemm(ly, "q_up", 1, T, nh * (dn + dr), qr);
		op_gemm(ly, "kv_down", 1, T, kvr + dr, h);
		op_norm(ly, "kv_norm", T * kvr * 2 * 2);
		op_gemm(ly, "kv_up", 1, T, nh * (dn + dv), kvr);
		op_mem(ly, "rope", T * (nh * dr + dr) * 2 * 2);
		op_attn(ly, c->mbs * nh, c->seq, dn + dr, dv,
			T * nh * (2 * (dn + dr) + 2 * dv) * 2);
		op_gemm(ly, "attn_out", 1, T, h, nh * dv);
		params = h * qr + qr + h * (kvr + dr) + kvr +
			 (qr * nh * (dn + dr) + kvr * nh * (dn + dv) +
			  nh * dv * h);
	} else {
		double dq = md->head_dim;

		op_gemm(ly, "qkv", 1, T, c->hq_local + 2 * c->hkv_local, h);
		op_mem(ly, "rope", T * (c->hq_local + c->hkv_local) * 2 * 2);
		/* Grouped KV heads are read once per group. */
		op_attn(ly, c->mbs * md->heads / tp, c->seq, dq, dq,
			T * (2 * c->hq_local + 2 * c->hkv_local) * 2);
		op_gemm(ly, "attn_out", 1, T, h, c->hq_local);
		params = h * (c->hq + 2 * c->hkv) / tp + c->hq * h / tp;
	}
	op_allreduce(ly, "attn_allreduce", T * h * 2);
	op_mem(ly, "attn_residual", T * h * 2 * 3);
	return params + h;	/* + the norm's weight */
}

/*
 * A TP-split FFN of width @f (column-parallel up, row-parallel down) with
 * its output all-reduce; @norm adds the input norm and residual add.
 */
static double add_ffn(struct synth_layer *ly, const struct synth_ctx *c,
		      double f, bool norm)
{
	double T = c->tokens, h = c->h, tp = c->tp;
	double up = (c->gated_mats - 1) * f / tp;

	if (norm)
		op_norm(ly, "ffn_norm", T * h * 2 * 2);
	op_gemm(ly, "ffn_up", 1, T, up, h);
	/* SwiGLU reads gate and up, writes one; GELU reads and writes one. */
	op_mem(ly, "ffn_act", T * (f / tp) * 2 * c->gated_mats);
	op_gemm(ly, "ffn_down", 1, T, h, f / tp);
	op_allreduce(ly, "ffn_allreduce", T * h * 2);
	if (norm)
		op_mem(ly, "ffn_residual", T * h * 2 * 3);
	return c->gated_mats * h * f / tp + (norm ? h : 0);
}

/* Attention-side activations (bytes per token) kept for the backward. */
static double attn_act_per_token(const struct synth_ctx *c)
{
	const struct costmodel_model *md = c->model;
	double h = c->h, tp = c->tp;

	/* Korthikanti et al. with flash attention and sequence parallelism:
	 * 5h (norm input, QKV input, dropout mask) sharded along the
	 * sequence, and Q, K, V and the output projection's input split by
	 * heads, all over the group.  MLA's compressed latents come from
	 * replicated down-projections and stay replicated. */
	if (model_is_mla(md)) {
		double nh = md->heads, dn = md->head_dim, dv = md->head_dim;
		double dr = mla_rope_dim(md);

		return 5 * h / tp + 2 * (md->q_lora_rank + md->kv_lora_rank + dr) +
		       2 * nh * (2 * (dn + dr) + 2 * dv) / tp;
	}
	return 5 * h / tp + 4 * (c->hq + c->hkv) / tp;
}

/* FFN activations per token: the up projection's output and the
 * activation's output (SwiGLU) or the GELU input and the down input. */
static double ffn_act_per_token(const struct synth_ctx *c, double f)
{
	return (c->model->gated ? 6.0 : 4.0) * f / c->tp;
}

/*
 * What selective recomputation frees per token of an attention block: the
 * two norms' outputs it re-runs (the QKV and the FFN or router inputs, 2h
 * each, replicated over the group; MLA's latent norms too) and the
 * attention core's output (the output projection's input).
 */
static double attn_selective_saving(const struct synth_ctx *c)
{
	const struct costmodel_model *md = c->model;
	double saved = (2 * c->h + 2 * c->h + 2 * c->hq) / c->tp;

	if (model_is_mla(md))
		saved += 2.0 * (md->q_lora_rank + md->kv_lora_rank);
	return saved;
}

static void describe_block(struct synth_layer *ly, const struct synth_ctx *c)
{
	const struct costmodel_model *md = c->model;
	double T = c->tokens, h = c->h;
	double params;

	params = add_attention(ly, c);
	params += add_ffn(ly, c, md->ffn, true);
	ly->bwd_allreduces = 2;
	ly->bwd_allreduce_bytes = T * h * 2;
	/* Korthikanti et al. (2205.05198), flash attention and sequence
	 * parallelism: s*b*h*34/t; full recompute keeps the input, sharded
	 * along the sequence. */
	ly->act_bytes = T * h * 34 / c->tp;
	ly->act_bytes_recompute[COSTMODEL_RECOMPUTE_SELECTIVE] =
		ly->act_bytes - T * attn_selective_saving(c);
	ly->act_bytes_recompute[COSTMODEL_RECOMPUTE_FULL] = 2 * T * h / c->tp;
	ly->full_recompute = true;
	ly->param_bytes = 2 * params;
}

static void describe_attn(struct synth_layer *ly, const struct synth_ctx *c)
{
	const struct costmodel_model *md = c->model;
	double T = c->tokens, h = c->h, E = md->experts;
	double fs = (double)md->shared_experts * md->expert_ffn;
	double params;

	params = add_attention(ly, c);
	op_norm(ly, "moe_norm", T * h * 2 * 2);
	/* The router is replicated over the group. */
	op_gemm(ly, "router", 1, T, E, h);
	op_mem(ly, "router_topk", T * E * 4 * 2);
	params += h + h * E;
	if (fs > 0)
		params += add_ffn(ly, c, fs, false);
	op_mem(ly, "moe_residual", T * h * 2 * 3);

	ly->bwd_allreduces = fs > 0 ? 2 : 1;
	ly->bwd_allreduce_bytes = T * h * 2;
	/* Attention; then the MoE norm input, the router/expert input and a
	 * dropout mask (5h, sharded along the sequence); the FP32 router
	 * scores; the shared experts.  Full recomputation keeps the block's
	 * input. */
	ly->act_bytes = T * (attn_act_per_token(c) + 5 * h / c->tp + 4 * E +
			     ffn_act_per_token(c, fs));
	ly->act_bytes_recompute[COSTMODEL_RECOMPUTE_SELECTIVE] =
		ly->act_bytes - T * attn_selective_saving(c);
	ly->act_bytes_recompute[COSTMODEL_RECOMPUTE_FULL] = 2 * T * h / c->tp;
	ly->full_recompute = true;
	ly->param_bytes = 2 * params;
}

static void describe_expert(struct synth_layer *ly, const struct synth_ctx *c)
{
	const struct costmodel_model *md = c->model;
	double T = c->tokens, h = c->h, tp = c->tp, E = md->experts;
	double ef = md->expert_ffn;
	double slots = T * md->top_k;
	double m = slots / E < 1 ? 1 : slots / E;
	struct synth_op *act;

	/* Every expert on this GPU, sliced tp ways; tokens spread evenly.
	 * Each GEMM is a grouped GEMM: E products, one launch. */
	op_mem(ly, "permute", slots * h * 2 * 2);
	op_gemm(ly, "expert_up", E, m, (c->gated_mats - 1) * ef / tp, h);
	act = op_add(ly, SYNTH_OP_MEM, "expert_act");
	if (act) {
		act->bytes = slots * (ef / tp) * 2 * c->gated_mats;
		act->selective = true;	/* Megatron-Core's moe_act */
	}
	op_gemm(ly, "expert_down", E, m, h, ef / tp);
	op_allreduce(ly, "etp_allreduce", slots * h * 2);
	op_allreduce(ly, "etp_allreduce", slots * h * 2);
	op_mem(ly, "unpermute", slots * h * 2 * 2 + T * h * 2);

	ly->bwd_allreduces = 2;
	ly->bwd_allreduce_bytes = slots * h * 2;
	/* Per slot: the dispatched input and the FFN's activations; selective
	 * recomputation drops the activation's output (the down projection's
	 * input), full keeps nothing here (the attn entry keeps the block's
	 * input). */
	ly->act_bytes = slots * (2 * h + ffn_act_per_token(c, ef));
	ly->act_bytes_recompute[COSTMODEL_RECOMPUTE_SELECTIVE] =
		ly->act_bytes - slots * 2 * ef / tp;
	ly->act_bytes_recompute[COSTMODEL_RECOMPUTE_FULL] = 0;
	ly->full_recompute = true;
	ly->param_bytes = E * c->gated_mats * h * ef * 2 / tp;
}

static double vocab_local(const struct synth_ctx *c)
{
	return ceil(c->model->vocab / c->tp);
}

static void describe_embed(struct synth_layer *ly, const struct synth_ctx *c)
{
	double T = c->tokens, h = c->h;

	/* Gather rows of the vocab-parallel table; the group sums the
	 * partial rows.  Token ids (int64) are all the layer keeps. */
	op_mem(ly, "embed_gather", T * h * 2 * 2 + T * 8);
	op_allreduce(ly, "embed_allreduce", T * h * 2);
	ly->bwd_allreduces = 0;
	ly->act_bytes = T * 8;
	ly->param_bytes = vocab_local(c) * h * 2;
}

static void describe_head(struct synth_layer *ly, const struct synth_ctx *c)
{
	double T = c->tokens, h = c->h, V = vocab_local(c);

	op_mem(ly, "final_norm", T * h * 2 * 2);
	op_gemm(ly, "lm_head", 1, T, V, h);
	/* Vocab-parallel cross-entropy: BF16 logits read, FP32 softmax
	 * written and read back; three small all-reduces (max, sum, the
	 * target logit) over the group. */
	op_mem(ly, "cross_entropy", T * V * (2 + 4 + 4));
	op_allreduce(ly, "ce_max", T * 4);
	op_allreduce(ly, "ce_sum", T * 4);
	op_allreduce(ly, "ce_target", T * 4);
	/* The column-parallel head's input gradient is summed backward. */
	ly->bwd_allreduces = 1;
	ly->bwd_allreduce_bytes = T * h * 2;
	/* The FP32 softmax the loss keeps for its gradient (Megatron-Core's
	 * vocab-parallel cross-entropy takes the exponent in place on the
	 * FP32 logits and saves that one buffer); the norm's and the head's
	 * inputs. */
	ly->act_bytes = T * V * 4 + T * h * 2 * 2;
	ly->param_bytes = V * h * 2 + h * 2;
}

int costmodel_synth_describe(const struct costmodel_model *model,
			     const struct costmodel_gpu *gpu, int tp, int mbs,
			     enum costmodel_layer_type type,
			     struct synth_layer *ly)
{
	struct synth_ctx c;

	memset(ly, 0, sizeof(*ly));
	if (!costmodel_synth_has_type(model, type))
		return ar_seterr(-AR_ENOTFOUND, "model %s has no %s layers",
				 model->name,
				 costmodel_synth_type_name(type) ?: "such");
	if (!costmodel_synth_tp_ok(model, gpu, tp))
		return ar_seterr(-AR_ENOTFOUND,
				 "model %s cannot run at TP %d on %s (heads %d, node size %d)",
				 model->name, tp, gpu->name, model->heads,
				 gpu->max_gpus_per_node);
	if (mbs < 1 || model->seq_len < 1)
		return ar_seterr(-AR_EINVAL,
				 "micro-batch %d and sequence length %d must be positive",
				 mbs, model->seq_len);
	ctx_init(&c, model, tp, mbs);
	switch (type) {
	case COSTMODEL_LAYER_EMBED:
		describe_embed(ly, &c);
		break;
	case COSTMODEL_LAYER_BLOCK:
		describe_block(ly, &c);
		break;
	case COSTMODEL_LAYER_ATTN:
		describe_attn(ly, &c);
		break;
	case COSTMODEL_LAYER_EXPERT:
		describe_expert(ly, &c);
		break;
	case COSTMODEL_LAYER_HEAD:
		describe_head(ly, &c);
		break;
	default:
		return ar_seterr(-AR_EINVAL, "layer type %d out of range",
				 (int)type);
	}
	return 0;
}

/* ------------------------------------------------------------------
 * Pricing.
 * ---------------------------------------------------------------- */

/* Compute time at an efficiency that saturates with the work: reaching
 * half of @eff_max takes F_half = peak x SYNTH_GEMM_HALF_S FLOPs. */
static double compute_s(const struct costmodel_gpu *gpu, double flops,
			double eff_max)
{
	double peak = gpu->peak_tflops * 1e12;
	double f_half = peak * SYNTH_GEMM_HALF_S;
	double sat = flops / (flops + f_half);

	if (flops <= 0)
		return 0;
	return flops / (peak * eff_max * sat);
}

static double memory_s(const struct costmodel_gpu *gpu, double bytes)
{
	return bytes / (gpu->hbm_GBps * 1e9 * SYNTH_HBM_EFF);
}

/* One m x n x k product without its launch: the slower of compute and
 * the BF16 traffic of both inputs and the output. */
static double gemm_core_s(const struct costmodel_gpu *gpu, double m,
			  double n, double k)
{
	double flops = 2.0 * m * n * k;
	double bytes = 2.0 * (m * k + k * n + m * n);

	return fmax(compute_s(gpu, flops, SYNTH_GEMM_EFF_MAX),
		    memory_s(gpu, bytes));
}

double costmodel_synth_gemm_s(const struct costmodel_gpu *gpu, double m,
			      double n, double k)
{
	return gemm_core_s(gpu, m, n, k) + SYNTH_LAUNCH_S;
}

/*
 * A grouped GEMM (the routed experts): @count products of m x n x k in one
 * kernel.  The group saturates the GPU as one GEMM of all its FLOPs would,
 * but every product pads its @m rows to whole tiles of SYNTH_GROUP_TILE_M:
 * an expert that receives few tokens wastes the rest of its tile.  Every
 * product's weights are read once.
 */
static double grouped_gemm_core_s(const struct costmodel_gpu *gpu,
				  double count, double m, double n, double k)
{
	double tiles = ceil(m / SYNTH_GROUP_TILE_M);
	double padded = tiles * SYNTH_GROUP_TILE_M;
	double flops = count * 2.0 * padded * n * k;
	double bytes = count * 2.0 * (m * k + k * n + m * n);

	return fmax(compute_s(gpu, flops, SYNTH_GEMM_EFF_MAX),
		    memory_s(gpu, bytes));
}

double costmodel_synth_allreduce_s(const struct costmodel_gpu *gpu,
				   double bytes, int tp)
{
	double link = gpu->intra_node_GBps * 1e9 * SYNTH_LINK_EFF;

	if (tp <= 1)
		return 0;
	return 2.0 * (tp - 1) / tp * bytes / link +
	       2.0 * (tp - 1) * SYNTH_HOP_LATENCY_S;
}

double costmodel_synth_op_s(const struct costmodel_gpu *gpu,
			    const struct synth_op *op, int tp)
{
	switch (op->kind) {
	case SYNTH_OP_GEMM:
		if (op->count > 1)
			return grouped_gemm_core_s(gpu, op->count, op->m,
						   op->n, op->k) +
			       SYNTH_LAUNCH_S;
		return gemm_core_s(gpu, op->m, op->n, op->k) + SYNTH_LAUNCH_S;
	case SYNTH_OP_ATTN:
		return fmax(compute_s(gpu, op->flops, SYNTH_ATTN_EFF_MAX),
			    memory_s(gpu, op->bytes)) + SYNTH_LAUNCH_S;
	case SYNTH_OP_MEM:
		return memory_s(gpu, op->bytes) + SYNTH_LAUNCH_S;
	case SYNTH_OP_ALLREDUCE:
		return costmodel_synth_allreduce_s(gpu, op->bytes, tp);
	}
	return 0;
}

void costmodel_synth_entry(const struct synth_layer *ly, const double *op_fwd_s,
			   const double *op_bwd_s, double bwd_comm_s,
			   struct costmodel_layer_profile *prof)
{
	double fwd = 0, bwd = 0, fwd_comm = 0, attn_fwd = 0, attn_bwd = 0;
	double selective = 0;

	for (int i = 0; i < ly->nops; i++) {
		const struct synth_op *op = &ly->ops[i];
		double f = op_fwd_s[i], b = op_bwd_s ? op_bwd_s[i] : 2 * f;

		if (op->kind == SYNTH_OP_ALLREDUCE) {
			fwd_comm += f;
			continue;
		}
		fwd += f;
		bwd += b;
		if (op->kind == SYNTH_OP_ATTN) {
			attn_fwd += f;
			attn_bwd += b;
		}
		if (op->selective)
			selective += f;
	}
	memset(prof, 0, sizeof(*prof));
	prof->fwd_ms = fwd * 1e3;
	prof->bwd_ms = bwd * 1e3;
	prof->comm_ms = (fwd_comm + bwd_comm_s) * 1e3;
	prof->act_bytes = ly->act_bytes;
	prof->param_bytes = ly->param_bytes;
	prof->fwd_attn_ms = attn_fwd * 1e3;
	prof->bwd_attn_ms = attn_bwd * 1e3;
	prof->fwd_comm_ms = fwd_comm * 1e3;
	prof->recompute_act_bytes[COSTMODEL_RECOMPUTE_NONE] = ly->act_bytes;
	if (ly->full_recompute) {
		/* Selective re-runs its marked operations; full the whole
		 * forward with its collectives. */
		prof->recompute_ms[COSTMODEL_RECOMPUTE_SELECTIVE] = selective * 1e3;
		prof->recompute_ms[COSTMODEL_RECOMPUTE_FULL] = (fwd + fwd_comm) * 1e3;
		prof->recompute_act_bytes[COSTMODEL_RECOMPUTE_SELECTIVE] =
			ly->act_bytes_recompute[COSTMODEL_RECOMPUTE_SELECTIVE];
		prof->recompute_act_bytes[COSTMODEL_RECOMPUTE_FULL] =
			ly->act_bytes_recompute[COSTMODEL_RECOMPUTE_FULL];
	} else {
		/* The embedding and the head are never recomputed. */
		prof->recompute_act_bytes[COSTMODEL_RECOMPUTE_SELECTIVE] = ly->act_bytes;
		prof->recompute_act_bytes[COSTMODEL_RECOMPUTE_FULL] = ly->act_bytes;
	}
	prof->present = true;
}

int costmodel_synth_layer(const struct costmodel_model *model,
			  const struct costmodel_gpu *gpu, int tp, int mbs,
			  enum costmodel_layer_type type,
			  struct costmodel_layer_profile *prof)
{
	struct synth_layer ly;
	double op_s[SYNTH_MAX_OPS];
	int rc;

	memset(prof, 0, sizeof(*prof));
	rc = costmodel_synth_describe(model, gpu, tp, mbs, type, &ly);
	if (rc < 0)
		return rc;
	for (int i = 0; i < ly.nops; i++)
		op_s[i] = costmodel_synth_op_s(gpu, &ly.ops[i], tp);
	/* Backward: input and weight gradients, twice the forward's work. */
	costmodel_synth_entry(&ly, op_s, NULL, ly.bwd_allreduces *
			      costmodel_synth_allreduce_s(gpu, ly.bwd_allreduce_bytes, tp),
			      prof);
	return 0;
}

/* ------------------------------------------------------------------
 * The INI format.
 * ---------------------------------------------------------------- */

int costmodel_synth_write_header(FILE *out, const char *comment,
				 const char *model, const char *gpu,
				 const char *source, int seq_len)
{
	fprintf(out, "; %s\n", comment);
	fprintf(out, "[profile]\n");
	fprintf(out, "model = %s\n", model);
	fprintf(out, "gpu = %s\n", gpu);
	fprintf(out, "source = %s\n", source);
	fprintf(out, "seq_len = %d\n", seq_len);
	return ferror(out) ? -EIO : 0;
}

int costmodel_synth_write_entry(FILE *out, int tp, int mbs,
				enum costmodel_layer_type type,
				const struct costmodel_layer_profile *prof)
{
	fprintf(out, "\n[tp%d.mbs%d.%s]\n", tp, mbs,
		costmodel_synth_type_name(type));
	fprintf(out, "fwd_ms = %.6g\n", prof->fwd_ms);
	fprintf(out, "bwd_ms = %.6g\n", prof->bwd_ms);
	fprintf(out, "comm_ms = %.6g\n", prof->comm_ms);
	fprintf(out, "act_bytes = %.0f\n", prof->act_bytes);
	fprintf(out, "param_bytes = %.0f\n", prof->param_bytes);
	fprintf(out, "fwd_attn_ms = %.6g\n", prof->fwd_attn_ms);
	fprintf(out, "bwd_attn_ms = %.6g\n", prof->bwd_attn_ms);
	fprintf(out, "fwd_comm_ms = %.6g\n", prof->fwd_comm_ms);
	fprintf(out, "recompute_selective_ms = %.6g\n",
		prof->recompute_ms[COSTMODEL_RECOMPUTE_SELECTIVE]);
	fprintf(out, "act_bytes_selective = %.0f\n",
		prof->recompute_act_bytes[COSTMODEL_RECOMPUTE_SELECTIVE]);
	fprintf(out, "recompute_full_ms = %.6g\n",
		prof->recompute_ms[COSTMODEL_RECOMPUTE_FULL]);
	fprintf(out, "act_bytes_full = %.0f\n",
		prof->recompute_act_bytes[COSTMODEL_RECOMPUTE_FULL]);
	return ferror(out) ? -EIO : 0;
}

int costmodel_synth_write(const struct costmodel_model *model,
			  const struct costmodel_gpu *gpu, FILE *out)
{
	int rc, i, j, t;

	rc = costmodel_synth_write_header(out,
		"analytic: written by arachne-profile synth from FLOPs and bytes; not measured (docs/profiles.md)",
		model->name, gpu->name, "analytic", model->seq_len);
	if (rc < 0)
		return ar_seterr(rc, "writing the profile of %s on %s: %s",
				 model->name, gpu->name, ar_strerror(rc));
	for (i = 0; i < COSTMODEL_NUM_TP; i++) {
		int tp = synth_tp_degrees[i];

		if (!costmodel_synth_tp_ok(model, gpu, tp))
			continue;
		for (j = 0; j < COSTMODEL_NUM_MBS; j++) {
			for (t = 0; t < COSTMODEL_NUM_LAYER_TYPES; t++) {
				struct costmodel_layer_profile prof;

				if (!costmodel_synth_has_type(model, t))
					continue;
				rc = costmodel_synth_layer(model, gpu, tp,
							   synth_mbs_sizes[j],
							   t, &prof);
				if (rc < 0)
					return rc;
				rc = costmodel_synth_write_entry(out, tp,
							synth_mbs_sizes[j],
							t, &prof);
				if (rc < 0)
					return ar_seterr(rc,
							 "writing the profile of %s on %s: %s",
							 model->name, gpu->name,
							 ar_strerror(rc));
			}
		}
	}
	return 0;
}

int costmodel_synth_profile(const struct costmodel *cm, int gpu, FILE *out)
{
	const struct costmodel_gpu *g;

	if (gpu < 0 || gpu >= costmodel_num_gpus(cm))
		return ar_seterr(-AR_EINVAL, "GPU type index %d out of range",
				 gpu);
	g = costmodel_gpu(cm, gpu);
	return costmodel_synth_write(costmodel_model(cm), g, out);
}
