/*
 * rdzv.c - the rendezvous: processes started separately (one srun in each
 * allocation of an elastic job, two mpiruns, a trainer's ranks) meet through
 * a directory they all see, and then talk over TCP.
 *
 * Rank 0 listens on an ephemeral port and publishes its addresses, the port
 * and a random session number in DIR/NAME.rdzv (written atomically).  Every
 * other rank polls for that file, connects, and says hello (session, rank,
 * size, its own listening port).  When all size - 1 hellos are in, rank 0
 * sends everyone the table of every rank's addresses and port and removes
 * the file.  These rank-0 connections carry the control messages
 * (broadcasts and agreements); data goes over one more connection per pair
 * of ranks, made on first use by the lower rank.
 *
 * Stale files: a file left by a meeting that crashed names a dead listener
 * (connection refused) or an old session (refused by rank 0 with a
 * message); either way the member re-reads the file until the deadline.
 *
 * Every wait is bounded by the rendezvous' timeout, and a member that
 * dies shows as an end of file on its connections, so the others learn it
 * at once instead of at the timeout.
 */
#include "config.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <net/if.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define AR_INTERNAL
#include "migrate_private.h"

#define RDZV_MAGIC		0x41524456u	/* "ARDV" */
#define RDZV_DEFAULT_TIMEOUT_S	60.0
#define RDZV_CTL_MAX		(16u << 20)	/* a control message: the table */
#define RDZV_POLL_MS		50

enum rdzv_type {
	RDZV_HELLO = 1,		/* member -> rank 0: who I am */
	RDZV_TABLE,		/* rank 0 -> member: everyone's address */
	RDZV_ERROR,		/* either way: why the meeting failed */
	RDZV_PEER,		/* lower rank -> higher: a data connection */
	RDZV_BCAST,		/* bytes of a broadcast */
	RDZV_AGREE,		/* member -> rank 0: my verdict */
	RDZV_VERDICT,		/* rank 0 -> member: everyone's verdict */
	RDZV_DATA,		/* a point-to-point message */
};

struct rdzv_hdr {
	uint32_t magic;
	uint32_t type;
	uint64_t len;
};

/* ------------------------------------------------------------ sockets */

static void rdzv_nodelay(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Wait until @fd is ready for @events or @deadline passes. */
static int rdzv_wait(int fd, short events, double deadline)
{
	struct pollfd p = { .fd = fd, .events = events };

	for (;;) {
		double left = deadline - ar_now();
		int rc;

		if (left <= 0)
			return -AR_ETIMEOUT;
		rc = poll(&p, 1, left > 1.0 ? 1000 : (int)(left * 1000) + 1);
		if (rc > 0)
			return 0;
		if (rc < 0 && errno != EINTR)
			return -errno;
	}
}

int rdzv_write_all(int fd, const void *buf, size_t len, double deadline)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		n = rdzv_wait(fd, POLLOUT, deadline);
		if (n < 0)
			return (int)n;
	}
	return 0;
}

/* -EPIPE when the peer closed the connection before @len bytes came. */
int rdzv_read_all(int fd, void *buf, size_t len, double deadline)
{
	char *p = buf;

	while (len > 0) {
		ssize_t n = recv(fd, p, len, MSG_DONTWAIT);

		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n == 0)
			return -EPIPE;
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
		n = rdzv_wait(fd, POLLIN, deadline);
		if (n < 0)
			return (int)n;
	}
	return 0;
}

static int rdzv_send_msg(int fd, enum rdzv_type type, const void *buf,
			 size_t len, double deadline)
{
	struct rdzv_hdr h = {
		.magic = htobe32(RDZV_MAGIC),
		.type = htobe32((uint32_t)type),
		.len = htobe64((uint64_t)len),
	};
	int rc = rdzv_write_all(fd, &h, sizeof(h), deadline);

	return rc == 0 && len ? rdzv_write_all(fd, buf, len, deadline) : rc;
}

static int rdzv_send_json(int fd, enum rdzv_type type, json_t *j,
			  double deadline)
{
	char *text = json_dumps(j, JSON_COMPACT);
	int rc;

	json_decref(j);
	if (!text)
		return -ENOMEM;
	rc = rdzv_send_msg(fd, type, text, strlen(text), deadline);
	free(text);
	return rc;
}

/*
 * One message header from @fd: its type and length (at most @max).
 * The payload is read by the caller.
 */
static int rdzv_recv_hdr(int fd, enum rdzv_type *typep, uint64_t *lenp,
			 uint64_t max, double deadline)
{
	struct rdzv_hdr h;
	int rc = rdzv_read_all(fd, &h, sizeof(h), deadline);

	if (rc < 0)
		return rc;
	if (be32toh(h.magic) != RDZV_MAGIC)
		return ar_seterr(-AR_EPROTO, "rendezvous: a peer sent a message that is not ours");
	*typep = (enum rdzv_type)be32toh(h.type);
	*lenp = be64toh(h.len);
	if (*lenp > max)
		return ar_seterr(-AR_EPROTO, "rendezvous: a %" PRIu64 "-byte message where at most %" PRIu64 " fit",
				 *lenp, max);
	return 0;
}

/* A whole control message, as a NUL-terminated string in *@textp. */
static int rdzv_recv_text(int fd, enum rdzv_type *typep, char **textp,
			  double deadline)
{
	uint64_t len;
	char *text;
	int rc;

	*textp = NULL;
	rc = rdzv_recv_hdr(fd, typep, &len, RDZV_CTL_MAX, deadline);
	if (rc < 0)
		return rc;
	text = malloc(len + 1);
	if (!text)
		return -ENOMEM;
	rc = rdzv_read_all(fd, text, len, deadline);
	if (rc < 0) {
		free(text);
		return rc;
	}
	text[len] = '\0';
	*textp = text;
	return 0;
}

static int rdzv_send_error(int fd, const char *msg, double deadline)
{
	return rdzv_send_msg(fd, RDZV_ERROR, msg, strlen(msg), deadline);
}

/* A TCP listener on every IPv4 address, on an ephemeral port. */
static int rdzv_listen(uint16_t *portp)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd, rc;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return ar_seterr(-errno, "rendezvous: socket: %s",
				 strerror(errno));
	sa.sin_addr.s_addr = htonl(INADDR_ANY);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(fd, SOMAXCONN) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
		rc = -errno;
		close(fd);
		return ar_seterr(rc, "rendezvous: cannot listen on TCP: %s",
				 strerror(-rc));
	}
	*portp = ntohs(sa.sin_port);
	return fd;
}

/*
 * The addresses others may reach this host at: @given when the caller
 * names one, else every IPv4 address of an interface that is up, loopback
 * last (it works only when everyone shares this host, as in tests).
 */
static json_t *rdzv_local_addrs(const char *given)
{
	json_t *list = json_array(), *lo = json_array();
	struct ifaddrs *ifs = NULL;

	if (!list || !lo)
		goto out;
	if (given) {
		json_array_append_new(list, json_string(given));
		goto out;
	}
	if (getifaddrs(&ifs) == 0) {
		for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
			char text[INET_ADDRSTRLEN];
			const struct sockaddr_in *sin;

			if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET ||
			    !(i->ifa_flags & IFF_UP))
				continue;
			sin = (const struct sockaddr_in *)i->ifa_addr;
			inet_ntop(AF_INET, &sin->sin_addr, text, sizeof(text));
			json_array_append_new(ntohl(sin->sin_addr.s_addr) >> 24 == 127 ?
					      lo : list, json_string(text));
		}
		freeifaddrs(ifs);
	}
	json_array_extend(list, lo);
	if (json_array_size(list) == 0)
		json_array_append_new(list, json_string("127.0.0.1"));
out:
	json_decref(lo);
	return list;
}

/*
 * Connect to @port at the first of @addrs that answers, each try bounded
 * by a few seconds and all by @deadline.  -ECONNREFUSED when nobody
 * listens (a stale contact file, or a peer not up yet).
 */
static int rdzv_connect(const json_t *addrs, uint16_t port, double deadline)
{
	int last = -ECONNREFUSED;
	const json_t *a;
	size_t i;

	json_array_foreach(addrs, i, a) {
		struct sockaddr_in sa = { .sin_family = AF_INET,
					  .sin_port = htons(port) };
		double until = ar_now() + 3.0;
		socklen_t elen = sizeof(int);
		int fd, err = 0, rc;

		if (!json_is_string(a) ||
		    inet_pton(AF_INET, json_string_value(a), &sa.sin_addr) != 1)
			continue;
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
			    0);
		if (fd < 0)
			return -errno;
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			rdzv_nodelay(fd);
			return fd;
		}
		if (errno != EINPROGRESS) {
			last = -errno;
			close(fd);
			continue;
		}
		rc = rdzv_wait(fd, POLLOUT, until < deadline ? until : deadline);
		if (rc == 0 &&
		    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) == 0 &&
		    err == 0) {
			rdzv_nodelay(fd);
			return fd;
		}
		last = rc < 0 ? rc : -(err ? err : errno);
		close(fd);
	}
	return last;
}

/* ------------------------------------------------------------ joining */

static const char *rdzv_session_hex(uint64_t s, char buf[17])
{
	snprintf(buf, 17, "%016" PRIx64, s);
	return buf;
}

static uint64_t rdzv_random64(void)
{
	uint64_t v = 0;

	if (getrandom(&v, sizeof(v), 0) != sizeof(v))
		v = (uint64_t)getpid() << 32 ^ (uint64_t)(ar_now() * 1e9);
	return v ? v : 1;
}

static int rdzv_peers_alloc(struct migrate_rdzv *r)
{
	r->peers = calloc((size_t)r->size, sizeof(*r->peers));
	if (!r->peers)
		return -ENOMEM;
	for (int i = 0; i < r->size; i++) {
		r->peers[i].ctl = -1;
		r->peers[i].data = -1;
	}
	return 0;
}

/* Fills peer @rank's contact from one table entry. */
static int rdzv_peer_set(struct migrate_rdzv *r, int rank, const json_t *e)
{
	json_t *port = json_object_get(e, "port");
	json_t *addrs = json_object_get(e, "addrs");

	if (!json_is_integer(port) || json_integer_value(port) <= 0 ||
	    json_integer_value(port) > 65535 || !json_is_array(addrs))
		return ar_seterr(-AR_EPROTO, "rendezvous: bad table entry for rank %d",
				 rank);
	r->peers[rank].port = (uint16_t)json_integer_value(port);
	json_decref(r->peers[rank].addrs);
	r->peers[rank].addrs = json_incref(addrs);
	return 0;
}

/*
 * 0, or -AR_EABORT with the first line of the call-off file when it
 * exists: the change this meeting was for was abandoned.
 */
static int rdzv_called_off(const struct migrate_rdzv *r)
{
	char *text = NULL;
	size_t len = 0;

	if (!r->called_off[0] || access(r->called_off, F_OK) != 0)
		return 0;
	if (ar_file_read(r->called_off, 4096, &text, &len) < 0 || !len) {
		free(text);
		return ar_seterr(-AR_EABORT, "rendezvous %s: called off (%s)",
				 r->name, r->called_off);
	}
	text[strcspn(text, "\n")] = '\0';
	ar_seterr(-AR_EABORT, "rendezvous %s: called off: %s", r->name, text);
	free(text);
	return -AR_EABORT;
}

/* Rank 0: wait for a hello, looking for a call-off between polls. */
static int rdzv_wait_hello(const struct migrate_rdzv *r, double deadline)
{
	for (;;) {
		double slice = ar_now() + RDZV_POLL_MS / 1000.0;
		int rc = rdzv_called_off(r);

		if (rc < 0)
			return rc;
		rc = rdzv_wait(r->listen_fd, POLLIN,
			       slice < deadline ? slice : deadline);
		if (rc != -AR_ETIMEOUT || ar_now() >= deadline)
			return rc;
	}
}

/*
 * Rank 0: accept hellos until every rank came or the deadline passed.
 * Each accepted member's own address (as rank 0 sees it) goes first in
 * its address list.
 */
static int rdzv_host_gather(struct migrate_rdzv *r, double deadline)
{
	char want[17], why[512];
	int arrived = 1;

	rdzv_session_hex(r->session, want);
	while (arrived < r->size) {
		struct sockaddr_in sa;
		socklen_t salen = sizeof(sa);
		json_t *hello = NULL, *addrs;
		enum rdzv_type type;
		char *text = NULL, peer[INET_ADDRSTRLEN] = "";
		const char *session = NULL;
		int fd, rank = -1, size = -1, rc;

		rc = rdzv_wait_hello(r, deadline);
		if (rc < 0)
			return rc;
		fd = accept4(r->listen_fd, (struct sockaddr *)&sa, &salen,
			     SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0)
			continue;
		rdzv_nodelay(fd);
		inet_ntop(AF_INET, &sa.sin_addr, peer, sizeof(peer));
		/* A member says hello at once; a silent one is dropped. */
		rc = rdzv_recv_text(fd, &type, &text,
				    ar_now() + 5.0 < deadline ? ar_now() + 5.0 :
								 deadline);
		if (rc == 0 && type == RDZV_HELLO)
			hello = json_loads(text, 0, NULL);
		free(text);
		if (!hello ||
		    json_unpack(hello, "{s:s, s:i, s:i}", "session", &session,
				"rank", &rank, "size", &size) < 0) {
			json_decref(hello);
			close(fd);
			continue;
		}
		why[0] = '\0';
		if (strcmp(session, want))
			snprintf(why, sizeof(why), "rendezvous %s: stale session (re-read the contact file)",
				 r->name);
		else if (size != r->size)
			snprintf(why, sizeof(why), "rendezvous %s: rank %d was started for %d ranks, rank 0 for %d",
				 r->name, rank, size, r->size);
		else if (rank < 1 || rank >= r->size)
			snprintf(why, sizeof(why), "rendezvous %s: rank %d is not in 1..%d",
				 r->name, rank, r->size - 1);
		else if (r->peers[rank].ctl >= 0)
			snprintf(why, sizeof(why), "rendezvous %s: rank %d came twice",
				 r->name, rank);
		if (why[0]) {
			rdzv_send_error(fd, why, deadline);
			close(fd);
			json_decref(hello);
			continue;
		}
		rc = rdzv_peer_set(r, rank, hello);
		addrs = r->peers[rank].addrs;
		if (rc == 0 && peer[0]) {
			/* Copy before changing: the list belongs to @hello. */
			json_t *mine = json_array();

			json_array_append_new(mine, json_string(peer));
			json_array_extend(mine, addrs);
			json_decref(r->peers[rank].addrs);
			r->peers[rank].addrs = mine;
		}
		json_decref(hello);
		if (rc < 0) {
			close(fd);
			continue;
		}
		r->peers[rank].ctl = fd;
		arrived++;
	}
	return 0;
}

static json_t *rdzv_table(const struct migrate_rdzv *r)
{
	json_t *ranks = json_array();

	for (int i = 0; i < r->size; i++)
		json_array_append_new(ranks, json_pack("{s:i, s:O}", "port",
					(int)r->peers[i].port, "addrs",
					r->peers[i].addrs));
	return json_pack("{s:o}", "ranks", ranks);
}

static int rdzv_join_host(struct migrate_rdzv *r, const char *addr,
			  double deadline)
{
	char hex[17], missing[512] = "";
	json_t *addrs = rdzv_local_addrs(addr), *contact;
	char *text;
	int rc;
	size_t used = 0;

	r->session = rdzv_random64();
	r->peers[0].port = r->port;
	r->peers[0].addrs = json_incref(addrs);
	contact = json_pack("{s:i, s:s, s:s, s:i, s:i, s:O, s:i}",
			    "arachne_rendezvous", 1, "name", r->name,
			    "session", rdzv_session_hex(r->session, hex),
			    "size", r->size, "port", (int)r->port,
			    "addrs", addrs, "pid", (int)getpid());
	json_decref(addrs);
	text = contact ? json_dumps(contact, JSON_COMPACT) : NULL;
	json_decref(contact);
	if (!text)
		return -ENOMEM;
	rc = ar_file_write_atomic(r->path, text, strlen(text), 0644);
	free(text);
	if (rc < 0)
		return ar_seterr(rc, "rendezvous %s: cannot publish %s: %s",
				 r->name, r->path, strerror(-rc));
	rc = rdzv_host_gather(r, deadline);
	unlink(r->path);
	if (rc == -AR_ETIMEOUT) {
		for (int i = 1; i < r->size && used < sizeof(missing); i++)
			if (r->peers[i].ctl < 0)
				used += snprintf(missing + used,
						 sizeof(missing) - used, "%s%d",
						 used ? ", " : "", i);
		rc = ar_seterr(-AR_ETIMEOUT, "rendezvous %s: rank%s %s did not arrive within %.0f s",
			       r->name, strchr(missing, ',') ? "s" : "",
			       missing, r->join_timeout_s);
	}
	if (rc == -AR_ETIMEOUT || rc == -AR_EABORT) {
		/* Those who came hear why, rather than wait for the table. */
		for (int i = 1; i < r->size; i++)
			if (r->peers[i].ctl >= 0)
				rdzv_send_error(r->peers[i].ctl, ar_errmsg(),
						ar_now() + 1.0);
		return rc;
	}
	if (rc < 0)
		return rc;
	for (int i = 1; i < r->size; i++) {
		rc = rdzv_send_json(r->peers[i].ctl, RDZV_TABLE, rdzv_table(r),
				    deadline);
		if (rc < 0)
			return ar_seterr(rc, "rendezvous %s: rank %d left before the table: %s",
					 r->name, i, ar_strerror(rc));
	}
	return 0;
}

/*
 * A member: read the contact file, connect, say hello, wait for the
 * table.  A missing file, a refused connection or a stale session are
 * retried until the deadline; an error from rank 0 ends the join.
 */
static int rdzv_join_member(struct migrate_rdzv *r, const char *addr,
			    double deadline)
{
	json_t *mine = rdzv_local_addrs(addr);
	const char *last = "the contact file does not exist yet";
	char lastbuf[256], session_seen[17] = "";
	int rc;

	while (ar_now() < deadline) {
		json_t *contact = NULL, *table, *ranks;
		const char *session = NULL;
		enum rdzv_type type;
		char *text = NULL;
		int fd, port = 0;

		rc = rdzv_called_off(r);
		if (rc < 0) {
			json_decref(mine);
			return rc;
		}
		if (access(r->path, F_OK) == 0)
			contact = ar_json_load_file(r->path);
		if (!contact || json_unpack(contact, "{s:s, s:i}", "session",
					    &session, "port", &port) < 0) {
			json_decref(contact);
			usleep(RDZV_POLL_MS * 1000);
			continue;
		}
		fd = rdzv_connect(json_object_get(contact, "addrs"),
				  (uint16_t)port, deadline);
		if (fd < 0) {
			snprintf(lastbuf, sizeof(lastbuf), "rank 0 at port %d: %s",
				 port, strerror(-fd));
			last = lastbuf;
			json_decref(contact);
			usleep(RDZV_POLL_MS * 1000);
			continue;
		}
		snprintf(session_seen, sizeof(session_seen), "%s", session);
		rc = rdzv_send_json(fd, RDZV_HELLO,
				    json_pack("{s:s, s:i, s:i, s:i, s:O}",
					      "session", session,
					      "rank", r->rank, "size", r->size,
					      "port", (int)r->port,
					      "addrs", mine), deadline);
		json_decref(contact);
		/* Rank 0 says why it gives up at the same deadline. */
		if (rc == 0)
			rc = rdzv_recv_text(fd, &type, &text, deadline + 2.0);
		if (rc == 0 && type == RDZV_ERROR) {
			if (strstr(text, "stale session")) {
				free(text);
				close(fd);
				usleep(RDZV_POLL_MS * 1000);
				continue;
			}
			rc = ar_seterr(-AR_EABORT, "%s", text);
		} else if (rc == -EPIPE) {
			rc = ar_seterr(-AR_EABORT, "rendezvous %s: rank 0 ended the meeting",
				       r->name);
		} else if (rc < 0) {
			rc = ar_seterr(rc, "rendezvous %s: waiting for rank 0: %s",
				       r->name, ar_strerror(rc));
		} else if (type != RDZV_TABLE) {
			rc = ar_seterr(-AR_EPROTO, "rendezvous %s: rank 0 sent message type %d",
				       r->name, (int)type);
		}
		if (rc < 0) {
			free(text);
			close(fd);
			json_decref(mine);
			return rc == -AR_ETIMEOUT ?
			       ar_seterr(rc, "rendezvous %s: not every rank arrived within %.0f s",
					 r->name, r->join_timeout_s) : rc;
		}
		table = json_loads(text, 0, NULL);
		free(text);
		ranks = json_object_get(table, "ranks");
		rc = json_array_size(ranks) == (size_t)r->size ? 0 :
		     ar_seterr(-AR_EPROTO, "rendezvous %s: the table has %zu ranks, not %d",
			       r->name, json_array_size(ranks), r->size);
		for (int i = 0; i < r->size && rc == 0; i++)
			rc = rdzv_peer_set(r, i, json_array_get(ranks, i));
		json_decref(table);
		json_decref(mine);
		if (rc < 0) {
			close(fd);
			return rc;
		}
		r->peers[0].ctl = fd;
		r->session = strtoull(session_seen, NULL, 16);
		return 0;
	}
	json_decref(mine);
	return ar_seterr(-AR_ETIMEOUT, "rendezvous %s: no rank 0 within %.0f s (%s; %s)",
			 r->name, r->join_timeout_s, last, r->path);
}

static bool rdzv_name_is_valid(const char *s)
{
	if (!s || !*s || strlen(s) > 200 || s[0] == '.')
		return false;
	for (; *s; s++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
			    "0123456789._-", *s))
			return false;
	return true;
}

int migrate_rdzv_join(const struct migrate_rdzv_opts *o,
		      struct migrate_rdzv **rp)
{
	struct migrate_rdzv *r;
	double deadline;
	int rc, n;

	*rp = NULL;
	if (!o || !o->dir || !rdzv_name_is_valid(o->name))
		return ar_seterr(-AR_EINVAL, "rendezvous: a directory and a name of letters, digits, '.', '_' and '-' are needed");
	if (o->size < 1 || o->rank < 0 || o->rank >= o->size)
		return ar_seterr(-AR_EINVAL, "rendezvous %s: rank %d is not in 0..%d",
				 o->name, o->rank, o->size - 1);
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->rank = o->rank;
	r->size = o->size;
	r->listen_fd = -1;
	r->timeout_s = o->timeout_s > 0 ? o->timeout_s : RDZV_DEFAULT_TIMEOUT_S;
	snprintf(r->name, sizeof(r->name), "%s", o->name);
	n = snprintf(r->path, sizeof(r->path), "%s/%s.rdzv", o->dir, o->name);
	if (n < 0 || (size_t)n >= sizeof(r->path)) {
		free(r);
		return ar_seterr(-ENAMETOOLONG, "rendezvous: %s: path too long",
				 o->dir);
	}
	if (o->called_off &&
	    (size_t)snprintf(r->called_off, sizeof(r->called_off), "%s",
			     o->called_off) >= sizeof(r->called_off)) {
		free(r);
		return ar_seterr(-ENAMETOOLONG, "rendezvous: %s: path too long",
				 o->called_off);
	}
	r->join_timeout_s = o->join_timeout_s > 0 ? o->join_timeout_s :
			    r->timeout_s;
	deadline = ar_now() + r->join_timeout_s;
	rc = rdzv_peers_alloc(r);
	if (rc == 0 && r->size > 1) {
		rc = rdzv_listen(&r->port);
		if (rc >= 0) {
			r->listen_fd = rc;
			rc = 0;
		}
	}
	if (rc == 0 && r->size > 1)
		rc = r->rank == 0 ? rdzv_join_host(r, o->addr, deadline) :
				    rdzv_join_member(r, o->addr, deadline);
	if (rc < 0) {
		migrate_rdzv_close(r);
		return rc;
	}
	*rp = r;
	return 0;
}

void migrate_rdzv_close(struct migrate_rdzv *r)
{
	if (!r)
		return;
	for (int i = 0; r->peers && i < r->size; i++) {
		if (r->peers[i].ctl >= 0)
			close(r->peers[i].ctl);
		if (r->peers[i].data >= 0)
			close(r->peers[i].data);
		json_decref(r->peers[i].addrs);
	}
	if (r->listen_fd >= 0)
		close(r->listen_fd);
	free(r->peers);
	free(r);
}

int migrate_rdzv_rank(const struct migrate_rdzv *r)
{
	return r->rank;
}

int migrate_rdzv_size(const struct migrate_rdzv *r)
{
	return r->size;
}

/* ------------------------------------------------------------ data links */

/*
 * Accept data connections until @peer's is there; others that come first
 * are kept for later.
 */
static int rdzv_accept_from(struct migrate_rdzv *r, int peer, double deadline)
{
	char hex[17];

	rdzv_session_hex(r->session, hex);
	while (r->peers[peer].data < 0) {
		enum rdzv_type type;
		json_t *hello = NULL;
		const char *session = NULL;
		char *text = NULL;
		int fd, from = -1, rc;

		rc = rdzv_wait(r->listen_fd, POLLIN, deadline);
		if (rc < 0)
			return ar_seterr(rc, "rendezvous %s: rank %d did not connect within %.0f s",
					 r->name, peer, r->timeout_s);
		fd = accept4(r->listen_fd, NULL, NULL,
			     SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0)
			continue;
		rdzv_nodelay(fd);
		rc = rdzv_recv_text(fd, &type, &text, deadline);
		if (rc == 0 && type == RDZV_PEER)
			hello = json_loads(text, 0, NULL);
		free(text);
		if (hello && json_unpack(hello, "{s:s, s:i}", "session",
					 &session, "rank", &from) == 0 &&
		    !strcmp(session, hex) && from >= 0 && from < r->rank &&
		    r->peers[from].data < 0) {
			r->peers[from].data = fd;
		} else {
			if (rc == 0 && type == RDZV_HELLO)
				rdzv_send_error(fd, "rendezvous: this meeting is complete (a late or stale member)",
						ar_now() + 1.0);
			close(fd);
		}
		json_decref(hello);
	}
	return 0;
}

int rdzv_data_fd(struct migrate_rdzv *r, int peer, double deadline)
{
	char hex[17];
	int fd, rc;

	if (peer < 0 || peer >= r->size || peer == r->rank)
		return ar_seterr(-AR_EINVAL, "rendezvous %s: no peer rank %d",
				 r->name, peer);
	if (r->peers[peer].data >= 0)
		return r->peers[peer].data;
	if (peer < r->rank) {
		rc = rdzv_accept_from(r, peer, deadline);
		return rc < 0 ? rc : r->peers[peer].data;
	}
	fd = rdzv_connect(r->peers[peer].addrs, r->peers[peer].port, deadline);
	if (fd < 0)
		return ar_seterr(fd, "rendezvous %s: cannot connect to rank %d: %s",
				 r->name, peer, strerror(-fd));
	rc = rdzv_send_json(fd, RDZV_PEER,
			    json_pack("{s:s, s:i}", "session",
				      rdzv_session_hex(r->session, hex),
				      "rank", r->rank), deadline);
	if (rc < 0) {
		close(fd);
		return ar_seterr(rc, "rendezvous %s: rank %d: %s", r->name,
				 peer, ar_strerror(rc));
	}
	r->peers[peer].data = fd;
	return fd;
}

/* Lower ranks accept first, then connect to the higher ones: a connect
 * completes in the listener's backlog, so no rank waits on one that waits. */
int migrate_rdzv_connect_all(struct migrate_rdzv *r)
{
	double deadline = ar_now() + r->timeout_s;

	for (int peer = 0; peer < r->size; peer++) {
		int fd;

		if (peer == r->rank)
			continue;
		fd = rdzv_data_fd(r, peer, deadline);
		if (fd < 0)
			return fd;
	}
	return 0;
}

int migrate_rdzv_fd(const struct migrate_rdzv *r, int peer)
{
	if (peer < 0 || peer >= r->size || peer == r->rank)
		return -1;
	return r->peers[peer].data;
}

void rdzv_data_close_all(struct migrate_rdzv *r)
{
	for (int i = 0; i < r->size; i++) {
		if (r->peers[i].data >= 0) {
			shutdown(r->peers[i].data, SHUT_RDWR);
			close(r->peers[i].data);
			r->peers[i].data = -1;
		}
	}
}

static int rdzv_peer_err(const struct migrate_rdzv *r, int rc, int peer,
			 const char *what)
{
	if (rc == -EPIPE || rc == -ECONNRESET)
		return ar_seterr(-AR_EABORT, "rendezvous %s: rank %d is gone (%s)",
				 r->name, peer, what);
	if (rc == -AR_ETIMEOUT)
		return ar_seterr(rc, "rendezvous %s: rank %d was silent for %.0f s (%s)",
				 r->name, peer, r->timeout_s, what);
	return ar_seterr(rc, "rendezvous %s: rank %d: %s: %s", r->name, peer,
			 what, ar_strerror(rc));
}

int migrate_rdzv_send(struct migrate_rdzv *r, int peer, const void *buf,
		      size_t len)
{
	double deadline = ar_now() + r->timeout_s;
	int fd = rdzv_data_fd(r, peer, deadline), rc;

	if (fd < 0)
		return fd;
	rc = rdzv_send_msg(fd, RDZV_DATA, buf, len, deadline);
	return rc < 0 ? rdzv_peer_err(r, rc, peer, "send") : 0;
}

int migrate_rdzv_recv(struct migrate_rdzv *r, int peer, void *buf, size_t len)
{
	double deadline = ar_now() + r->timeout_s;
	int fd = rdzv_data_fd(r, peer, deadline), rc;
	enum rdzv_type type;
	uint64_t got;

	if (fd < 0)
		return fd;
	rc = rdzv_recv_hdr(fd, &type, &got, UINT64_MAX, deadline);
	if (rc == 0 && (type != RDZV_DATA || got != len))
		return ar_seterr(-AR_EPROTO, "rendezvous %s: rank %d sent %" PRIu64 " bytes where %zu were expected",
				 r->name, peer, got, len);
	if (rc == 0)
		rc = rdzv_read_all(fd, buf, len, deadline);
	return rc < 0 ? rdzv_peer_err(r, rc, peer, "receive") : 0;
}

/* ------------------------------------------------------------ collectives */

int migrate_rdzv_bcast(struct migrate_rdzv *r, int root, void *buf,
		       size_t len)
{
	double deadline = ar_now() + r->timeout_s;
	enum rdzv_type type;
	uint64_t got;
	int rc;

	if (root < 0 || root >= r->size)
		return ar_seterr(-AR_EINVAL, "rendezvous %s: no root rank %d",
				 r->name, root);
	if (r->size == 1)
		return 0;
	if (r->rank != 0) {
		int fd = r->peers[0].ctl;

		if (r->rank == root) {
			rc = rdzv_send_msg(fd, RDZV_BCAST, buf, len, deadline);
			return rc < 0 ? rdzv_peer_err(r, rc, 0, "broadcast") :
					0;
		}
		rc = rdzv_recv_hdr(fd, &type, &got, UINT64_MAX, deadline);
		if (rc == 0 && type == RDZV_ERROR)
			return ar_seterr(-AR_EABORT, "rendezvous %s: the broadcast failed: rank 0 lost the root",
					 r->name);
		if (rc == 0 && (type != RDZV_BCAST || got != len))
			return ar_seterr(-AR_EPROTO, "rendezvous %s: a broadcast of %" PRIu64 " bytes where %zu were expected",
					 r->name, got, len);
		if (rc == 0)
			rc = rdzv_read_all(fd, buf, len, deadline);
		return rc < 0 ? rdzv_peer_err(r, rc, 0, "broadcast") : 0;
	}
	if (root != 0) {
		int fd = r->peers[root].ctl;

		rc = rdzv_recv_hdr(fd, &type, &got, UINT64_MAX, deadline);
		if (rc == 0 && (type != RDZV_BCAST || got != len))
			rc = ar_seterr(-AR_EPROTO, "rendezvous %s: rank %d broadcast %" PRIu64 " bytes where %zu were expected",
				       r->name, root, got, len);
		if (rc == 0)
			rc = rdzv_read_all(fd, buf, len, deadline);
		if (rc < 0) {
			rc = rdzv_peer_err(r, rc, root, "broadcast");
			for (int i = 1; i < r->size; i++)
				if (i != root)
					rdzv_send_error(r->peers[i].ctl,
							ar_errmsg(), deadline);
			return rc;
		}
	}
	for (int i = 1; i < r->size; i++) {
		if (i == root)
			continue;
		rc = rdzv_send_msg(r->peers[i].ctl, RDZV_BCAST, buf, len,
				   deadline);
		if (rc < 0)
			return rdzv_peer_err(r, rc, i, "broadcast");
	}
	return 0;
}

/*
 * Verdicts travel as one byte: 0 all succeeded, 1 a rank failed, 2 a rank
 * did not answer in time; a short text names the rank.
 */
struct rdzv_verdict {
	uint8_t code;
	char why[255];
};

static int rdzv_verdict_rc(const struct migrate_rdzv *r,
			   const struct rdzv_verdict *v)
{
	if (v->code == 0)
		return 0;
	return ar_seterr(v->code == 2 ? -AR_ETIMEOUT : -AR_EABORT,
			 "%.*s", (int)sizeof(v->why), v->why);
}

/* Rank 0: every member's verdict, each read as it arrives. */
static void rdzv_host_collect(struct migrate_rdzv *r, bool ok,
			      double timeout_s, struct rdzv_verdict *v)
{
	double deadline = ar_now() + timeout_s;
	bool *done = calloc((size_t)r->size, sizeof(bool));
	struct pollfd *pfd = calloc((size_t)r->size, sizeof(*pfd));
	int left = r->size - 1;

	memset(v, 0, sizeof(*v));
	if (!ok) {
		v->code = 1;
		snprintf(v->why, sizeof(v->why), "rank 0 failed");
	}
	if (!done || !pfd) {
		v->code = 1;
		snprintf(v->why, sizeof(v->why), "rank 0: out of memory");
		left = 0;
	}
	while (left > 0) {
		int n = 0, rc;
		double rest = deadline - ar_now();

		for (int i = 1; i < r->size; i++)
			if (!done[i])
				pfd[n++] = (struct pollfd){
					.fd = r->peers[i].ctl, .events = POLLIN };
		if (rest <= 0) {
			for (int i = 1; i < r->size; i++) {
				if (done[i])
					continue;
				v->code = 2;
				snprintf(v->why, sizeof(v->why), "rank %d did not report within %.1f s (dead or stalled)",
					 i, timeout_s);
				break;
			}
			break;
		}
		rc = poll(pfd, (nfds_t)n, rest > 1.0 ? 1000 : (int)(rest * 1000) + 1);
		if (rc <= 0)
			continue;
		for (int k = 0; k < n; k++) {
			enum rdzv_type type;
			uint64_t len;
			uint8_t verdict = 0;
			int i;

			if (!pfd[k].revents)
				continue;
			for (i = 1; r->peers[i].ctl != pfd[k].fd; i++)
				;
			rc = rdzv_recv_hdr(pfd[k].fd, &type, &len, 1, deadline);
			if (rc == 0 && type == RDZV_AGREE && len == 1)
				rc = rdzv_read_all(pfd[k].fd, &verdict, 1,
						   deadline);
			else if (rc == 0)
				rc = -AR_EPROTO;
			done[i] = true;
			left--;
			if (rc < 0 && v->code == 0) {
				v->code = 1;
				snprintf(v->why, sizeof(v->why), "rank %d is gone", i);
			} else if (rc == 0 && !verdict && v->code == 0) {
				v->code = 1;
				snprintf(v->why, sizeof(v->why), "rank %d failed", i);
			}
		}
	}
	free(done);
	free(pfd);
}

int rdzv_agree(struct migrate_rdzv *r, bool ok, double timeout_s)
{
	struct rdzv_verdict v;
	int rc;

	if (r->size == 1)
		return ok ? 0 : ar_seterr(-AR_EABORT, "the only rank failed");
	if (r->rank == 0) {
		rdzv_host_collect(r, ok, timeout_s, &v);
		for (int i = 1; i < r->size; i++)
			rdzv_send_msg(r->peers[i].ctl, RDZV_VERDICT, &v,
				      sizeof(v), ar_now() + 1.0);
		return rdzv_verdict_rc(r, &v);
	} else {
		uint8_t mine = ok ? 1 : 0;
		double deadline = ar_now() + timeout_s + 2.0;
		enum rdzv_type type;
		uint64_t len;

		rc = rdzv_send_msg(r->peers[0].ctl, RDZV_AGREE, &mine, 1,
				   deadline);
		if (rc == 0)
			rc = rdzv_recv_hdr(r->peers[0].ctl, &type, &len,
					   sizeof(v), deadline);
		if (rc == 0 && (type != RDZV_VERDICT || len != sizeof(v)))
			rc = -AR_EPROTO;
		if (rc == 0)
			rc = rdzv_read_all(r->peers[0].ctl, &v, sizeof(v),
					   deadline);
		if (rc == -AR_ETIMEOUT)
			return ar_seterr(rc, "no agreement among the ranks within %.1f s: rank 0 is stalled",
					 timeout_s);
		if (rc < 0)
			return ar_seterr(-AR_EABORT, "rank 0 is gone; the migration is aborted");
		return rdzv_verdict_rc(r, &v);
	}
}

int migrate_rdzv_agree(struct migrate_rdzv *r, bool ok)
{
	return rdzv_agree(r, ok, r->timeout_s);
}
