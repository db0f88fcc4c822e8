/*
 * transport_tcp.c - host-buffer transport over the rendezvous' TCP
 * connections: what runs a migration whose ranks were started separately
 * (one srun in each allocation), with no MPI at all.
 *
 * A step sends each transfer as an 8-byte length and the bytes, to each
 * peer in the order the caller lists them, over the one data connection of
 * the pair; the receiver reads in its own list order, which is the same
 * (docs/migrate.md: both sides post in tuple order).  All of a step's
 * peers are served at once by poll(), so two ranks that send to each
 * other never wait on each other's reads.  The timeout counts time without
 * progress, as the MPI transport's does.  On failure every data
 * connection is closed, so the peers stop at once with "rank R is gone"
 * rather than at their own timeout.
 */
#include "config.h"

#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define AR_INTERNAL
#include "migrate_private.h"

/* Where one transfer stands: its length header, then its bytes. */
struct tcp_io {
	struct migrate_xfer *x;
	uint64_t hdr;			/* big-endian length, as sent */
	size_t done;			/* of 8 + bytes */
};

/* One peer's transfers of the step, in list order, each way. */
struct tcp_peer {
	int peer;
	int fd;
	struct tcp_io *sends, *recvs;
	size_t nsends, nrecvs;
	size_t send_cap, recv_cap;
	size_t cur_send, cur_recv;
};

/* Sends what the socket takes: 1 when bytes moved, 0 when none, or -errno. */
static int tcp_send_some(struct tcp_peer *p)
{
	int moved = 0;

	while (p->cur_send < p->nsends) {
		struct tcp_io *io = &p->sends[p->cur_send];
		size_t total = 8 + io->x->bytes;
		const char *src;
		size_t len;
		ssize_t n;

		if (io->done < 8) {
			src = (const char *)&io->hdr + io->done;
			len = 8 - io->done;
		} else {
			src = (const char *)io->x->buf + (io->done - 8);
			len = total - io->done;
		}
		n = send(p->fd, src, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? moved : -errno;
		moved = 1;
		io->done += (size_t)n;
		if (io->done == total)
			p->cur_send++;
		if ((size_t)n < len)
			break;
	}
	return moved;
}

/* Reads what has come: 1 when bytes moved, 0 when none, or a negative code. */
static int tcp_recv_some(struct tcp_peer *p)
{
	int moved = 0;

	while (p->cur_recv < p->nrecvs) {
		struct tcp_io *io = &p->recvs[p->cur_recv];
		size_t total = 8 + io->x->bytes;
		char *dst;
		size_t len;
		ssize_t n;

		if (io->done < 8) {
			dst = (char *)&io->hdr + io->done;
			len = 8 - io->done;
		} else {
			dst = (char *)io->x->buf + (io->done - 8);
			len = total - io->done;
		}
		n = recv(p->fd, dst, len, MSG_DONTWAIT);
		if (n == 0)
			return -EPIPE;
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? moved : -errno;
		moved = 1;
		io->done += (size_t)n;
		if (io->done == 8 && be64toh(io->hdr) != io->x->bytes)
			return ar_seterr(-AR_EPROTO, "rank %d sent a transfer of %llu bytes where %zu were expected (the two sides run different migrations)",
					 p->peer,
					 (unsigned long long)be64toh(io->hdr),
					 io->x->bytes);
		if (io->done == total)
			p->cur_recv++;
		if ((size_t)n < len)
			break;
	}
	return moved;
}

static void tcp_peers_free(struct tcp_peer *ps, int n)
{
	for (int i = 0; i < n; i++) {
		free(ps[i].sends);
		free(ps[i].recvs);
	}
	free(ps);
}

/* Groups @xs by peer, keeping each peer's list order each way. */
static int tcp_peers_build(struct migrate_xfer *xs, int nx,
			   struct tcp_peer **psp, int *np)
{
	struct tcp_peer *ps = calloc((size_t)nx, sizeof(*ps));
	int n = 0;

	if (!ps)
		return -ENOMEM;
	for (int i = 0; i < nx; i++) {
		struct tcp_peer *p = NULL;
		struct tcp_io io = { .x = &xs[i],
				     .hdr = htobe64((uint64_t)xs[i].bytes) };
		int rc;

		for (int k = 0; k < n && !p; k++)
			if (ps[k].peer == xs[i].peer)
				p = &ps[k];
		if (!p) {
			p = &ps[n++];
			p->peer = xs[i].peer;
			p->fd = -1;
		}
		rc = xs[i].send ? AR_GROW(p->sends, p->send_cap, p->nsends + 1, 8) :
				  AR_GROW(p->recvs, p->recv_cap, p->nrecvs + 1, 8);
		if (rc < 0) {
			tcp_peers_free(ps, n);
			return -ENOMEM;
		}
		if (xs[i].send)
			p->sends[p->nsends++] = io;
		else
			p->recvs[p->nrecvs++] = io;
	}
	*psp = ps;
	*np = n;
	return 0;
}

static int tcp_step(struct migrate_transport *tp, struct migrate_xfer *xs,
		    int nx, double timeout_s)
{
	struct migrate_rdzv *r = tp->priv;
	struct tcp_peer *ps = NULL;
	struct pollfd *pfd = NULL;
	double last = ar_now();
	int n = 0, rc;

	rc = tcp_peers_build(xs, nx, &ps, &n);
	if (rc < 0)
		return rc;
	pfd = calloc((size_t)n, sizeof(*pfd));
	if (!pfd) {
		rc = -ENOMEM;
		goto out;
	}
	/* Connect to higher ranks first: that never waits on them. */
	for (int pass = 0; pass < 2 && rc == 0; pass++) {
		for (int i = 0; i < n && rc == 0; i++) {
			if ((ps[i].peer > tp->rank) != (pass == 0))
				continue;
			rc = rdzv_data_fd(r, ps[i].peer, ar_now() + timeout_s);
			if (rc >= 0) {
				ps[i].fd = rc;
				rc = 0;
			}
		}
	}
	while (rc == 0) {
		int active = 0, k = 0;

		for (int i = 0; i < n; i++) {
			short ev = (ps[i].cur_send < ps[i].nsends ? POLLOUT : 0) |
				   (ps[i].cur_recv < ps[i].nrecvs ? POLLIN : 0);

			if (!ev)
				continue;
			pfd[active++] = (struct pollfd){ .fd = ps[i].fd,
							 .events = ev };
		}
		if (!active)
			break;
		rc = poll(pfd, (nfds_t)active, 200);
		if (rc < 0 && errno != EINTR) {
			rc = -errno;
			break;
		}
		rc = 0;
		for (int i = 0; i < n && rc == 0; i++) {
			struct tcp_peer *p = &ps[i];
			short rev;

			if (p->cur_send >= p->nsends && p->cur_recv >= p->nrecvs)
				continue;
			rev = pfd[k++].revents;
			if (p->cur_recv < p->nrecvs &&
			    (rev & (POLLIN | POLLHUP | POLLERR)))
				rc = tcp_recv_some(p);
			if (rc >= 0 && p->cur_send < p->nsends &&
			    (rev & (POLLOUT | POLLHUP | POLLERR))) {
				int sent = tcp_send_some(p);

				rc = sent < 0 ? sent : rc | sent;
			}
			if (rc > 0)
				last = ar_now();
			if (rc == -EPIPE || rc == -ECONNRESET)
				rc = ar_seterr(-AR_EABORT, "rank %d is gone (its connection closed mid-step)",
					       p->peer);
			else if (rc < 0 && rc != -AR_EPROTO)
				rc = ar_seterr(rc, "rank %d: %s", p->peer,
					       ar_strerror(rc));
			if (rc > 0)
				rc = 0;
		}
		if (rc == 0 && ar_now() - last > timeout_s) {
			int peer = -1;

			for (int i = 0; i < n && peer < 0; i++)
				if (ps[i].cur_send < ps[i].nsends ||
				    ps[i].cur_recv < ps[i].nrecvs)
					peer = ps[i].peer;
			rc = ar_seterr(-AR_ETIMEOUT,
				       "no progress for %.1f s waiting for rank %d (dead or stalled)",
				       timeout_s, peer);
		}
	}
out:
	if (rc < 0)
		rdzv_data_close_all(r);
	free(pfd);
	tcp_peers_free(ps, n);
	return rc;
}

static int tcp_agree(struct migrate_transport *tp, bool ok, double timeout_s)
{
	return rdzv_agree(tp->priv, ok, timeout_s);
}

static int tcp_copy(struct migrate_transport *tp, void *dst, const void *src,
		    size_t bytes)
{
	memcpy(dst, src, bytes);
	return 0;
}

static void *tcp_alloc(struct migrate_transport *tp, size_t bytes)
{
	return malloc(bytes ? bytes : 1);
}

static void tcp_release(struct migrate_transport *tp, void *buf)
{
	free(buf);
}

static void tcp_destroy(struct migrate_transport *tp)
{
	free(tp);
}

static const struct migrate_transport_ops tcp_ops = {
	.name = "tcp",
	.step = tcp_step,
	.copy = tcp_copy,
	.agree = tcp_agree,
	.alloc = tcp_alloc,
	.release = tcp_release,
	.to_host = tcp_copy,
	.from_host = tcp_copy,
	.destroy = tcp_destroy,
};

int migrate_tcp_open(struct migrate_rdzv *r, struct migrate_transport **tpp)
{
	struct migrate_transport *tp = calloc(1, sizeof(*tp));

	*tpp = NULL;
	if (!tp)
		return -ENOMEM;
	tp->ops = &tcp_ops;
	tp->rank = r->rank;
	tp->size = r->size;
	tp->priv = r;
	*tpp = tp;
	return 0;
}
