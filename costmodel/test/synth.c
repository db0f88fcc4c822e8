/*
 * synth.c - the analytic layer profiles against hand calculations, and
 * the properties the planners rely on: more TP means less compute per GPU
 * and more communication, bigger micro-batches and bigger GEMMs run at a
 * higher efficiency, bigger GPUs need bigger GEMMs to saturate.
 *
 * The model and GPU numbers are written out here (not read from
 * profiles/) so that a change to the data cannot hide a change to the
 * formulas; test/shipped.c checks the data.
 */
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ar.h"
#include "costmodel.h"
#include "synth.h"

static const struct costmodel_gpu h100 = {
	.name = "h100", .memory_gib = 80, .peak_tflops = 989,
	.hbm_GBps = 3350, .intra_node_GBps = 450, .network_gbps = 100,
	.max_gpus_per_node = 8, .price_per_hour = 2.99,
};

static const struct costmodel_gpu a100 = {
	.name = "a100-40", .memory_gib = 40, .peak_tflops = 312,
	.hbm_GBps = 1555, .intra_node_GBps = 300, .network_gbps = 100,
	.max_gpus_per_node = 8, .price_per_hour = 1.29,
};

static const struct costmodel_gpu a6000_4 = {
	.name = "a6000", .memory_gib = 48, .peak_tflops = 154.8,
	.hbm_GBps = 768, .intra_node_GBps = 25, .network_gbps = 100,
	.max_gpus_per_node = 4, .price_per_hour = 0.8,
};

static const struct costmodel_model llama3_8b = {
	.name = "llama3-8b", .blocks = 32, .hidden = 4096, .ffn = 14336,
	.heads = 32, .kv_heads = 8, .head_dim = 128, .vocab = 128256,
	.gated = true, .seq_len = 2048, .global_batch = 2048,
	.state_bytes_per_param = 16,
};

static const struct costmodel_model gpt_neo = {
	.name = "gpt-neo-2.7b", .blocks = 32, .hidden = 2560, .ffn = 10240,
	.heads = 20, .kv_heads = 20, .head_dim = 128, .vocab = 50257,
	.gated = false, .tied_embeddings = true, .seq_len = 2048,
	.global_batch = 2048, .state_bytes_per_param = 16,
};

static const struct costmodel_model qwen3_64b = {
	.name = "qwen3-64b", .blocks = 128, .hidden = 5120, .ffn = 25600,
	.heads = 64, .kv_heads = 8, .head_dim = 128, .vocab = 151936,
	.gated = true, .seq_len = 2048, .global_batch = 2048,
	.state_bytes_per_param = 16,
};

static const struct costmodel_model deepseek = {
	.name = "deepseek-v3-like", .blocks = 61, .hidden = 7168,
	.ffn = 18432, .heads = 128, .kv_heads = 128, .head_dim = 128,
	.vocab = 129280, .experts = 256, .top_k = 8, .expert_ffn = 2048,
	.shared_experts = 1, .dense_layers = 3, .q_lora_rank = 1536,
	.kv_lora_rank = 512, .gated = true, .seq_len = 2048,
	.global_batch = 2048, .state_bytes_per_param = 16,
};

static const struct costmodel_model mixtral = {
	.name = "mixtral-8x7b", .blocks = 32, .hidden = 4096, .ffn = 14336,
	.heads = 32, .kv_heads = 8, .head_dim = 128, .vocab = 32000,
	.experts = 8, .top_k = 2, .expert_ffn = 14336, .gated = true,
	.seq_len = 2048, .global_batch = 2048, .state_bytes_per_param = 16,
};

#define assert_near(a, b, rel) do {					\
	double a_ = (a), b_ = (b);					\
	if (fabs(a_ - b_) > (rel) * fabs(b_))				\
		fail_msg("%s = %.9g, expected %.9g (within %g)", #a,	\
			 a_, b_, (double)(rel));			\
} while (0)

static struct costmodel_layer_profile entry(const struct costmodel_model *m,
					    const struct costmodel_gpu *g,
					    int tp, int mbs,
					    enum costmodel_layer_type type)
{
	struct costmodel_layer_profile p;

	assert_int_equal(costmodel_synth_layer(m, g, tp, mbs, type, &p), 0);
	assert_true(p.present);
	assert_false(p.measured);
	return p;
}

/* LLaMA-3-8B block FLOPs, activations and weights, by hand. */
static void test_llama_block_counts(void **state)
{
	struct synth_layer ly;
	struct costmodel_layer_profile p;
	double T = 2048, h = 4096, hq = 4096, hkv = 1024, f = 14336, s = 2048;
	double per_token;

	(void)state;
	assert_int_equal(costmodel_synth_describe(&llama3_8b, &h100, 1, 1,
						  COSTMODEL_LAYER_BLOCK, &ly), 0);
	/* QKV 2h(hq + 2hkv) + output 2hq.h + attention 4s.hq + SwiGLU 6h.f */
	per_token = 2 * h * (hq + 2 * hkv) + 2 * hq * h + 4 * s * hq +
		    6 * h * f;
	assert_near(ly.fwd_flops, T * per_token, 1e-12);
	assert_near(ly.fwd_flops, 962072674304.0, 1e-12);

	p = entry(&llama3_8b, &h100, 1, 1, COSTMODEL_LAYER_BLOCK);
	/* s.b.h.34/t = 2048 x 4096 x 34 at t = 1 */
	assert_near(p.act_bytes, 285212672.0, 1e-12);
	/* 2 bytes x (h(hq + 2hkv) + hq.h + 3h.f + two norms 2h) */
	assert_near(p.param_bytes, 436224000.0, 1e-12);
	assert_near(p.comm_ms, 0, 0);

	/* At TP 4 and micro-batch 2: activations s.b.h.34/4 (sequence
	 * parallelism shards the replicated part too), weights split but the
	 * norms replicated. */
	p = entry(&llama3_8b, &h100, 4, 2, COSTMODEL_LAYER_BLOCK);
	assert_near(p.act_bytes, 2048.0 * 2 * 4096 * 34 / 4, 1e-12);
	assert_near(p.param_bytes,
		    2 * ((h * (hq + 2 * hkv) + hq * h + 3 * h * f) / 4 + 2 * h),
		    1e-12);
	/* Backward is twice the forward without recomputation. */
	assert_near(p.bwd_ms, 2 * p.fwd_ms, 1e-12);
}

/* Four ring all-reduces of b.s.h.2 bytes over k = 2 GPUs of an H100 node. */
static void test_llama_tp2_comm(void **state)
{
	struct costmodel_layer_profile p;
	double S = 2048.0 * 4096 * 2;
	double one = 2.0 * 1 / 2 * S / (450e9 * 0.8) + 2 * 1 * 5e-6;

	(void)state;
	p = entry(&llama3_8b, &h100, 2, 1, COSTMODEL_LAYER_BLOCK);
	assert_near(p.comm_ms, 4 * one * 1e3, 1e-9);
	assert_near(p.comm_ms, 0.22641, 1e-4);
	/* k = 8, micro-batch 4: 2.7/8 of four times the bytes, 14 hops */
	p = entry(&llama3_8b, &h100, 8, 4, COSTMODEL_LAYER_BLOCK);
	assert_near(p.comm_ms,
		    4 * (2.0 * 7 / 8 * 4 * S / 360e9 + 14 * 5e-6) * 1e3, 1e-9);
}

/* The GEMM model: saturation for big products, bandwidth for thin ones. */
static void test_gemm_model(void **state)
{
	double F, peak = 989e12, expect;

	(void)state;
	/* LLaMA's FFN up projection at micro-batch 1: compute bound,
	 * 2mnk / (peak x 0.75 x F / (F + peak x 15 us)) + 5 us. */
	F = 2.0 * 2048 * 14336 * 4096;
	expect = (F + peak * 15e-6) / (peak * 0.75) + 5e-6;
	assert_near(costmodel_synth_gemm_s(&h100, 2048, 14336, 4096), expect,
		    1e-12);
	assert_near(expect, 3.4926e-4, 1e-3);
	/* A 1 x 65536 x 8192 product streams its 1.07 GB weight matrix:
	 * bytes / (3350 GB/s x 0.8) + 5 us. */
	expect = 2.0 * (8192 + 8192.0 * 65536 + 65536) / (3350e9 * 0.8) +
		 5e-6;
	assert_near(costmodel_synth_gemm_s(&h100, 1, 65536, 8192), expect,
		    1e-12);
	/* A grouped GEMM saturates on the whole group's FLOPs, with each
	 * product's rows padded to 128-row tiles: 2 x 1000 rows cost as
	 * 2 x 1024. */
	{
		struct synth_op op = {
			.kind = SYNTH_OP_GEMM, .count = 2, .m = 1000,
			.n = 8192, .k = 8192,
		};

		F = 2 * 2.0 * 1024 * 8192 * 8192;
		expect = (F + peak * 15e-6) / (peak * 0.75) + 5e-6;
		assert_near(costmodel_synth_op_s(&h100, &op, 1), expect, 1e-12);
	}
	/* Big GEMMs approach e_max = 0.75 of peak, from below. */
	F = 2.0 * 16384 * 16384 * 16384;
	assert_true(F / costmodel_synth_gemm_s(&h100, 16384, 16384, 16384) /
		    peak > 0.74);
	assert_true(F / costmodel_synth_gemm_s(&h100, 16384, 16384, 16384) /
		    peak < 0.75);
}

/* A bigger GPU needs a bigger GEMM to reach the same efficiency. */
static void test_bigger_gpu_needs_bigger_gemm(void **state)
{
	double F = 2.0 * 512 * 4096 * 4096;
	double eff_h100 = F / costmodel_synth_gemm_s(&h100, 512, 4096, 4096) /
			  989e12;
	double eff_a100 = F / costmodel_synth_gemm_s(&a100, 512, 4096, 4096) /
			  312e12;

	(void)state;
	assert_true(eff_a100 > eff_h100 + 0.05);
}

/* More TP: less compute and fewer weights per GPU, more communication.
 * The embedding's gather writes whole rows at any TP degree, so its
 * compute may stay level. */
static void check_tp_monotonic(const struct costmodel_model *m,
			       const struct costmodel_gpu *g, int type,
			       int mbs)
{
	struct costmodel_layer_profile lo, hi;
	bool level_ok = type == COSTMODEL_LAYER_EMBED;

	lo = entry(m, g, 1, mbs, type);
	for (int tp = 2; tp <= 8 && costmodel_synth_tp_ok(m, g, tp); tp *= 2) {
		hi = entry(m, g, tp, mbs, type);
		if (hi.fwd_ms > lo.fwd_ms ||
		    (hi.fwd_ms == lo.fwd_ms && !level_ok) ||
		    hi.comm_ms <= lo.comm_ms ||
		    hi.param_bytes > lo.param_bytes)
			fail_msg("%s on %s %s mbs %d: TP %d does not cut compute (%g -> %g ms) or add communication (%g -> %g ms)",
				 m->name, g->name,
				 costmodel_synth_type_name(type), mbs, tp,
				 lo.fwd_ms, hi.fwd_ms, lo.comm_ms, hi.comm_ms);
		lo = hi;
	}
}

/* Bigger micro-batch: more time and activations, less time per sample. */
static void check_mbs_monotonic(const struct costmodel_model *m,
				const struct costmodel_gpu *g, int type,
				int tp)
{
	struct costmodel_layer_profile lo, hi;

	lo = entry(m, g, tp, 1, type);
	for (int mbs = 2; mbs <= 16; mbs *= 2) {
		hi = entry(m, g, tp, mbs, type);
		if (hi.fwd_ms / mbs >= lo.fwd_ms / (mbs / 2) ||
		    hi.fwd_ms <= lo.fwd_ms || hi.act_bytes <= lo.act_bytes)
			fail_msg("%s on %s %s tp %d: micro-batch %d is not more efficient than %d",
				 m->name, g->name,
				 costmodel_synth_type_name(type), tp, mbs,
				 mbs / 2);
		lo = hi;
	}
}

static void test_monotonic(void **state)
{
	const struct costmodel_model *models[] = {
		&llama3_8b, &qwen3_64b, &gpt_neo, &deepseek, &mixtral,
	};
	const struct costmodel_gpu *gpus[] = { &h100, &a100, &a6000_4 };

	(void)state;
	for (size_t mi = 0; mi < ARRAY_SIZE(models); mi++) {
		for (size_t gi = 0; gi < ARRAY_SIZE(gpus); gi++) {
			const struct costmodel_model *m = models[mi];
			const struct costmodel_gpu *g = gpus[gi];

			for (int t = 0; t < COSTMODEL_NUM_LAYER_TYPES; t++) {
				if (!costmodel_synth_has_type(m, t))
					continue;
				for (int mbs = 1; mbs <= 16; mbs *= 2)
					check_tp_monotonic(m, g, t, mbs);
				for (int tp = 1; tp <= 8 &&
				     costmodel_synth_tp_ok(m, g, tp); tp *= 2)
					check_mbs_monotonic(m, g, t, tp);
			}
		}
	}
}

/* Block MFU (forward + backward FLOPs over time) in a sensible range:
 * large GEMMs on H100 run near 55-65% before communication, TP 8 at
 * micro-batch 1 far lower. */
static void test_mfu_range(void **state)
{
	struct synth_layer ly;
	struct costmodel_layer_profile p;
	double mfu;

	(void)state;
	assert_int_equal(costmodel_synth_describe(&llama3_8b, &h100, 1, 4,
						  COSTMODEL_LAYER_BLOCK, &ly), 0);
	p = entry(&llama3_8b, &h100, 1, 4, COSTMODEL_LAYER_BLOCK);
	mfu = 3 * ly.fwd_flops / ((p.fwd_ms + p.bwd_ms) * 1e-3 * 989e12);
	assert_true(mfu > 0.5 && mfu < 0.7);

	assert_int_equal(costmodel_synth_describe(&llama3_8b, &h100, 8, 1,
						  COSTMODEL_LAYER_BLOCK, &ly), 0);
	p = entry(&llama3_8b, &h100, 8, 1, COSTMODEL_LAYER_BLOCK);
	mfu = 3 * ly.fwd_flops /
	      ((p.fwd_ms + p.bwd_ms + p.comm_ms) * 1e-3 * 989e12);
	assert_true(mfu > 0.1 && mfu < 0.35);
}

/*
 * Recomputation: full keeps the block's input alone (sharded along the
 * sequence over the TP group) and re-runs the forward
 * with its collectives; selective re-runs the two norms and the attention
 * core and frees their outputs; the attention core is its own part.
 */
static void test_recomputation(void **state)
{
	struct synth_layer ly;
	struct costmodel_layer_profile p;
	double T = 2048, h = 5120, hq = 64 * 128, tp = 2, ar, norms = 0, attn = 0;

	(void)state;
	p = entry(&qwen3_64b, &h100, 2, 1, COSTMODEL_LAYER_BLOCK);
	assert_near(p.bwd_ms, 2 * p.fwd_ms, 1e-12);
	ar = costmodel_synth_allreduce_s(&h100, T * h * 2, 2) * 1e3;
	/* 2 forward and 2 backward all-reduces */
	assert_near(p.comm_ms, 4 * ar, 1e-9);
	assert_near(p.fwd_comm_ms, 2 * ar, 1e-9);
	assert_near(p.recompute_act_bytes[COSTMODEL_RECOMPUTE_FULL], 2 * T * h / tp, 1e-12);
	assert_near(p.recompute_ms[COSTMODEL_RECOMPUTE_FULL], p.fwd_ms + 2 * ar, 1e-9);
	assert_near(p.recompute_act_bytes[COSTMODEL_RECOMPUTE_NONE], p.act_bytes, 0);
	assert_near(p.recompute_act_bytes[COSTMODEL_RECOMPUTE_SELECTIVE],
		    p.act_bytes - T * (4 * h + 2 * hq) / tp, 1e-12);

	assert_int_equal(costmodel_synth_describe(&qwen3_64b, &h100, 2, 1,
						  COSTMODEL_LAYER_BLOCK, &ly), 0);
	for (int i = 0; i < ly.nops; i++) {
		double t = costmodel_synth_op_s(&h100, &ly.ops[i], 2) * 1e3;

		if (ly.ops[i].kind == SYNTH_OP_ATTN)
			attn += t;
		else if (ly.ops[i].selective)
			norms += t;
	}
	assert_true(attn > 0 && norms > 0);
	assert_near(p.fwd_attn_ms, attn, 1e-12);
	assert_near(p.bwd_attn_ms, 2 * attn, 1e-12);
	assert_near(p.recompute_ms[COSTMODEL_RECOMPUTE_SELECTIVE], attn + norms, 1e-12);

	/* The head is never recomputed. */
	p = entry(&qwen3_64b, &h100, 2, 1, COSTMODEL_LAYER_HEAD);
	assert_near(p.recompute_ms[COSTMODEL_RECOMPUTE_FULL], 0, 0);
	assert_near(p.recompute_act_bytes[COSTMODEL_RECOMPUTE_FULL], p.act_bytes, 0);
}

/* DeepSeek-V3-like: the expert entry, and the paper's 168 GB per layer. */
static void test_deepseek_experts(void **state)
{
	struct synth_layer ly;
	struct costmodel_layer_profile p;
	double slots = 2048.0 * 8, experts = 256, h = 7168, ef = 2048;

	(void)state;
	p = entry(&deepseek, &h100, 1, 1, COSTMODEL_LAYER_EXPERT);
	assert_near(p.param_bytes, experts * 3 * h * ef * 2, 1e-12);
	/* 16 bytes per parameter: 168 GiB of expert state in one layer */
	assert_near(p.param_bytes / 2 * 16 / GIB, 168.0, 1e-3);
	assert_int_equal(costmodel_synth_describe(&deepseek, &h100, 4, 2,
						  COSTMODEL_LAYER_EXPERT, &ly), 0);
	assert_near(ly.fwd_flops, 2 * slots * 2 * h * (ef / 4) * 3, 1e-12);
	/* the grouped GEMM's M: slots per expert */
	assert_near(ly.ops[1].m, 2 * slots / experts, 1e-12);
	assert_near(ly.ops[1].count, experts, 0);
	/* At TP 1, micro-batch 1, the up projection (64 tokens against
	 * each expert's 7168 x 4096 gate/up matrix) streams 15.4 GB of
	 * weights: memory bound, bytes / (3350 GB/s x 0.8) + 5 us. */
	assert_int_equal(costmodel_synth_describe(&deepseek, &h100, 1, 1,
						  COSTMODEL_LAYER_EXPERT, &ly), 0);
	assert_near(costmodel_synth_op_s(&h100, &ly.ops[1], 1),
		    experts * 2 * (64 * h + h * 2 * ef + 64 * 2 * ef) /
		    (3350e9 * 0.8) + 5e-6, 1e-12);
	/* ETP all-reduces: 2 forward, 2 backward, of slots.h.2 bytes */
	p = entry(&deepseek, &h100, 4, 2, COSTMODEL_LAYER_EXPERT);
	assert_near(p.comm_ms,
		    4 * costmodel_synth_allreduce_s(&h100, 2 * slots * h * 2,
						    4) * 1e3, 1e-9);
	/* Mixtral: 2 x 2048 slots over 8 experts gives M = 512 */
	assert_int_equal(costmodel_synth_describe(&mixtral, &h100, 1, 1,
						  COSTMODEL_LAYER_EXPERT, &ly), 0);
	assert_near(ly.ops[1].m, 512, 0);
}

/* MLA attention weights by hand (DeepSeek-V3: 187 M per block). */
static void test_deepseek_mla(void **state)
{
	struct costmodel_layer_profile p;
	double h = 7168, qr = 1536, kvr = 512, nh = 128, dn = 128, dr = 64;
	double dv = 128, attn, router, shared;

	(void)state;
	attn = h * qr + qr + qr * nh * (dn + dr) + h * (kvr + dr) + kvr +
	       kvr * nh * (dn + dv) + nh * dv * h + h;
	assert_near(attn, 187.1e6, 1e-3);
	router = h + h * 256;
	shared = 3 * h * 2048;
	p = entry(&deepseek, &h100, 1, 1, COSTMODEL_LAYER_ATTN);
	assert_near(p.param_bytes, 2 * (attn + router + shared), 1e-12);
	/* the dense blocks carry the 18432-wide FFN */
	p = entry(&deepseek, &h100, 1, 1, COSTMODEL_LAYER_BLOCK);
	assert_near(p.param_bytes, 2 * (attn + h + 3 * h * 18432), 1e-12);
}

/* Embedding and head: vocab-parallel weights, the FP32 softmax kept once. */
static void test_embed_head(void **state)
{
	struct costmodel_layer_profile p;
	double V = 128256, h = 4096, T = 2048;

	(void)state;
	p = entry(&llama3_8b, &h100, 2, 1, COSTMODEL_LAYER_EMBED);
	assert_near(p.param_bytes, V / 2 * h * 2, 1e-12);
	assert_near(p.comm_ms,
		    costmodel_synth_allreduce_s(&h100, T * h * 2, 2) * 1e3,
		    1e-9);
	p = entry(&llama3_8b, &h100, 2, 1, COSTMODEL_LAYER_HEAD);
	assert_near(p.param_bytes, V / 2 * h * 2 + 2 * h, 1e-12);
	assert_near(p.act_bytes, T * V / 2 * 4 + T * h * 4, 1e-12);
	/* GPT-Neo's vocabulary splits unevenly: ceil(50257 / 4) rows */
	p = entry(&gpt_neo, &h100, 4, 1, COSTMODEL_LAYER_EMBED);
	assert_near(p.param_bytes, 12565.0 * 2560 * 2, 1e-12);
}

/* Which TP degrees and layer types exist. */
static void test_coverage(void **state)
{
	struct costmodel_layer_profile p;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	(void)state;
	/* GPT-Neo's 20 heads do not split 8 ways */
	assert_false(costmodel_synth_tp_ok(&gpt_neo, &h100, 8));
	assert_true(costmodel_synth_tp_ok(&gpt_neo, &h100, 4));
	assert_int_equal(costmodel_synth_layer(&gpt_neo, &h100, 8, 1,
					       COSTMODEL_LAYER_BLOCK, &p),
			 -AR_ENOTFOUND);
	assert_non_null(strstr(ar_errmsg(), "TP 8"));
	/* a 4-GPU node caps TP */
	assert_false(costmodel_synth_tp_ok(&llama3_8b, &a6000_4, 8));
	assert_false(costmodel_synth_tp_ok(&llama3_8b, &h100, 3));
	/* dense models have no MoE entries; MoE models no dense block
	 * unless they lead with dense layers */
	assert_int_equal(costmodel_synth_layer(&llama3_8b, &h100, 1, 1,
					       COSTMODEL_LAYER_EXPERT, &p),
			 -AR_ENOTFOUND);
	assert_false(costmodel_synth_has_type(&mixtral, COSTMODEL_LAYER_BLOCK));
	assert_true(costmodel_synth_has_type(&deepseek, COSTMODEL_LAYER_BLOCK));

	f = open_memstream(&buf, &len);
	assert_non_null(f);
	assert_int_equal(costmodel_synth_write(&gpt_neo, &a6000_4, f), 0);
	fclose(f);
	assert_non_null(strstr(buf, "source = analytic\n"));
	assert_non_null(strstr(buf, "\n[tp4.mbs16.head]\nfwd_ms = "));
	assert_null(strstr(buf, "[tp8."));
	assert_null(strstr(buf, ".attn]"));
	free(buf);

	buf = NULL;
	f = open_memstream(&buf, &len);
	assert_non_null(f);
	assert_int_equal(costmodel_synth_write(&deepseek, &h100, f), 0);
	fclose(f);
	assert_non_null(strstr(buf, "\n[tp8.mbs16.expert]\n"));
	assert_non_null(strstr(buf, "\n[tp1.mbs1.block]\n"));
	assert_non_null(strstr(buf, "\n[tp1.mbs1.attn]\n"));
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_llama_block_counts),
		cmocka_unit_test(test_llama_tp2_comm),
		cmocka_unit_test(test_gemm_model),
		cmocka_unit_test(test_bigger_gpu_needs_bigger_gemm),
		cmocka_unit_test(test_monotonic),
		cmocka_unit_test(test_mfu_range),
		cmocka_unit_test(test_recomputation),
		cmocka_unit_test(test_deepseek_experts),
		cmocka_unit_test(test_deepseek_mla),
		cmocka_unit_test(test_embed_head),
		cmocka_unit_test(test_coverage),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
