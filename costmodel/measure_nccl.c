/*
 * measure_nccl.c - NCCL all-reduce timing for arachne-profile measure:
 * one process drives the first TP GPUs of this machine (ncclCommInitAll),
 * as a TP group inside one node does.  Built with NCCL only.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include <cuda_runtime.h>
/* nccl.h declares ncclGetVersion-style functions without prototypes. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#define AR_INTERNAL
#include "ar.h"
#include "measure.h"

#define MEASURE_MAX_GPUS	COSTMODEL_MAX_TP

/* comms[log2(tp)]: a communicator over GPUs 0..tp-1 for each TP degree. */
struct measure_comm {
	int ngpus;
	ncclComm_t comms[4][MEASURE_MAX_GPUS];
	bool have[4];
	cudaStream_t streams[MEASURE_MAX_GPUS];
	void *buf[MEASURE_MAX_GPUS];
	size_t cap;
};

static int tp_index(int tp)
{
	switch (tp) {
	case 2: return 1;
	case 4: return 2;
	case 8: return 3;
	default: return -1;
	}
}

int measure_allreduce_init(int ngpus, struct measure_comm **commp)
{
	struct measure_comm *mc;
	int devs[MEASURE_MAX_GPUS];
	ncclResult_t r;
	int i, tp;

	*commp = NULL;
	mc = calloc(1, sizeof(*mc));
	if (!mc)
		return -ENOMEM;
	mc->ngpus = ngpus < MEASURE_MAX_GPUS ? ngpus : MEASURE_MAX_GPUS;
	for (i = 0; i < mc->ngpus; i++) {
		devs[i] = i;
		if (cudaSetDevice(i) != cudaSuccess ||
		    cudaStreamCreate(&mc->streams[i]) != cudaSuccess) {
			measure_allreduce_fini(mc);
			return ar_seterr(-EIO, "cannot set up a stream on GPU %d",
					 i);
		}
	}
	for (tp = 2; tp <= mc->ngpus; tp *= 2) {
		r = ncclCommInitAll(mc->comms[tp_index(tp)], tp, devs);
		if (r != ncclSuccess) {
			measure_allreduce_fini(mc);
			return ar_seterr(-EIO, "ncclCommInitAll over %d GPUs: %s",
					 tp, ncclGetErrorString(r));
		}
		mc->have[tp_index(tp)] = true;
	}
	cudaSetDevice(0);
	*commp = mc;
	return 0;
}

static int reserve(struct measure_comm *mc, size_t bytes)
{
	int i;

	if (mc->cap >= bytes)
		return 0;
	for (i = 0; i < mc->ngpus; i++) {
		cudaSetDevice(i);
		cudaFree(mc->buf[i]);
		mc->buf[i] = NULL;
		if (cudaMalloc(&mc->buf[i], bytes) != cudaSuccess ||
		    cudaMemset(mc->buf[i], 0, bytes) != cudaSuccess) {
			mc->cap = 0;
			cudaSetDevice(0);
			return ar_seterr(-ENOMEM, "%zu bytes for an all-reduce do not fit on GPU %d",
					 bytes, i);
		}
	}
	mc->cap = bytes;
	cudaSetDevice(0);
	return 0;
}

static int allreduce_once(struct measure_comm *mc, int tp, size_t count)
{
	ncclComm_t *comms = mc->comms[tp_index(tp)];
	ncclResult_t r;
	int i;

	ncclGroupStart();
	for (i = 0; i < tp; i++)
		ncclAllReduce(mc->buf[i], mc->buf[i], count, ncclBfloat16,
			      ncclSum, comms[i], mc->streams[i]);
	r = ncclGroupEnd();
	if (r != ncclSuccess)
		return ar_seterr(-EIO, "ncclAllReduce: %s",
				 ncclGetErrorString(r));
	return 0;
}

static int sync_all(struct measure_comm *mc, int tp)
{
	for (int i = 0; i < tp; i++)
		if (cudaStreamSynchronize(mc->streams[i]) != cudaSuccess)
			return ar_seterr(-EIO, "all-reduce stream on GPU %d failed",
					 i);
	return 0;
}

int measure_allreduce_s(struct measure_comm *mc, int tp, double bytes,
			int warmup, int iters, double *seconds)
{
	size_t count = (size_t)(bytes / 2);	/* BF16 elements */
	double t0;
	int i, rc;

	*seconds = 0;
	if (tp_index(tp) < 0 || !mc->have[tp_index(tp)])
		return ar_seterr(-AR_EINVAL, "no NCCL communicator over %d GPUs",
				 tp);
	if (count == 0)
		count = 1;
	if ((rc = reserve(mc, count * 2)) < 0)
		return rc;
	for (i = 0; i < warmup; i++)
		if ((rc = allreduce_once(mc, tp, count)) < 0)
			return rc;
	if ((rc = sync_all(mc, tp)) < 0)
		return rc;
	t0 = ar_now();
	for (i = 0; i < iters; i++)
		if ((rc = allreduce_once(mc, tp, count)) < 0)
			return rc;
	if ((rc = sync_all(mc, tp)) < 0)
		return rc;
	*seconds = (ar_now() - t0) / iters;
	return 0;
}

void measure_allreduce_fini(struct measure_comm *mc)
{
	int i, t;

	if (!mc)
		return;
	for (t = 0; t < 4; t++)
		if (mc->have[t])
			for (i = 0; i < (1 << t); i++)
				ncclCommDestroy(mc->comms[t][i]);
	for (i = 0; i < mc->ngpus; i++) {
		cudaSetDevice(i);
		cudaFree(mc->buf[i]);
		if (mc->streams[i])
			cudaStreamDestroy(mc->streams[i]);
	}
	cudaSetDevice(0);
	free(mc);
}
