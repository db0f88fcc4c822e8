/*
 * measure.c - arachne-profile measure: the operation lists of synth.h
 * timed on this machine's GPU 0 with cuBLAS (BF16 in, FP32 accumulate)
 * and CUDA events, and the TP collectives with NCCL over the first TP
 * GPUs (measure_nccl.c) when the machine has that many; otherwise they
 * keep their analytic time.  Built only when configure found CUDA.
 *
 * What is timed and what is not (docs/profiles.md): every GEMM of the
 * forward pass, and for the backward its two gradient GEMMs (input:
 * m x k x n, weight: k x n x m); attention as two strided-batched GEMMs
 * (cuBLAS has no fused attention; the FLOPs are the same, the memory
 * traffic higher); memory-bound passes as device-to-device copies of the
 * same byte count.  Attention and memory passes take twice their forward
 * time backward, as in the analytic model.  Activation and parameter
 * bytes are counted, not measured.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#define AR_INTERNAL
#include "ar.h"
#include "costmodel.h"
#include "measure.h"
#include "synth.h"

/* Device buffers reused across operations; grown on demand. */
struct measure_ctx {
	cublasHandle_t blas;
	cudaStream_t stream;
	cudaEvent_t start, stop;
	void *buf[3];
	size_t cap[3];
	const struct measure_opts *opts;
	struct measure_comm *comm;	/* NULL: analytic collectives */
	int ngpus;
};

static int cuda_err(cudaError_t e, const char *what)
{
	return ar_seterr(-EIO, "%s: %s", what, cudaGetErrorString(e));
}

static int blas_err(cublasStatus_t s, const char *what)
{
	return ar_seterr(-EIO, "%s: cuBLAS status %d", what, (int)s);
}

/* Make buffer @i at least @bytes long. -ENOMEM when the GPU lacks room. */
static int buf_reserve(struct measure_ctx *mc, int i, size_t bytes)
{
	cudaError_t e;

	if (mc->cap[i] >= bytes)
		return 0;
	cudaFree(mc->buf[i]);
	mc->buf[i] = NULL;
	mc->cap[i] = 0;
	e = cudaMalloc(&mc->buf[i], bytes);
	if (e != cudaSuccess) {
		cudaGetLastError();	/* clear the allocation error */
		return -ENOMEM;
	}
	/* Zeros: timing must not depend on denormals or NaNs. */
	e = cudaMemset(mc->buf[i], 0, bytes);
	if (e != cudaSuccess)
		return cuda_err(e, "cudaMemset");
	mc->cap[i] = bytes;
	return 0;
}

/* Average seconds of @fn(@arg) over opts->iters runs, after warm-up. */
static int time_it(struct measure_ctx *mc, int (*fn)(struct measure_ctx *,
						     const void *),
		   const void *arg, double *seconds)
{
	float ms = 0;
	cudaError_t e;
	int i, rc;

	for (i = 0; i < mc->opts->warmup; i++)
		if ((rc = fn(mc, arg)) < 0)
			return rc;
	e = cudaEventRecord(mc->start, mc->stream);
	if (e != cudaSuccess)
		return cuda_err(e, "cudaEventRecord");
	for (i = 0; i < mc->opts->iters; i++)
		if ((rc = fn(mc, arg)) < 0)
			return rc;
	if ((e = cudaEventRecord(mc->stop, mc->stream)) != cudaSuccess ||
	    (e = cudaEventSynchronize(mc->stop)) != cudaSuccess ||
	    (e = cudaEventElapsedTime(&ms, mc->start, mc->stop)) != cudaSuccess)
		return cuda_err(e, "timing with CUDA events");
	*seconds = ms * 1e-3 / mc->opts->iters;
	return 0;
}

/* One GEMM shape, batched @count times (strided in one call). */
struct gemm_shape {
	long long m, n, k, count;
};

static int run_gemm(struct measure_ctx *mc, const void *arg)
{
	const struct gemm_shape *g = arg;
	const float alpha = 1.0f, beta = 0.0f;
	cublasStatus_t s;

	/* Column-major C (m x n) = A (m x k) . B (k x n). */
	s = cublasGemmStridedBatchedEx(mc->blas, CUBLAS_OP_N, CUBLAS_OP_N,
				       (int)g->m, (int)g->n, (int)g->k, &alpha,
				       mc->buf[0], CUDA_R_16BF, (int)g->m,
				       g->m * g->k,
				       mc->buf[1], CUDA_R_16BF, (int)g->k,
				       g->k * g->n, &beta,
				       mc->buf[2], CUDA_R_16BF, (int)g->m,
				       g->m * g->n, (int)g->count,
				       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
	if (s != CUBLAS_STATUS_SUCCESS)
		return blas_err(s, "cublasGemmStridedBatchedEx");
	return 0;
}

/*
 * Seconds of @count GEMMs of m x n x k.  When the batch does not fit in
 * device memory, one GEMM is timed and multiplied by @count.
 */
static int gemm_s(struct measure_ctx *mc, double m, double n, double k,
		  double count, double *seconds)
{
	struct gemm_shape g = {
		.m = llround(m), .n = llround(n), .k = llround(k),
		.count = llround(count),
	};
	double scale = 1;
	int rc;

	if (g.m < 1 || g.n < 1 || g.k < 1 || g.count < 1)
		return ar_seterr(-AR_EINVAL, "GEMM %lldx%lldx%lld x%lld is empty",
				 g.m, g.n, g.k, g.count);
	for (;;) {
		size_t b = 2 * (size_t)g.count;

		if ((rc = buf_reserve(mc, 0, b * g.m * g.k)) == 0 &&
		    (rc = buf_reserve(mc, 1, b * g.k * g.n)) == 0 &&
		    (rc = buf_reserve(mc, 2, b * g.m * g.n)) == 0)
			break;
		if (rc != -ENOMEM)
			return rc;
		if (g.count == 1)
			return ar_seterr(-ENOMEM, "GEMM %lldx%lldx%lld does not fit in GPU memory",
					 g.m, g.n, g.k);
		scale *= g.count;
		g.count = 1;
	}
	rc = time_it(mc, run_gemm, &g, seconds);
	*seconds *= scale;
	return rc;
}

struct copy_arg {
	size_t bytes;
};

static int run_copy(struct measure_ctx *mc, const void *arg)
{
	const struct copy_arg *c = arg;
	cudaError_t e;

	e = cudaMemcpyAsync(mc->buf[1], mc->buf[0], c->bytes,
			    cudaMemcpyDeviceToDevice, mc->stream);
	return e == cudaSuccess ? 0 : cuda_err(e, "cudaMemcpyAsync");
}

/* A pass that reads and writes @bytes in all: a copy of half of them. */
static int mem_s(struct measure_ctx *mc, double bytes, double *seconds)
{
	struct copy_arg c = { .bytes = (size_t)(bytes / 2) };
	int rc;

	if (c.bytes == 0)
		c.bytes = 1;
	if ((rc = buf_reserve(mc, 0, c.bytes)) < 0 ||
	    (rc = buf_reserve(mc, 1, c.bytes)) < 0)
		return rc == -ENOMEM ?
		       ar_seterr(rc, "%zu bytes do not fit in GPU memory",
				 c.bytes) : rc;
	return time_it(mc, run_copy, &c, seconds);
}

/* Forward and backward seconds of one compute operation. */
static int op_time(struct measure_ctx *mc, const struct synth_op *op,
		   double *fwd, double *bwd)
{
	double a, b;
	int rc;

	switch (op->kind) {
	case SYNTH_OP_GEMM:
		rc = gemm_s(mc, op->m, op->n, op->k, op->count, fwd);
		if (rc == 0)	/* input gradient */
			rc = gemm_s(mc, op->m, op->k, op->n, op->count, &a);
		if (rc == 0)	/* weight gradient */
			rc = gemm_s(mc, op->k, op->n, op->m, op->count, &b);
		if (rc < 0)
			return rc;
		*bwd = a + b;
		return 0;
	case SYNTH_OP_ATTN:
		/* S = Q K^T per (sequence, head), then O = P V. */
		if ((rc = gemm_s(mc, op->attn_q, op->attn_kv, op->attn_dqk,
				 op->attn_batch, &a)) < 0 ||
		    (rc = gemm_s(mc, op->attn_q, op->attn_dv, op->attn_kv,
				 op->attn_batch, &b)) < 0)
			return rc;
		*fwd = a + b;
		*bwd = 2 * *fwd;
		return 0;
	case SYNTH_OP_MEM:
		if ((rc = mem_s(mc, op->bytes, fwd)) < 0)
			return rc;
		*bwd = 2 * *fwd;
		return 0;
	case SYNTH_OP_ALLREDUCE:
		break;
	}
	*fwd = *bwd = 0;
	return 0;
}

/* One all-reduce: NCCL when this machine has the group's GPUs, else
 * analytic. */
static int allreduce_s(struct measure_ctx *mc, const struct costmodel_gpu *g,
		       int tp, double bytes, double *seconds)
{
	if (tp <= 1) {
		*seconds = 0;
		return 0;
	}
	if (!mc->comm || tp > mc->ngpus) {
		*seconds = costmodel_synth_allreduce_s(g, bytes, tp);
		return 0;
	}
	return measure_allreduce_s(mc->comm, tp, bytes, mc->opts->warmup,
				   mc->opts->iters, seconds);
}

static int measure_entry(struct measure_ctx *mc,
			 const struct costmodel_model *model,
			 const struct costmodel_gpu *g, int tp, int mbs,
			 enum costmodel_layer_type type,
			 struct costmodel_layer_profile *prof)
{
	struct synth_layer ly;
	double op_fwd[SYNTH_MAX_OPS], op_bwd[SYNTH_MAX_OPS], bwd_comm;
	int rc, i;

	rc = costmodel_synth_describe(model, g, tp, mbs, type, &ly);
	if (rc < 0)
		return rc;
	for (i = 0; i < ly.nops; i++) {
		const struct synth_op *op = &ly.ops[i];

		if (op->kind == SYNTH_OP_ALLREDUCE) {
			rc = allreduce_s(mc, g, tp, op->bytes, &op_fwd[i]);
			op_bwd[i] = 0;
		} else {
			rc = op_time(mc, op, &op_fwd[i], &op_bwd[i]);
		}
		if (rc < 0)
			return rc;
		if (mc->opts->verbose)
			fprintf(stderr, "tp%d.mbs%d.%s %-14s fwd %9.4f ms  bwd %9.4f ms\n",
				tp, mbs, costmodel_synth_type_name(type),
				op->what, op_fwd[i] * 1e3, op_bwd[i] * 1e3);
	}
	rc = allreduce_s(mc, g, tp, ly.bwd_allreduce_bytes, &bwd_comm);
	if (rc < 0)
		return rc;
	costmodel_synth_entry(&ly, op_fwd, op_bwd, bwd_comm * ly.bwd_allreduces,
			      prof);
	prof->measured = true;
	return 0;
}

static void ctx_fini(struct measure_ctx *mc)
{
	for (int i = 0; i < 3; i++)
		cudaFree(mc->buf[i]);
	if (mc->start)
		cudaEventDestroy(mc->start);
	if (mc->stop)
		cudaEventDestroy(mc->stop);
	if (mc->blas)
		cublasDestroy(mc->blas);
	if (mc->stream)
		cudaStreamDestroy(mc->stream);
	measure_allreduce_fini(mc->comm);
}

int measure_probe(int *ngpus)
{
	cudaError_t e = cudaGetDeviceCount(ngpus);

	if (e != cudaSuccess || *ngpus < 1) {
		*ngpus = 0;
		return ar_seterr(-ENODEV, "no CUDA device (cudaGetDeviceCount: %s)",
				 e != cudaSuccess ? cudaGetErrorString(e) :
						    "0 devices");
	}
	return 0;
}

static int ctx_init(struct measure_ctx *mc, const struct measure_opts *opts)
{
	cublasStatus_t s;
	cudaError_t e;
	int rc;

	memset(mc, 0, sizeof(*mc));
	mc->opts = opts;
	if ((rc = measure_probe(&mc->ngpus)) < 0)
		return rc;
	if ((e = cudaSetDevice(0)) != cudaSuccess ||
	    (e = cudaStreamCreate(&mc->stream)) != cudaSuccess ||
	    (e = cudaEventCreate(&mc->start)) != cudaSuccess ||
	    (e = cudaEventCreate(&mc->stop)) != cudaSuccess)
		return cuda_err(e, "setting up GPU 0");
	s = cublasCreate(&mc->blas);
	if (s == CUBLAS_STATUS_SUCCESS)
		s = cublasSetStream(mc->blas, mc->stream);
	if (s != CUBLAS_STATUS_SUCCESS)
		return blas_err(s, "cublasCreate");
	return 0;
}

int measure_run(const struct costmodel *cm, int gpu,
		const struct measure_opts *opts, FILE *out)
{
	static const int tps[COSTMODEL_NUM_TP] = { 1, 2, 4, 8 };
	static const int mbss[COSTMODEL_NUM_MBS] = { 1, 2, 4, 8, 16 };
	const struct costmodel_model *model = costmodel_model(cm);
	const struct costmodel_gpu *g = costmodel_gpu(cm, gpu);
	struct cudaDeviceProp prop;
	struct measure_ctx mc;
	char comment[512], when[32];
	const char *comm_how;
	time_t now = time(NULL);
	int rc, i, j, t, written = 0;

	if (!g)
		return ar_seterr(-AR_EINVAL, "GPU type index %d out of range",
				 gpu);
	rc = ctx_init(&mc, opts);
	if (rc < 0)
		goto out;
	if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess)
		snprintf(prop.name, sizeof(prop.name), "GPU 0");
	if (mc.ngpus > 1 && measure_allreduce_init(mc.ngpus, &mc.comm) == 0)
		comm_how = "NCCL all-reduce up to that many GPUs, analytic above";
	else
		comm_how = "analytic all-reduce (one GPU or no NCCL)";
	strftime(when, sizeof(when), "%Y-%m-%d", gmtime(&now));
	snprintf(comment, sizeof(comment),
		 "measured: arachne-profile measure on %d x %s, %s; cuBLAS BF16 GEMMs, %s (docs/profiles.md)",
		 mc.ngpus, prop.name, when, comm_how);
	rc = costmodel_synth_write_header(out, comment, model->name, g->name,
					  "measured", model->seq_len);
	if (rc < 0)
		goto out;

	for (i = 0; i < COSTMODEL_NUM_TP; i++) {
		int tp = tps[i];

		if (!(opts->tp_mask & (1u << i)) ||
		    !costmodel_synth_tp_ok(model, g, tp))
			continue;
		for (j = 0; j < COSTMODEL_NUM_MBS; j++) {
			if (!(opts->mbs_mask & (1u << j)))
				continue;
			for (t = 0; t < COSTMODEL_NUM_LAYER_TYPES; t++) {
				struct costmodel_layer_profile prof;

				if (!costmodel_synth_has_type(model, t))
					continue;
				rc = measure_entry(&mc, model, g, tp, mbss[j],
						   t, &prof);
				/* Too big for this GPU: leave it analytic. */
				if (rc == -ENOMEM) {
					ar_log(LOG_WARNING, "tp%d.mbs%d.%s: %s; keeping the analytic entry",
					       tp, mbss[j],
					       costmodel_synth_type_name(t),
					       ar_errmsg());
					continue;
				}
				if (rc < 0)
					goto out;
				rc = costmodel_synth_write_entry(out, tp,
							mbss[j], t, &prof);
				if (rc < 0)
					goto out;
				written++;
			}
		}
	}
	if (written == 0)
		rc = ar_seterr(-AR_EINVAL, "no entry of %s could be measured here (--tp, --mbs, GPU count)",
			       model->name);
out:
	ctx_fini(&mc);
	return rc;
}
