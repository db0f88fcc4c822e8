/*
 * transport_nccl.c - device-buffer transport over NCCL point-to-point.
 *
 * Rank 0 creates the NCCL unique id and broadcasts it over the control
 * channel, MPI or a rendezvous (rdzv.c); every rank then joins one
 * communicator on its CUDA device.  A step is one NCCL group
 * of ncclSend/ncclRecv, which NCCL matches per peer pair in posting order
 * (both sides take the tuples in the same order).  Completion is polled on
 * the stream; past the timeout the communicator is aborted, which is the
 * only way NCCL lets go of a peer that never arrives.  Agreements go over
 * the control channel too.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>
#ifdef HAVE_MPI
#include <mpi.h>
#endif
/* nccl.h declares some functions with empty parameter lists. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#define AR_INTERNAL
#include "migrate_private.h"

struct nccl_priv {
	ncclComm_t comm;
	cudaStream_t stream;
	struct migrate_rdzv *rdzv;	/* the control channel, or MPI: */
#ifdef HAVE_MPI
	MPI_Comm ctl;
#endif
	int device;
	bool aborted;
};

static int cuda_err(cudaError_t e, const char *what)
{
	return ar_seterr(-AR_EPROTO, "CUDA %s failed: %s", what,
			 cudaGetErrorString(e));
}

static int nccl_err(ncclResult_t r, const char *what)
{
	return ar_seterr(-AR_EPROTO, "NCCL %s failed: %s", what,
			 ncclGetErrorString(r));
}

static void poll_pause(void)
{
	struct timespec ts = { 0, 20000 };

	nanosleep(&ts, NULL);
}

static int nccl_step(struct migrate_transport *tp, struct migrate_xfer *xs,
		     int nx, double timeout_s)
{
	struct nccl_priv *p = tp->priv;
	ncclResult_t r;
	cudaError_t e;
	double start;

	if (p->aborted)
		return ar_seterr(-AR_EABORT, "the NCCL communicator was aborted");
	r = ncclGroupStart();
	if (r != ncclSuccess)
		return nccl_err(r, "GroupStart");
	for (int i = 0; i < nx; i++) {
		struct migrate_xfer *x = &xs[i];

		r = x->send ? ncclSend(x->buf, x->bytes, ncclInt8, x->peer,
				       p->comm, p->stream) :
			      ncclRecv(x->buf, x->bytes, ncclInt8, x->peer,
				       p->comm, p->stream);
		if (r != ncclSuccess) {
			ncclGroupEnd();
			return nccl_err(r, x->send ? "Send" : "Recv");
		}
	}
	r = ncclGroupEnd();
	if (r != ncclSuccess && r != ncclInProgress)
		return nccl_err(r, "GroupEnd");

	/* A whole group completes at once: the timeout covers the step. */
	start = ar_now();
	for (;;) {
		e = cudaStreamQuery(p->stream);
		if (e == cudaSuccess)
			break;
		if (e != cudaErrorNotReady)
			return cuda_err(e, "StreamQuery");
		ncclResult_t async = ncclSuccess;

		ncclCommGetAsyncError(p->comm, &async);
		if (async != ncclSuccess && async != ncclInProgress) {
			ncclCommAbort(p->comm);
			p->aborted = true;
			return nccl_err(async, "transfer");
		}
		if (ar_now() - start > timeout_s) {
			ncclCommAbort(p->comm);
			p->aborted = true;
			return ar_seterr(-AR_ETIMEOUT,
					 "NCCL step with %d transfers (first peer rank %d) did not finish within %.1f s (dead or stalled peer)",
					 nx, nx ? xs[0].peer : -1, timeout_s);
		}
		poll_pause();
	}
	return 0;
}

static int nccl_agree(struct migrate_transport *tp, bool ok, double timeout_s)
{
	struct nccl_priv *p = tp->priv;

	if (p->rdzv)
		return rdzv_agree(p->rdzv, ok, timeout_s);
#ifdef HAVE_MPI
	int mine = ok ? 1 : 0, all = 0, flag = 0;
	MPI_Request req;
	double start = ar_now();

	if (MPI_Iallreduce(&mine, &all, 1, MPI_INT, MPI_MIN, p->ctl, &req) !=
	    MPI_SUCCESS)
		return ar_seterr(-AR_EPROTO, "MPI Iallreduce failed");
	for (;;) {
		if (MPI_Test(&req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS)
			return ar_seterr(-AR_EPROTO, "MPI Test failed");
		if (flag)
			break;
		if (ar_now() - start > timeout_s)
			return ar_seterr(-AR_ETIMEOUT,
					 "no agreement among the ranks within %.1f s: a peer is dead or stalled",
					 timeout_s);
		poll_pause();
	}
	if (!all)
		return ar_seterr(-AR_EABORT, "a peer failed; the migration is aborted on every rank");
	return 0;
#else
	return ar_seterr(-AR_ENOTBUILT, "migrate: built without MPI");
#endif
}

/* Rank 0's @len bytes to every rank over the control channel. */
static int nccl_bcast(struct nccl_priv *p, void *buf, size_t len)
{
	if (p->rdzv)
		return migrate_rdzv_bcast(p->rdzv, 0, buf, len);
#ifdef HAVE_MPI
	if (MPI_Bcast(buf, (int)len, MPI_BYTE, 0, p->ctl) != MPI_SUCCESS)
		return ar_seterr(-AR_EPROTO, "MPI Bcast failed");
	return 0;
#else
	return ar_seterr(-AR_ENOTBUILT, "migrate: built without MPI");
#endif
}

static void nccl_ctl_free(struct nccl_priv *p)
{
#ifdef HAVE_MPI
	int finalized = 0;

	if (p->rdzv)
		return;
	MPI_Finalized(&finalized);
	if (!finalized)
		MPI_Comm_free(&p->ctl);
#endif
}

static int nccl_copy(struct migrate_transport *tp, void *dst, const void *src,
		     size_t bytes)
{
	struct nccl_priv *p = tp->priv;
	cudaError_t e = cudaMemcpyAsync(dst, src, bytes,
					cudaMemcpyDeviceToDevice, p->stream);

	return e == cudaSuccess ? 0 : cuda_err(e, "MemcpyAsync");
}

static void *nccl_alloc(struct migrate_transport *tp, size_t bytes)
{
	void *buf = NULL;

	if (cudaMalloc(&buf, bytes ? bytes : 1) != cudaSuccess) {
		errno = ENOMEM;
		return NULL;
	}
	return buf;
}

static void nccl_release(struct migrate_transport *tp, void *buf)
{
	cudaFree(buf);
}

static int nccl_to_host(struct migrate_transport *tp, void *host,
			const void *buf, size_t bytes)
{
	struct nccl_priv *p = tp->priv;
	cudaError_t e = cudaStreamSynchronize(p->stream);

	if (e == cudaSuccess)
		e = cudaMemcpy(host, buf, bytes, cudaMemcpyDeviceToHost);
	return e == cudaSuccess ? 0 : cuda_err(e, "Memcpy to host");
}

static int nccl_from_host(struct migrate_transport *tp, void *buf,
			  const void *host, size_t bytes)
{
	cudaError_t e = cudaMemcpy(buf, host, bytes, cudaMemcpyHostToDevice);

	return e == cudaSuccess ? 0 : cuda_err(e, "Memcpy from host");
}

static void nccl_destroy(struct migrate_transport *tp)
{
	struct nccl_priv *p = tp->priv;

	/* After ncclCommAbort the communicator is already gone. */
	if (!p->aborted)
		ncclCommDestroy(p->comm);
	cudaStreamDestroy(p->stream);
	nccl_ctl_free(p);
	free(p);
	free(tp);
}

static const struct migrate_transport_ops nccl_ops = {
	.name = "nccl",
	.step = nccl_step,
	.copy = nccl_copy,
	.agree = nccl_agree,
	.alloc = nccl_alloc,
	.release = nccl_release,
	.to_host = nccl_to_host,
	.from_host = nccl_from_host,
	.destroy = nccl_destroy,
};

/*
 * Claims this rank's device.  0, or a negative code with the reason in
 * ar_errmsg(); the stream is created only on success.
 */
static int nccl_device(struct nccl_priv *p, int cuda_device)
{
	int ndev = 0;
	cudaError_t e = cudaGetDeviceCount(&ndev);

	if (e != cudaSuccess || ndev == 0)
		return ar_seterr(-ENODEV, "no CUDA device (%s)",
				 e == cudaSuccess ? "none found" :
						    cudaGetErrorString(e));
	/* Slurm's --gpus-per-task=1 leaves one visible device: that one. */
	if (ndev == 1)
		cuda_device = 0;
	if (cuda_device < 0 || cuda_device >= ndev)
		return ar_seterr(-ENODEV, "CUDA device %d does not exist (%d found)",
				 cuda_device, ndev);
	e = cudaSetDevice(cuda_device);
	if (e == cudaSuccess)
		e = cudaStreamCreateWithFlags(&p->stream,
					      cudaStreamNonBlocking);
	if (e != cudaSuccess)
		return cuda_err(e, "device setup");
	p->device = cuda_device;
	return 0;
}

/*
 * Collective over the control channel, which @p and @tp already hold.
 * Every rank learns whether every other rank got its device before any of
 * them waits in ncclCommInitRank, so one rank without a GPU cannot leave
 * the others hanging there.  Frees @p and @tp on failure.
 */
static int nccl_bootstrap(struct migrate_transport *tp, struct nccl_priv *p,
			  int cuda_device, struct migrate_transport **tpp)
{
	struct {
		ncclUniqueId id;
		int ok;
	} msg;
	ncclResult_t r;
	bool have_device;
	int rc;

	char why[256] = "";

	rc = nccl_device(p, cuda_device);
	have_device = rc == 0;
	if (!have_device)
		snprintf(why, sizeof(why), "%s", ar_errmsg());
	tp->priv = p;
	rc = nccl_agree(tp, have_device, 60.0);
	if (!have_device) {
		rc = ar_seterr(-ENODEV, "%s", why);
		goto err;
	}
	if (rc < 0) {
		rc = ar_seterr(rc, "another rank has no usable CUDA device (%s)",
			       ar_errmsg());
		goto err;
	}

	/* The id travels with rank 0's verdict, so nobody joins a bad id. */
	memset(&msg, 0, sizeof(msg));
	if (tp->rank == 0) {
		r = ncclGetUniqueId(&msg.id);
		msg.ok = r == ncclSuccess;
	}
	rc = nccl_bcast(p, &msg, sizeof(msg));
	if (rc < 0)
		goto err;
	if (!msg.ok) {
		rc = ar_seterr(-AR_EPROTO, "NCCL GetUniqueId failed on rank 0");
		goto err;
	}
	r = ncclCommInitRank(&p->comm, tp->size, msg.id, tp->rank);
	if (r != ncclSuccess) {
		rc = nccl_err(r, "CommInitRank");
		goto err;
	}
	tp->ops = &nccl_ops;
	*tpp = tp;
	return 0;
err:
	if (have_device)
		cudaStreamDestroy(p->stream);
	nccl_ctl_free(p);
	free(tp);
	free(p);
	return rc;
}

#ifdef HAVE_MPI
int migrate_nccl_open(const void *mpi_comm, int cuda_device,
		      struct migrate_transport **tpp)
{
	MPI_Comm comm = mpi_comm ? *(const MPI_Comm *)mpi_comm : MPI_COMM_WORLD;
	struct migrate_transport *tp;
	struct nccl_priv *p;
	int inited = 0;

	*tpp = NULL;
	MPI_Initialized(&inited);
	if (!inited)
		return ar_seterr(-AR_EINVAL, "migrate: MPI is not initialized");
	tp = calloc(1, sizeof(*tp));
	p = calloc(1, sizeof(*p));
	if (!tp || !p) {
		free(tp);
		free(p);
		return -ENOMEM;
	}
	if (MPI_Comm_dup(comm, &p->ctl) != MPI_SUCCESS) {
		free(tp);
		free(p);
		return ar_seterr(-AR_EPROTO, "MPI Comm_dup failed");
	}
	MPI_Comm_set_errhandler(p->ctl, MPI_ERRORS_RETURN);
	MPI_Comm_rank(p->ctl, &tp->rank);
	MPI_Comm_size(p->ctl, &tp->size);
	return nccl_bootstrap(tp, p, cuda_device, tpp);
}
#endif /* HAVE_MPI */

int migrate_nccl_open_rdzv(struct migrate_rdzv *r, int cuda_device,
			   struct migrate_transport **tpp)
{
	struct migrate_transport *tp = calloc(1, sizeof(*tp));
	struct nccl_priv *p = calloc(1, sizeof(*p));

	*tpp = NULL;
	if (!tp || !p) {
		free(tp);
		free(p);
		return -ENOMEM;
	}
	p->rdzv = r;
	tp->rank = r->rank;
	tp->size = r->size;
	return nccl_bootstrap(tp, p, cuda_device, tpp);
}
