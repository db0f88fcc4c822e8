/*
 * loop.c - the I/O thread: one epoll set with the listening socket, the
 * signals (a self-pipe), the workers' eventfd and every client.
 *
 * A client sends one request per line and gets one answer per line, in
 * order: while a request is being answered the loop does not read more of
 * its input (the socket buffer pushes back), so a client cannot queue
 * unbounded work.  Clients that wait for input or output sit on a list
 * ordered by deadline; the head is the next to time out.  A request must
 * be whole within client_timeout_s of its first byte and an answer read
 * within client_timeout_s of being ready, however the bytes trickle.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ar.h"
#include "plannerd.h"

/* epoll data for the fds that are not clients */
static char tag_listen, tag_signal, tag_wake;

/*
 * Signals arrive through a self-pipe.  A blocked mask and a signalfd would
 * not do: libraries start threads before main() (OpenBLAS does, in its
 * constructor) with every signal unblocked, and a SIGTERM delivered to one
 * of those would kill the daemon on the spot instead of draining it.
 */
static int signal_pipe_w = -1;

static void loop_signal_handler(int signo)
{
	int saved = errno;
	unsigned char s = (unsigned char)signo;

	if (write(signal_pipe_w, &s, 1) < 0) {
		/* the pipe is full: a signal of each kind is already queued */
	}
	errno = saved;
}

/* True when @c holds a whole request not yet answered. */
static bool conn_has_line(const struct conn *c)
{
	return c->in_len && memchr(c->in, '\n', c->in_len);
}

static void conn_unlist(struct daemon *d, struct conn *c)
{
	if (!c->listed)
		return;
	c->prev->next = c->next;
	c->next->prev = c->prev;
	c->listed = false;
}

/*
 * Give @c until @since + @timeout_s, keeping the list ordered by deadline.
 * @since is when the current wait began: the first byte of a partial
 * request or the moment an answer was ready, so that dribbling a byte at
 * a time never extends it (a slow-loris client is dropped on time); now
 * for a connection between requests.  Most deadlines are the latest, so
 * the place is searched from the tail.
 */
static void conn_wait(struct daemon *d, struct conn *c, double since,
		      double timeout_s)
{
	struct conn *after;

	conn_unlist(d, c);
	c->deadline = since + timeout_s;
	for (after = d->waiting.prev;
	     after != &d->waiting && after->deadline > c->deadline;
	     after = after->prev)
		;
	c->prev = after;
	c->next = after->next;
	after->next->prev = c;
	after->next = c;
	c->listed = true;
}

static void conn_free(struct daemon *d, struct conn *c)
{
	free(c->in);
	free(c->out);
	free(c);
	d->nconns--;
}

/* Close @c's socket; the object lives on while a task still refers to it. */
static void conn_close(struct daemon *d, struct conn *c)
{
	conn_unlist(d, c);
	if (c->fd >= 0) {
		epoll_ctl(d->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
		c->fd = -1;
	}
	if (c->busy)
		c->dead = true;
	else
		conn_free(d, c);
}

static int conn_watch(struct daemon *d, struct conn *c, unsigned int events)
{
	struct epoll_event ev = { .events = events, .data.ptr = c };

	if (c->events == events)
		return 0;
	if (epoll_ctl(d->epoll_fd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
		return -errno;
	c->events = events;
	return 0;
}

static double loop_client_timeout(struct daemon *d)
{
	double t;

	pthread_mutex_lock(&d->gen_lock);
	t = d->gen->conf->client_timeout_s;
	pthread_mutex_unlock(&d->gen_lock);
	return t;
}

static void conn_process(struct daemon *d, struct conn *c);

/*
 * Write what @c has pending.  When it is all written, go back to reading
 * (and to the next request already buffered), or close.
 */
static void conn_flush(struct daemon *d, struct conn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off,
				 c->out_len - c->out_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				conn_watch(d, c, EPOLLOUT);
				conn_wait(d, c, c->out_start,
					  loop_client_timeout(d));
				return;
			}
			/* EPIPE, ECONNRESET: the client left mid-answer. */
			ar_log(LOG_DEBUG, "client pid %ld left before its answer was written",
			       (long)c->pid);
			conn_close(d, c);
			return;
		}
		c->out_off += (size_t)n;
	}
	free(c->out);
	c->out = NULL;
	c->out_len = c->out_off = 0;
	if (c->closing || (d->draining && !conn_has_line(c))) {
		conn_close(d, c);
		return;
	}
	conn_process(d, c);
}

/* Queue @reply (taken) for @c and start writing it. */
static void conn_send(struct daemon *d, struct conn *c, char *reply)
{
	if (!reply) {
		ar_log(LOG_ERR, "out of memory encoding an answer");
		conn_close(d, c);
		return;
	}
	c->out = reply;
	c->out_len = strlen(reply);
	c->out_off = 0;
	c->out_start = ar_now();
	conn_flush(d, c);
}

static void conn_send_error(struct daemon *d, struct conn *c, int rc,
			    const char *msg)
{
	atomic_fetch_add(&d->stats.errors, 1);
	conn_send(d, c, req_reply_error(NULL, rc, msg));
}

/*
 * Answer the first whole line in @c's buffer, if there is one; otherwise
 * wait for more input (or close at end of input).
 */
static void conn_process(struct daemon *d, struct conn *c)
{
	struct task *task = NULL;
	char *reply = NULL, *nl;
	size_t len, max;

	for (;;) {
		nl = c->in_len ? memchr(c->in, '\n', c->in_len) : NULL;
		if (!nl)
			break;
		len = (size_t)(nl - c->in);
		if (len > 0 && c->in[len - 1] == '\r')
			len--;
		if (len > 0)
			break;
		memmove(c->in, nl + 1, c->in_len - (size_t)(nl + 1 - c->in));
		c->in_len -= (size_t)(nl + 1 - c->in);
	}
	if (!nl) {
		pthread_mutex_lock(&d->gen_lock);
		max = (size_t)d->gen->conf->max_request_bytes;
		pthread_mutex_unlock(&d->gen_lock);
		if (c->in_len >= max) {
			c->closing = true;
			conn_send_error(d, c, -EMSGSIZE, "request longer than max_request_bytes; closing the connection");
			return;
		}
		if (c->eof || d->draining) {
			conn_close(d, c);
			return;
		}
		conn_watch(d, c, EPOLLIN | EPOLLRDHUP);
		/* A request must be whole within the timeout of its first byte. */
		conn_wait(d, c, c->in_len ? c->req_start : ar_now(),
			  loop_client_timeout(d));
		return;
	}
	ops_dispatch(d, c, c->in, len, &reply, &task);
	memmove(c->in, nl + 1, c->in_len - (size_t)(nl + 1 - c->in));
	c->in_len -= (size_t)(nl + 1 - c->in);
	/* What follows the line is the next request; its clock starts now. */
	c->req_start = c->in_len ? ar_now() : 0;
	if (task) {
		/* Nothing to read or write until the worker answers. */
		c->busy = true;
		conn_unlist(d, c);
		conn_watch(d, c, 0);
		d->nbusy++;
		pool_submit(d->pool, task);
		return;
	}
	conn_send(d, c, reply);
}

static void conn_read(struct daemon *d, struct conn *c)
{
	size_t max;

	pthread_mutex_lock(&d->gen_lock);
	max = (size_t)d->gen->conf->max_request_bytes;
	pthread_mutex_unlock(&d->gen_lock);
	while (!c->eof && c->in_len < max) {
		ssize_t n;

		if (c->in_cap - c->in_len < 4096 && c->in_cap < max) {
			size_t cap = c->in_cap ? c->in_cap * 2 : 4096;
			char *in;

			if (cap > max)
				cap = max;
			in = realloc(c->in, cap);
			if (!in) {
				conn_close(d, c);
				return;
			}
			c->in = in;
			c->in_cap = cap;
		}
		n = read(c->fd, c->in + c->in_len, c->in_cap - c->in_len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				break;
			conn_close(d, c);
			return;
		}
		if (n == 0)
			c->eof = true;
		if (c->in_len == 0 && n > 0)
			c->req_start = ar_now();
		c->in_len += (size_t)n;
		/* One request at a time: stop once a line is complete. */
		if (memchr(c->in + c->in_len - n, '\n', (size_t)n))
			break;
	}
	conn_process(d, c);
}

static void loop_conn_event(struct daemon *d, struct conn *c,
			    unsigned int events)
{
	if (c->busy) {
		/* Only a hang-up is reported while a worker holds it. */
		if (events & (EPOLLHUP | EPOLLERR))
			conn_close(d, c);
		return;
	}
	if (c->out_len) {
		if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
			conn_flush(d, c);
		return;
	}
	if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
		conn_read(d, c);
}

static void loop_accept(struct daemon *d)
{
	for (;;) {
		struct ucred cred;
		socklen_t len = sizeof(cred);
		struct epoll_event ev;
		struct conn *c;
		size_t max;
		int fd;

		fd = accept4(d->listen_fd, NULL, NULL,
			     SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN)
				ar_log(LOG_ERR, "accept: %m");
			return;
		}
		pthread_mutex_lock(&d->gen_lock);
		max = (size_t)d->gen->conf->max_clients;
		pthread_mutex_unlock(&d->gen_lock);
		if (d->nconns >= max) {
			char *busy = req_reply_error(NULL, -EBUSY, "too many clients; try again");

			atomic_fetch_add(&d->stats.errors, 1);
			if (busy && send(fd, busy, strlen(busy),
					 MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
				ar_log(LOG_DEBUG, "busy answer not sent: %m");
			free(busy);
			close(fd);
			continue;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
			ar_log(LOG_ERR, "SO_PEERCRED: %m");
			close(fd);
			continue;
		}
		c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		c->fd = fd;
		c->uid = cred.uid;
		c->gid = cred.gid;
		c->pid = cred.pid;
		c->events = EPOLLIN | EPOLLRDHUP;
		ev.events = c->events;
		ev.data.ptr = c;
		if (epoll_ctl(d->epoll_fd, EPOLL_CTL_ADD, fd, &ev) < 0) {
			ar_log(LOG_ERR, "epoll_ctl: %m");
			close(fd);
			free(c);
			continue;
		}
		d->nconns++;
		conn_wait(d, c, ar_now(), loop_client_timeout(d));
	}
}

/* Deliver what the workers finished. */
static void loop_tasks_done(struct daemon *d)
{
	struct task *done, *next;
	uint64_t count;

	if (read(d->wake_fd, &count, sizeof(count)) < 0 && errno != EAGAIN)
		ar_log(LOG_ERR, "eventfd: %m");
	pthread_mutex_lock(&d->done_lock);
	done = d->done;
	d->done = NULL;
	pthread_mutex_unlock(&d->done_lock);
	for (; done; done = next) {
		struct conn *c = done->conn;
		char *reply = done->reply;

		next = done->next;
		done->reply = NULL;
		if (done->failed)
			atomic_fetch_add(&d->stats.errors, 1);
		ops_task_free(done);
		d->nbusy--;
		c->busy = false;
		if (c->dead) {
			free(reply);	/* stored already; nobody to tell */
			conn_free(d, c);
			continue;
		}
		conn_send(d, c, reply);
	}
}

static void loop_reload(struct daemon *d)
{
	struct gen *gen, *old;
	struct conf *conf;

	notify_send("RELOADING=1");
	ar_log(LOG_NOTICE, "SIGHUP: reloading %s",
	       d->conf_path ? d->conf_path : "the built-in defaults");
	if (gen_create(d->conf_path, &gen) < 0 ||
	    conf_check_site(gen->conf) < 0) {
		ar_log(LOG_ERR, "reload failed, keeping the running configuration: %s",
		       ar_errmsg());
		gen_put(gen);
		notify_send("READY=1");
		return;
	}
	conf = gen->conf;
	pthread_mutex_lock(&d->gen_lock);
	old = d->gen;
	if (strcmp(old->conf->socket_path, conf->socket_path) ||
	    strcmp(old->conf->state_dir, conf->state_dir) ||
	    old->conf->workers != conf->workers)
		ar_log(LOG_WARNING, "socket_path, state_dir and workers change only on restart");
	d->gen = gen;
	pthread_mutex_unlock(&d->gen_lock);
	ar_log_open("plannerd", !d->foreground, conf->log_level);
	/* New profiles or planner settings may answer differently. */
	cache_clear(d->cache);
	gen_put(old);
	ar_log(LOG_NOTICE, "configuration reloaded");
	notify_send("READY=1");
}

static void loop_drain(struct daemon *d)
{
	struct conn *c, *next;

	ar_log(LOG_NOTICE, "shutting down: finishing %zu requests in flight",
	       d->nbusy + pool_queued(d->pool));
	notify_send("STOPPING=1");
	d->draining = true;
	if (d->listen_fd >= 0) {
		epoll_ctl(d->epoll_fd, EPOLL_CTL_DEL, d->listen_fd, NULL);
		close(d->listen_fd);
		d->listen_fd = -1;
		sock_unlink(d->socket_path, d->socket_ino);
	}
	/* Idle clients go now; the others once their answer is out. */
	for (c = d->waiting.next; c != &d->waiting; c = next) {
		next = c->next;
		if (!c->out_len && !conn_has_line(c))
			conn_close(d, c);
	}
}

/*
 * Signals are acted on after the batch of events is handled: draining
 * closes other clients, whose events may still be in the batch.
 */
static void loop_signal(struct daemon *d, bool *reload, bool *stop)
{
	unsigned char sigs[64];
	ssize_t n;

	while ((n = read(d->signal_fd, sigs, sizeof(sigs))) > 0) {
		for (ssize_t i = 0; i < n; i++) {
			if (sigs[i] == SIGHUP)
				*reload = true;
			else
				*stop = true;
		}
	}
}

static void loop_expire(struct daemon *d)
{
	double now = ar_now();

	while (d->waiting.next != &d->waiting &&
	       d->waiting.next->deadline <= now) {
		struct conn *c = d->waiting.next;

		atomic_fetch_add(&d->stats.timeouts, 1);
		ar_log(LOG_INFO, "client pid %ld uid %ld: %s within client_timeout_s; disconnecting",
		       (long)c->pid, (long)c->uid,
		       c->out_len ? "answer not read" :
		       c->in_len ? "request not complete" : "no request");
		if (!c->out_len && c->in_len) {
			/* Say why, once, without waiting for a slow reader. */
			char *msg = req_reply_error(NULL, -AR_ETIMEOUT, "no complete request within client_timeout_s of its first byte");

			if (msg && send(c->fd, msg, strlen(msg),
					MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
				ar_log(LOG_DEBUG, "timeout answer not sent: %m");
			free(msg);
		}
		conn_close(d, c);
	}
}

int loop_init(struct daemon *d)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct sigaction sa = { .sa_handler = loop_signal_handler,
				.sa_flags = SA_RESTART };
	int fds[2];

	d->waiting.next = d->waiting.prev = &d->waiting;
	d->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	if (d->epoll_fd < 0)
		return ar_seterr(-errno, "epoll_create1: %s", strerror(errno));
	d->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (d->wake_fd < 0 || pipe2(fds, O_NONBLOCK | O_CLOEXEC) < 0)
		return ar_seterr(-errno, "eventfd/pipe: %s", strerror(errno));
	d->signal_fd = fds[0];
	signal_pipe_w = fds[1];
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGHUP, &sa, NULL) < 0 ||
	    sigaction(SIGTERM, &sa, NULL) < 0 ||
	    sigaction(SIGINT, &sa, NULL) < 0)
		return ar_seterr(-errno, "sigaction: %s", strerror(errno));
	ev.data.ptr = &tag_listen;
	if (epoll_ctl(d->epoll_fd, EPOLL_CTL_ADD, d->listen_fd, &ev) < 0)
		return -errno;
	ev.data.ptr = &tag_signal;
	if (epoll_ctl(d->epoll_fd, EPOLL_CTL_ADD, d->signal_fd, &ev) < 0)
		return -errno;
	ev.data.ptr = &tag_wake;
	if (epoll_ctl(d->epoll_fd, EPOLL_CTL_ADD, d->wake_fd, &ev) < 0)
		return -errno;
	return 0;
}

int loop_run(struct daemon *d)
{
	struct epoll_event evs[256];

	while (!d->draining || d->nconns > 0) {
		bool reload = false, stop = false;
		int timeout_ms = -1, n;

		if (d->waiting.next != &d->waiting) {
			double left = d->waiting.next->deadline - ar_now();

			timeout_ms = left <= 0 ? 0 : (int)(left * 1000) + 1;
		}
		n = epoll_wait(d->epoll_fd, evs, 256, timeout_ms);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return ar_seterr(-errno, "epoll_wait: %s",
					 strerror(errno));
		}
		for (int i = 0; i < n; i++) {
			void *p = evs[i].data.ptr;

			if (p == &tag_listen)
				loop_accept(d);
			else if (p == &tag_signal)
				loop_signal(d, &reload, &stop);
			else if (p == &tag_wake)
				loop_tasks_done(d);
			else
				loop_conn_event(d, p, evs[i].events);
		}
		if (reload)
			loop_reload(d);
		if (stop && !d->draining)
			loop_drain(d);
		loop_expire(d);
	}
	return 0;
}

void loop_fini(struct daemon *d)
{
	struct task *task, *next;

	for (task = d->done; task; task = next) {
		next = task->next;
		task->conn->busy = false;
		conn_close(d, task->conn);
		ops_task_free(task);
	}
	d->done = NULL;
	while (d->waiting.next && d->waiting.next != &d->waiting)
		conn_close(d, d->waiting.next);
	if (d->listen_fd >= 0) {
		close(d->listen_fd);
		sock_unlink(d->socket_path, d->socket_ino);
		d->listen_fd = -1;
	}
	if (d->wake_fd >= 0)
		close(d->wake_fd);
	if (d->signal_fd >= 0) {
		signal(SIGHUP, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		close(d->signal_fd);
		close(signal_pipe_w);
		signal_pipe_w = -1;
	}
	if (d->epoll_fd >= 0)
		close(d->epoll_fd);
	d->wake_fd = d->signal_fd = d->epoll_fd = -1;
}
