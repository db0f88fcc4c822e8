/*
 * comm.c - the job's communicators, over one of two worlds:
 *
 * - MPI's, when one launch (mpirun, srun) started every rank.  Blocking
 *   MPI calls spin, and ranks that share cores (the tests, a "cluster" of
 *   CPU cores) would then take the cores from the ranks that compute, so
 *   every wait tests its requests, spins a little, and then sleeps between
 *   tests, a little longer each time up to a bound.
 * - The job's own over TCP, when several launches started its ranks (two
 *   Slurm allocations, whose steps share no MPI world).  They meet through
 *   a rendezvous (migrate_rdzv_join()), which connects every pair; every
 *   message is a header (communicator, tag, length) and its bytes.  A wait
 *   polls every connection: it writes what the sends queued and reads
 *   whatever arrives into a queue per peer, where a receive finds it by
 *   communicator and tag, first come first taken.  No rank ever blocks on
 *   a write its peer does not read, so the order in which ranks send and
 *   receive cannot deadlock the transport.  A peer that ends ends this
 *   rank with the reason (its peers then see it end); as over MPI, a wait
 *   for a live peer is not bounded (an idle rank waits out the training).
 *   The meeting is bounded by the rendezvous' timeouts.
 *
 * Collectives over TCP run through member 0 of the communicator in member
 * order (gather, combine, send back), so their results are the same bits
 * on every run.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>

#include "ar.h"
#include "gpt.h"

#define SPIN_TESTS	64
#define SLEEP_MIN_NS	2000
#define SLEEP_MAX_NS	200000

/* Tags of the collectives over TCP (the program's tags are >= 0). */
#define TAG_GATHER	(-1)
#define TAG_RESULT	(-2)

/* ---------------------------------------------------------------------
 * The TCP world.
 * ------------------------------------------------------------------- */

struct net_hdr {
	int32_t ctx, tag;
	uint64_t len;
};

struct net_msg {
	struct net_msg *next;
	struct net_hdr hdr;
	char *data;			/* received: owned */
	const char *buf;		/* to send: the caller's */
	int peer;			/* to send: where to */
	size_t off;			/* bytes of header and data written */
	bool done;
};

struct net_peer {
	int fd;
	bool closed;			/* it ended: what it sent is all here */
	struct net_msg *out, *out_tail;	/* sends, in order */
	struct net_msg *in, *in_tail;	/* arrived, not yet received */
	struct net_msg *reading;	/* arriving */
	struct net_hdr hdr;
	size_t hdr_got;
	uint64_t data_got;
};

struct gpt_net {
	struct migrate_rdzv *rdzv;
	char dir[4096];
	int rank, size;
	struct net_peer *peers;		/* [size] */
	struct pollfd *pfd;		/* [size] */
	int *pfd_peer;
};

struct gpt_comm {
	MPI_Comm mpi;			/* MPI_COMM_NULL over TCP */
	struct gpt_net *net;		/* NULL over MPI */
	bool owns_net;
	int32_t ctx;
	int rank, size;
	int *members;			/* [size]: world ranks (TCP) */
};

static void net_fail(const struct gpt_net *net, const char *fmt, ...)
	__attribute__((format(printf, 2, 3), noreturn));

static void net_fail(const struct gpt_net *net, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "arachne-gpt: rank %d: ", net->rank);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	/* Ending closes every connection, which tells each peer at once. */
	fflush(stdout);
	_exit(1);
}

static size_t type_size(enum gpt_dtype t)
{
	switch (t) {
	case GPT_BYTE:
		return 1;
	case GPT_LONG:
		return sizeof(long);
	case GPT_FLOAT:
		return sizeof(float);
	case GPT_DOUBLE:
		return sizeof(double);
	}
	return 1;
}

/* Write what the queue holds for @peer, as far as the socket takes it. */
static void net_write(struct gpt_net *net, int peer)
{
	struct net_peer *p = &net->peers[peer];

	while (p->out) {
		struct net_msg *m = p->out;
		size_t total = sizeof(m->hdr) + m->hdr.len;
		const char *src;
		size_t n;
		ssize_t w;

		if (m->off < sizeof(m->hdr)) {
			src = (const char *)&m->hdr + m->off;
			n = sizeof(m->hdr) - m->off;
		} else {
			src = m->buf + (m->off - sizeof(m->hdr));
			n = total - m->off;
		}
		w = n ? send(p->fd, src, n, MSG_NOSIGNAL) : 0;
		if (w < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (w < 0)
			net_fail(net, "rank %d is gone (send: %s)", peer,
				 strerror(errno));
		m->off += (size_t)w;
		if (m->off < total)
			continue;
		m->done = true;
		p->out = m->next;
		if (!p->out)
			p->out_tail = NULL;
	}
}

/* Read whatever @peer sent into its queue. */
static void net_read(struct gpt_net *net, int peer)
{
	struct net_peer *p = &net->peers[peer];

	for (;;) {
		ssize_t r;

		if (!p->reading) {
			r = read(p->fd, (char *)&p->hdr + p->hdr_got,
				 sizeof(p->hdr) - p->hdr_got);
		} else {
			struct net_msg *m = p->reading;

			r = m->hdr.len == p->data_got ? 0 :
			    read(p->fd, m->data + p->data_got,
				 m->hdr.len - p->data_got);
		}
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (r < 0)
			net_fail(net, "rank %d is gone (receive: %s)", peer,
				 strerror(errno));
		if (r == 0 && !(p->reading && p->reading->hdr.len == p->data_got)) {
			/* A peer that finished ends; one in mid-message died. */
			if (p->reading || p->hdr_got)
				net_fail(net, "rank %d is gone (it ended in the middle of a message)",
					 peer);
			p->closed = true;
			return;
		}
		if (!p->reading) {
			p->hdr_got += (size_t)r;
			if (p->hdr_got < sizeof(p->hdr))
				continue;
			p->hdr_got = 0;
			p->data_got = 0;
			p->reading = calloc(1, sizeof(*p->reading));
			if (p->reading)
				p->reading->data = malloc(p->hdr.len ? p->hdr.len : 1);
			if (!p->reading || !p->reading->data)
				net_fail(net, "out of memory for %llu bytes from rank %d",
					 (unsigned long long)p->hdr.len, peer);
			p->reading->hdr = p->hdr;
			continue;
		}
		p->data_got += (uint64_t)r;
		if (p->data_got < p->reading->hdr.len)
			continue;
		if (p->in_tail)
			p->in_tail->next = p->reading;
		else
			p->in = p->reading;
		p->in_tail = p->reading;
		p->reading = NULL;
	}
}

/* One round: wait for any connection to be ready, move what can be moved. */
static void net_progress(struct gpt_net *net)
{
	int n = 0;

	for (int i = 0; i < net->size; i++) {
		if (i == net->rank || net->peers[i].closed)
			continue;
		net->pfd[n].fd = net->peers[i].fd;
		net->pfd[n].events = POLLIN | (net->peers[i].out ? POLLOUT : 0);
		net->pfd[n].revents = 0;
		net->pfd_peer[n++] = i;
	}
	if (n == 0)
		net_fail(net, "every peer has ended, and this rank still waits for one");
	if (poll(net->pfd, n, -1) < 0 && errno != EINTR)
		net_fail(net, "poll: %s", strerror(errno));
	for (int k = 0; k < n; k++) {
		int peer = net->pfd_peer[k];

		if (net->pfd[k].revents & POLLOUT)
			net_write(net, peer);
		if (net->pfd[k].revents & (POLLIN | POLLHUP | POLLERR))
			net_read(net, peer);
	}
}

/* Progress until *@done. */
static void net_send_wait(struct gpt_net *net, struct net_msg *m)
{
	while (!m->done) {
		if (net->peers[m->peer].closed)
			net_fail(net, "rank %d is gone (it ended before receiving what this rank sends)",
				 m->peer);
		net_progress(net);
	}
	free(m);
}

static struct net_msg *net_isend(struct gpt_net *net, int peer, int32_t ctx,
				 int32_t tag, const void *buf, size_t len)
{
	struct net_peer *p;
	struct net_msg *m;

	if (peer < 0 || peer >= net->size || peer == net->rank)
		net_fail(net, "a send to rank %d of %d", peer, net->size);
	p = &net->peers[peer];
	if (p->closed)
		net_fail(net, "rank %d is gone (it ended before this rank's send)",
			 peer);
	m = calloc(1, sizeof(*m));
	if (!m)
		net_fail(net, "out of memory");
	m->hdr = (struct net_hdr){ .ctx = ctx, .tag = tag, .len = len };
	m->buf = buf;
	m->peer = peer;
	if (p->out_tail)
		p->out_tail->next = m;
	else
		p->out = m;
	p->out_tail = m;
	net_write(net, peer);
	return m;
}

static void net_recv(struct gpt_net *net, int peer, int32_t ctx, int32_t tag,
		     void *buf, size_t len)
{
	struct net_peer *p;

	if (peer < 0 || peer >= net->size || peer == net->rank)
		net_fail(net, "a receive from rank %d of %d", peer, net->size);
	p = &net->peers[peer];
	for (;;) {
		struct net_msg **at = &p->in, *prev = NULL;

		for (; *at; prev = *at, at = &(*at)->next) {
			struct net_msg *m = *at;

			if (m->hdr.ctx != ctx || m->hdr.tag != tag)
				continue;
			if (m->hdr.len != len)
				net_fail(net, "rank %d sent %llu bytes where %zu were expected (tag %d)",
					 peer, (unsigned long long)m->hdr.len,
					 len, tag);
			memcpy(buf, m->data, len);
			*at = m->next;
			if (p->in_tail == m)
				p->in_tail = prev;
			free(m->data);
			free(m);
			return;
		}
		if (p->closed)
			net_fail(net, "rank %d is gone (it ended before sending what this rank waits for)",
				 peer);
		net_progress(net);
	}
}

static void net_free(struct gpt_net *net)
{
	if (!net)
		return;
	for (int i = 0; net->peers && i < net->size; i++) {
		struct net_peer *p = &net->peers[i];

		while (p->in) {
			struct net_msg *m = p->in;

			p->in = m->next;
			free(m->data);
			free(m);
		}
		if (p->reading) {
			free(p->reading->data);
			free(p->reading);
		}
	}
	free(net->peers);
	free(net->pfd);
	free(net->pfd_peer);
	migrate_rdzv_close(net->rdzv);
	free(net);
}

/* ---------------------------------------------------------------------
 * Communicators.
 * ------------------------------------------------------------------- */

int gpt_comm_mpi(MPI_Comm parent, struct gpt_comm **cp)
{
	struct gpt_comm *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	MPI_Comm_dup(parent, &c->mpi);
	MPI_Comm_rank(c->mpi, &c->rank);
	MPI_Comm_size(c->mpi, &c->size);
	*cp = c;
	return 0;
}

int gpt_comm_tcp(const struct migrate_rdzv_opts *o, struct gpt_comm **cp)
{
	struct gpt_comm *c = calloc(1, sizeof(*c));
	struct gpt_net *net = calloc(1, sizeof(*net));
	int rc;

	if (!c || !net) {
		free(c);
		free(net);
		return -ENOMEM;
	}
	c->mpi = MPI_COMM_NULL;
	c->net = net;
	c->owns_net = true;
	net->rank = o->rank;
	net->size = o->size;
	snprintf(net->dir, sizeof(net->dir), "%s", o->dir);
	net->peers = calloc(o->size, sizeof(*net->peers));
	net->pfd = calloc(o->size, sizeof(*net->pfd));
	net->pfd_peer = calloc(o->size, sizeof(*net->pfd_peer));
	c->members = calloc(o->size, sizeof(int));
	if (!net->peers || !net->pfd || !net->pfd_peer || !c->members) {
		rc = -ENOMEM;
		goto fail;
	}
	rc = migrate_rdzv_join(o, &net->rdzv);
	if (rc == 0)
		rc = migrate_rdzv_connect_all(net->rdzv);
	if (rc < 0)
		goto fail;
	for (int i = 0; i < o->size; i++) {
		net->peers[i].fd = migrate_rdzv_fd(net->rdzv, i);
		c->members[i] = i;
	}
	c->rank = o->rank;
	c->size = o->size;
	*cp = c;
	return 0;
fail:
	net_free(net);
	free(c->members);
	free(c);
	return rc;
}

int gpt_comm_sub(struct gpt_comm *parent, const int *ranks, int n, int tag,
		 struct gpt_comm **cp)
{
	struct gpt_comm *c = calloc(1, sizeof(*c));
	int rc = 0;

	if (!c)
		return -ENOMEM;
	c->mpi = MPI_COMM_NULL;
	if (!parent->net) {
		MPI_Group world, group;

		MPI_Comm_group(parent->mpi, &world);
		MPI_Group_incl(world, n, ranks, &group);
		if (MPI_Comm_create_group(parent->mpi, group, tag, &c->mpi) !=
		    MPI_SUCCESS)
			rc = ar_seterr(-AR_EPROTO, "MPI_Comm_create_group failed");
		MPI_Group_free(&group);
		MPI_Group_free(&world);
		if (rc == 0) {
			MPI_Comm_rank(c->mpi, &c->rank);
			MPI_Comm_size(c->mpi, &c->size);
		}
	} else {
		c->net = parent->net;
		c->ctx = 1 + tag;
		c->size = n;
		c->rank = -1;
		c->members = malloc(n * sizeof(int));
		if (!c->members)
			rc = -ENOMEM;
		for (int i = 0; rc == 0 && i < n; i++) {
			c->members[i] = parent->members[ranks[i]];
			if (c->members[i] == parent->net->rank)
				c->rank = i;
		}
		if (rc == 0 && c->rank < 0)
			rc = ar_seterr(-AR_EINVAL, "a communicator made by a rank not in it");
	}
	if (rc < 0) {
		free(c->members);
		free(c);
		return rc;
	}
	*cp = c;
	return 0;
}

void gpt_comm_free(struct gpt_comm *c)
{
	if (!c)
		return;
	if (c->mpi != MPI_COMM_NULL)
		MPI_Comm_free(&c->mpi);
	if (c->owns_net)
		net_free(c->net);
	free(c->members);
	free(c);
}

int gpt_comm_rank(const struct gpt_comm *c)
{
	return c->rank;
}

int gpt_comm_size(const struct gpt_comm *c)
{
	return c->size;
}

const char *gpt_comm_tcp_dir(const struct gpt_comm *c)
{
	return c->net ? c->net->dir : NULL;
}

MPI_Comm gpt_comm_mpi_of(const struct gpt_comm *c)
{
	return c->mpi;
}

void gpt_comm_abort(struct gpt_comm *c)
{
	fflush(stdout);
	if (!c->net)
		MPI_Abort(c->mpi, 1);
	_exit(1);
}

/* ---------------------------------------------------------------------
 * Point to point.
 * ------------------------------------------------------------------- */

static MPI_Datatype mpi_type(enum gpt_dtype t)
{
	switch (t) {
	case GPT_BYTE:
		return MPI_BYTE;
	case GPT_LONG:
		return MPI_LONG;
	case GPT_FLOAT:
		return MPI_FLOAT;
	case GPT_DOUBLE:
		return MPI_DOUBLE;
	}
	return MPI_BYTE;
}

static void mpi_waitall(int n, MPI_Request *reqs)
{
	long ns = SLEEP_MIN_NS;
	int done = 0;

	for (int i = 0;; i++) {
		MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
		if (done)
			return;
		if (i < SPIN_TESTS)
			continue;
		nanosleep(&(struct timespec){ 0, ns }, NULL);
		if (ns < SLEEP_MAX_NS)
			ns += ns / 2;
	}
}

void gpt_isend(struct gpt_comm *c, const void *buf, size_t count,
	       enum gpt_dtype t, int dst, int tag, struct gpt_req *req)
{
	memset(req, 0, sizeof(*req));
	req->mpi = MPI_REQUEST_NULL;
	if (!c->net) {
		MPI_Isend(buf, (int)count, mpi_type(t), dst, tag, c->mpi,
			  &req->mpi);
		return;
	}
	req->net = c->net;
	req->peer = c->members[dst];
	req->send = net_isend(c->net, req->peer, c->ctx, tag, buf,
			      count * type_size(t));
}

void gpt_waitall(int n, struct gpt_req *reqs)
{
	for (int i = 0; i < n; i++) {
		if (reqs[i].send) {
			net_send_wait(reqs[i].net, reqs[i].send);
			reqs[i].send = NULL;
		}
	}
	/* MPI's requests together (MPI_REQUEST_NULL where done or TCP's). */
	for (int i = 0; i < n; i++) {
		long ns = SLEEP_MIN_NS;
		int done = 0;

		for (int k = 0; reqs[i].mpi != MPI_REQUEST_NULL; k++) {
			MPI_Test(&reqs[i].mpi, &done, MPI_STATUS_IGNORE);
			if (done || k < SPIN_TESTS)
				continue;
			nanosleep(&(struct timespec){ 0, ns }, NULL);
			if (ns < SLEEP_MAX_NS)
				ns += ns / 2;
		}
	}
}

void gpt_send(struct gpt_comm *c, const void *buf, size_t count,
	      enum gpt_dtype t, int dst, int tag)
{
	struct gpt_req req;

	gpt_isend(c, buf, count, t, dst, tag, &req);
	gpt_waitall(1, &req);
}

void gpt_recv(struct gpt_comm *c, void *buf, size_t count, enum gpt_dtype t,
	      int src, int tag)
{
	MPI_Request req;

	if (c->net) {
		net_recv(c->net, c->members[src], c->ctx, tag, buf,
			 count * type_size(t));
		return;
	}
	MPI_Irecv(buf, (int)count, mpi_type(t), src, tag, c->mpi, &req);
	mpi_waitall(1, &req);
}

/* ---------------------------------------------------------------------
 * Collectives.
 * ------------------------------------------------------------------- */

static void combine(void *acc, const void *in, size_t count, enum gpt_dtype t,
		    enum gpt_op op)
{
	for (size_t i = 0; i < count; i++) {
		switch (t) {
		case GPT_BYTE:
			break;
		case GPT_LONG: {
			long *a = acc;
			const long *b = in;

			a[i] = op == GPT_SUM ? a[i] + b[i] :
					       (a[i] > b[i] ? a[i] : b[i]);
			break;
		}
		case GPT_FLOAT: {
			float *a = acc;
			const float *b = in;

			a[i] = op == GPT_SUM ? a[i] + b[i] :
					       (a[i] > b[i] ? a[i] : b[i]);
			break;
		}
		case GPT_DOUBLE: {
			double *a = acc;
			const double *b = in;

			a[i] = op == GPT_SUM ? a[i] + b[i] :
					       (a[i] > b[i] ? a[i] : b[i]);
			break;
		}
		}
	}
}

/* Member 0 has the result in @buf: send it to every other member. */
static void tcp_scatter_result(struct gpt_comm *c, void *buf, size_t len)
{
	struct net_msg **sent;

	if (c->rank != 0) {
		net_recv(c->net, c->members[0], c->ctx, TAG_RESULT, buf, len);
		return;
	}
	sent = calloc(c->size, sizeof(*sent));
	if (!sent)
		net_fail(c->net, "out of memory");
	for (int i = 1; i < c->size; i++)
		sent[i] = net_isend(c->net, c->members[i], c->ctx, TAG_RESULT,
				    buf, len);
	for (int i = 1; i < c->size; i++)
		net_send_wait(c->net, sent[i]);
	free(sent);
}

void gpt_allreduce(struct gpt_comm *c, void *buf, size_t count,
		   enum gpt_dtype t, enum gpt_op op)
{
	size_t len = count * type_size(t);

	if (!c->net) {
		MPI_Request req;

		MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(t),
			       op == GPT_SUM ? MPI_SUM : MPI_MAX, c->mpi, &req);
		mpi_waitall(1, &req);
		return;
	}
	if (c->size < 2)
		return;
	if (c->rank != 0) {
		net_send_wait(c->net, net_isend(c->net, c->members[0], c->ctx,
						TAG_GATHER, buf, len));
	} else {
		char *in = malloc(len ? len : 1);

		if (!in)
			net_fail(c->net, "out of memory for %zu bytes", len);
		for (int i = 1; i < c->size; i++) {
			net_recv(c->net, c->members[i], c->ctx, TAG_GATHER, in,
				 len);
			combine(buf, in, count, t, op);
		}
		free(in);
	}
	tcp_scatter_result(c, buf, len);
}

/*
 * Over MPI the sum runs while the caller goes on to the next; over TCP it
 * runs now.  A rank sums its groups in the plan's order, so the group of
 * the lowest index not done has every member at it: no deadlock.
 */
void gpt_iallreduce(struct gpt_comm *c, void *buf, size_t count,
		    enum gpt_dtype t, enum gpt_op op, struct gpt_req *req)
{
	memset(req, 0, sizeof(*req));
	req->mpi = MPI_REQUEST_NULL;
	if (c->net) {
		gpt_allreduce(c, buf, count, t, op);
		return;
	}
	MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(t),
		       op == GPT_SUM ? MPI_SUM : MPI_MAX, c->mpi, &req->mpi);
}

void gpt_allgather(struct gpt_comm *c, const void *send, size_t count,
		   enum gpt_dtype t, void *recv)
{
	size_t len = count * type_size(t);

	if (!c->net) {
		MPI_Request req;

		MPI_Iallgather(send, (int)count, mpi_type(t), recv, (int)count,
			       mpi_type(t), c->mpi, &req);
		mpi_waitall(1, &req);
		return;
	}
	memcpy((char *)recv + (size_t)c->rank * len, send, len);
	if (c->size < 2)
		return;
	if (c->rank != 0)
		net_send_wait(c->net, net_isend(c->net, c->members[0], c->ctx,
						TAG_GATHER, send, len));
	else
		for (int i = 1; i < c->size; i++)
			net_recv(c->net, c->members[i], c->ctx, TAG_GATHER,
				 (char *)recv + (size_t)i * len, len);
	tcp_scatter_result(c, recv, len * c->size);
}

void gpt_bcast(struct gpt_comm *c, void *buf, size_t count, enum gpt_dtype t,
	       int root)
{
	size_t len = count * type_size(t);

	if (!c->net) {
		MPI_Request req;

		MPI_Ibcast(buf, (int)count, mpi_type(t), root, c->mpi, &req);
		mpi_waitall(1, &req);
		return;
	}
	if (c->rank != root) {
		net_recv(c->net, c->members[root], c->ctx, TAG_RESULT, buf, len);
		return;
	}
	for (int i = 0; i < c->size; i++)
		if (i != root)
			net_send_wait(c->net,
				      net_isend(c->net, c->members[i], c->ctx,
						TAG_RESULT, buf, len));
}

void gpt_barrier(struct gpt_comm *c)
{
	long token = 0;

	if (!c->net) {
		MPI_Request req;

		MPI_Ibarrier(c->mpi, &req);
		mpi_waitall(1, &req);
		return;
	}
	gpt_allreduce(c, &token, 1, GPT_LONG, GPT_MAX);
}
