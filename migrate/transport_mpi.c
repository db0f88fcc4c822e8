/*
 * transport_mpi.c - host-buffer transport over MPI point-to-point.
 *
 * Each step posts every receive, then every send, without blocking, and
 * polls them with MPI_Testsome.  The timeout counts time without progress
 * (no request of this rank completing), so a slow but live link never
 * trips it while a dead or stopped peer does.  Two private duplicates of
 * the caller's communicator keep the migration's messages and its
 * agreements apart from anything else the process sends.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#define AR_INTERNAL
#include "migrate_private.h"

/*
 * MPI counts are int: a transfer goes as messages of at most 1 GiB, or of
 * ARACHNE_MIGRATE_MPI_CHUNK bytes (from MIN_CHUNK to INT_MAX), which lets
 * the tests split a few MiB into many messages.
 */
#define DEFAULT_CHUNK	(1 << 30)
#define MIN_CHUNK	1024
#define DATA_TAG	0x4152		/* "AR" */

struct mpi_priv {
	MPI_Comm data;
	MPI_Comm ctl;
	size_t chunk;			/* bytes per message, on every rank */
};

/* Polling must leave the CPU to peers when ranks share cores. */
static void poll_pause(void)
{
	struct timespec ts = { 0, 20000 };

	nanosleep(&ts, NULL);
}

static int mpi_err(int code, const char *what)
{
	char text[MPI_MAX_ERROR_STRING];
	int len = 0;

	MPI_Error_string(code, text, &len);
	return ar_seterr(-AR_EPROTO, "MPI %s failed: %s", what, text);
}

static int mpi_step(struct migrate_transport *tp, struct migrate_xfer *xs,
		    int nx, double timeout_s)
{
	struct mpi_priv *p = tp->priv;
	MPI_Request *reqs;
	int *peer_of, *done;
	size_t nmsg = 0;
	int nreq, left, rc = 0, code;
	double last = ar_now();

	for (int i = 0; i < nx; i++)
		nmsg += (xs[i].bytes + p->chunk - 1) / p->chunk;
	if (nmsg > INT_MAX)
		return ar_seterr(-AR_EINVAL,
				 "migrate: one step needs %zu MPI messages; ARACHNE_MIGRATE_MPI_CHUNK is too small",
				 nmsg);
	nreq = (int)nmsg;
	reqs = calloc(nreq + 1, sizeof(*reqs));
	peer_of = calloc(nreq + 1, sizeof(*peer_of));
	done = calloc(nreq + 1, sizeof(*done));
	if (!reqs || !peer_of || !done) {
		rc = -ENOMEM;
		goto out;
	}

	/* Receives first, so that every send finds its match posted. */
	nreq = 0;
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < nx; i++) {
			struct migrate_xfer *x = &xs[i];

			if (x->send != (pass == 1))
				continue;
			for (size_t off = 0; off < x->bytes; off += p->chunk) {
				size_t rest = x->bytes - off;
				int n = (int)(rest > p->chunk ? p->chunk : rest);
				char *b = (char *)x->buf + off;
				MPI_Request *rq = &reqs[nreq];

				code = x->send ?
					MPI_Isend(b, n, MPI_BYTE, x->peer,
						  DATA_TAG, p->data, rq) :
					MPI_Irecv(b, n, MPI_BYTE, x->peer,
						  DATA_TAG, p->data, rq);
				if (code != MPI_SUCCESS) {
					rc = mpi_err(code, x->send ? "Isend" :
								     "Irecv");
					goto cancel;
				}
				peer_of[nreq++] = x->peer;
			}
		}
	}

	left = nreq;
	while (left > 0) {
		int outcount = 0;

		code = MPI_Testsome(nreq, reqs, &outcount, done,
				    MPI_STATUSES_IGNORE);
		if (code != MPI_SUCCESS) {
			rc = mpi_err(code, "Testsome");
			goto cancel;
		}
		if (outcount > 0 && outcount != MPI_UNDEFINED) {
			left -= outcount;
			last = ar_now();
			continue;
		}
		if (ar_now() - last > timeout_s) {
			int peer = -1;

			for (int i = 0; i < nreq && peer < 0; i++)
				if (reqs[i] != MPI_REQUEST_NULL)
					peer = peer_of[i];
			rc = ar_seterr(-AR_ETIMEOUT,
				       "no progress for %.1f s waiting for rank %d (dead or stalled)",
				       timeout_s, peer);
			goto cancel;
		}
		poll_pause();
	}
	goto out;

cancel:
	/*
	 * Receives are cancelled so no late message lands in a buffer the
	 * caller frees; sends to a silent peer are released to MPI, which the
	 * caller follows with MPI_Abort or a fresh communicator.
	 */
	for (int i = 0; i < nreq; i++) {
		if (reqs[i] == MPI_REQUEST_NULL)
			continue;
		MPI_Cancel(&reqs[i]);
		MPI_Request_free(&reqs[i]);
	}
out:
	free(reqs);
	free(peer_of);
	free(done);
	return rc;
}

static int mpi_agree(struct migrate_transport *tp, bool ok, double timeout_s)
{
	struct mpi_priv *p = tp->priv;
	int mine = ok ? 1 : 0, all = 0, flag = 0, code;
	MPI_Request req;
	double start = ar_now();

	code = MPI_Iallreduce(&mine, &all, 1, MPI_INT, MPI_MIN, p->ctl, &req);
	if (code != MPI_SUCCESS)
		return mpi_err(code, "Iallreduce");
	for (;;) {
		code = MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
		if (code != MPI_SUCCESS)
			return mpi_err(code, "Test");
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
}

static int mpi_copy(struct migrate_transport *tp, void *dst, const void *src,
		    size_t bytes)
{
	memcpy(dst, src, bytes);
	return 0;
}

static void *mpi_alloc(struct migrate_transport *tp, size_t bytes)
{
	return malloc(bytes ? bytes : 1);
}

static void mpi_release(struct migrate_transport *tp, void *buf)
{
	free(buf);
}

static void mpi_destroy(struct migrate_transport *tp)
{
	struct mpi_priv *p = tp->priv;
	int finalized = 0;

	MPI_Finalized(&finalized);
	if (!finalized) {
		MPI_Comm_free(&p->data);
		MPI_Comm_free(&p->ctl);
	}
	free(p);
	free(tp);
}

static const struct migrate_transport_ops mpi_ops = {
	.name = "mpi",
	.step = mpi_step,
	.copy = mpi_copy,
	.agree = mpi_agree,
	.alloc = mpi_alloc,
	.release = mpi_release,
	.to_host = mpi_copy,
	.from_host = mpi_copy,
	.destroy = mpi_destroy,
};

/*
 * The message size of every rank: a receive is posted with the size of the
 * message it is to match, so the ranks take the smallest they were given.
 * Collective; a rank given a bad size makes every rank fail.
 */
static int mpi_chunk_agree(struct mpi_priv *p)
{
	const char *env = getenv("ARACHNE_MIGRATE_MPI_CHUNK");
	long long mine = DEFAULT_CHUNK, all = 0;
	char *end;
	int code;

	if (env) {
		errno = 0;
		mine = strtoll(env, &end, 10);
		if (errno || end == env || *end || mine < MIN_CHUNK ||
		    mine > INT_MAX)
			mine = 0;
	}
	code = MPI_Allreduce(&mine, &all, 1, MPI_LONG_LONG, MPI_MIN, p->ctl);
	if (code != MPI_SUCCESS)
		return mpi_err(code, "Allreduce");
	if (all == 0)
		return ar_seterr(-AR_EINVAL,
				 "migrate: ARACHNE_MIGRATE_MPI_CHUNK must be a number of bytes from %d to %d on every rank",
				 MIN_CHUNK, INT_MAX);
	p->chunk = (size_t)all;
	return 0;
}

int migrate_mpi_open(const void *mpi_comm, struct migrate_transport **tpp)
{
	MPI_Comm comm = mpi_comm ? *(const MPI_Comm *)mpi_comm : MPI_COMM_WORLD;
	struct migrate_transport *tp;
	struct mpi_priv *p;
	int inited = 0, code, rc;

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
	code = MPI_Comm_dup(comm, &p->data);
	if (code == MPI_SUCCESS)
		code = MPI_Comm_dup(comm, &p->ctl);
	if (code != MPI_SUCCESS) {
		free(tp);
		free(p);
		return mpi_err(code, "Comm_dup");
	}
	/* Errors come back as codes: a dead peer must not end our cleanup. */
	MPI_Comm_set_errhandler(p->data, MPI_ERRORS_RETURN);
	MPI_Comm_set_errhandler(p->ctl, MPI_ERRORS_RETURN);
	rc = mpi_chunk_agree(p);
	if (rc < 0) {
		MPI_Comm_free(&p->data);
		MPI_Comm_free(&p->ctl);
		free(tp);
		free(p);
		return rc;
	}
	MPI_Comm_rank(p->data, &tp->rank);
	MPI_Comm_size(p->data, &tp->size);
	tp->ops = &mpi_ops;
	tp->priv = p;
	*tpp = tp;
	return 0;
}
