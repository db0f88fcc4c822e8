/*
 * measure.h - arachne-profile measure: time the work of each layer
 * (synth.h's operation lists) on the GPUs of this machine with cuBLAS and
 * NCCL.  Built only when configure found the CUDA runtime with cuBLAS;
 * otherwise measure_run() says the build lacks it.
 */
#ifndef AR_MEASURE_H
#define AR_MEASURE_H

#include <stdio.h>

#include "ar.h"
#include "costmodel.h"

struct measure_opts {
	int iters;		/* timed repetitions of each operation */
	int warmup;		/* untimed repetitions first */
	unsigned tp_mask;	/* bit log2(tp): TP degrees to measure */
	unsigned mbs_mask;	/* bit log2(mbs): micro-batch sizes */
	bool verbose;		/* one line per operation on stderr */
};

#ifdef HAVE_CUDA
/*
 * measure_probe() - the number of visible CUDA devices in *@ngpus; -ENODEV
 * with "no CUDA device (cudaGetDeviceCount: ...)" when there is none.
 */
int measure_probe(int *ngpus);

/*
 * measure_run() - time every entry of the loaded model on GPU type @gpu
 * (compute on GPU 0; a TP group's collectives with NCCL when this machine
 * has that many GPUs, analytic otherwise) and write them to @out in the
 * layer-profile format with "source = measured".  -ENODEV when no CUDA device is present.
 */
int measure_run(const struct costmodel *cm, int gpu,
		const struct measure_opts *opts, FILE *out);
#else
static inline int measure_probe(int *ngpus)
{
	*ngpus = 0;
	return ar_seterr(-AR_ENOTBUILT, "built without CUDA");
}

static inline int measure_run(const struct costmodel *cm, int gpu,
			      const struct measure_opts *opts, FILE *out)
{
	(void)cm;
	(void)gpu;
	(void)opts;
	(void)out;
	return ar_seterr(-AR_ENOTBUILT,
			 "measure needs the CUDA runtime with cuBLAS; this arachne-profile was configured without it (./configure --with-cuda=PATH)");
}
#endif /* HAVE_CUDA */

/*
 * The NCCL all-reduce that prices TP collectives.  Without NCCL the
 * collectives keep their analytic time (measure_allreduce_init() says so
 * by returning -AR_ENOTBUILT).
 */
struct measure_comm;

#ifdef HAVE_NCCL
int measure_allreduce_init(int ngpus, struct measure_comm **commp);
/* Seconds one all-reduce of @bytes takes over the first @tp GPUs. */
int measure_allreduce_s(struct measure_comm *comm, int tp, double bytes,
			int warmup, int iters, double *seconds);
void measure_allreduce_fini(struct measure_comm *comm);
#else
static inline int measure_allreduce_init(int ngpus,
					 struct measure_comm **commp)
{
	(void)ngpus;
	*commp = NULL;
	return ar_seterr(-AR_ENOTBUILT, "built without NCCL");
}

static inline int measure_allreduce_s(struct measure_comm *comm, int tp,
				      double bytes, int warmup, int iters,
				      double *seconds)
{
	(void)comm;
	(void)tp;
	(void)bytes;
	(void)warmup;
	(void)iters;
	*seconds = 0;
	return ar_seterr(-AR_ENOTBUILT, "built without NCCL");
}

static inline void measure_allreduce_fini(struct measure_comm *comm)
{
	(void)comm;
}
#endif /* HAVE_NCCL */

#endif /* AR_MEASURE_H */
