/*
 * plannerd-load.c - a load generator for plannerd: opens many connections
 * at once and sends request lines over each, one at a time, timing every
 * answer.  Used by the system tests (1,000 concurrent clients) and by
 * bench/ (cached plan requests per second and their p99).
 *
 * Each thread runs its own epoll loop over its share of the connections.
 * Prints one JSON line: counts, wall time, rate and latency percentiles.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ar.h"

static const char usage[] =
	"Usage: plannerd-load -s SOCKET [-c CONNECTIONS] [-n REQUESTS] [-t THREADS]\n"
	"                     [-d SECONDS] REQUEST-FILE\n"
	"Each connection sends the lines of REQUEST-FILE in turn, one request\n"
	"in flight at a time, REQUESTS times in all (or for SECONDS with -d).\n"
	"\"$JOB\" in a line is replaced by a number unique to each request.\n";

struct load_conn {
	int fd;
	char *out;			/* the request being sent */
	size_t out_len, out_off;
	char in[65536];
	size_t in_len;
	int sent;			/* requests sent */
	double t0;			/* when the current request was sent */
};

struct load_thread {
	pthread_t tid;
	int first, nconns;		/* the thread's connections */
	/* results */
	double *lat;			/* seconds, one per answer */
	size_t nlat, cap;
	long ok, errors, failed;
};

static struct {
	const char *socket;
	char **lines;
	size_t nlines;
	int conns;
	int requests;			/* per connection */
	double duration_s;		/* > 0: run this long instead */
	double start;
	long job_seq;
	pthread_mutex_t lock;
} load = { .conns = 1, .requests = 1 };

/* The next request line, with $JOB made unique. */
static char *load_request(int n)
{
	const char *tmpl = load.lines[(size_t)n % load.nlines];
	const char *at = strstr(tmpl, "$JOB");
	char *line;
	long job;

	if (!at) {
		if (asprintf(&line, "%s\n", tmpl) < 0)
			return NULL;
		return line;
	}
	pthread_mutex_lock(&load.lock);
	job = load.job_seq++;
	pthread_mutex_unlock(&load.lock);
	if (asprintf(&line, "%.*s%ld%s\n", (int)(at - tmpl), tmpl, job,
		     at + 4) < 0)
		return NULL;
	return line;
}

static int load_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", load.socket);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	fcntl(fd, F_SETFL, O_NONBLOCK);
	return fd;
}

static bool load_more(const struct load_conn *c)
{
	if (load.duration_s > 0)
		return ar_now() - load.start < load.duration_s;
	return c->sent < load.requests;
}

static void load_record(struct load_thread *t, double lat, bool ok)
{
	if (AR_GROW(t->lat, t->cap, t->nlat + 1, 1024) < 0)
		return;
	t->lat[t->nlat++] = lat;
	if (ok)
		t->ok++;
	else
		t->errors++;
}

/* Start sending the next request; false when the connection is done. */
static bool load_send(struct load_conn *c, int ep)
{
	struct epoll_event ev = { .events = EPOLLOUT | EPOLLIN, .data.ptr = c };

	free(c->out);
	c->out = NULL;
	if (!load_more(c))
		return false;
	c->out = load_request(c->sent++);
	if (!c->out)
		return false;
	c->out_len = strlen(c->out);
	c->out_off = 0;
	c->t0 = ar_now();
	epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
	return true;
}

static void load_close(struct load_conn *c, int ep, int *open)
{
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
	free(c->out);
	c->out = NULL;
	(*open)--;
}

static void load_event(struct load_thread *t, struct load_conn *c, int ep,
		       unsigned int events, int *open)
{
	if ((events & EPOLLOUT) && c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off,
				 c->out_len - c->out_off, MSG_NOSIGNAL);

		if (n < 0 && errno != EAGAIN) {
			t->failed++;
			load_close(c, ep, open);
			return;
		}
		if (n > 0)
			c->out_off += (size_t)n;
		if (c->out_off == c->out_len) {
			struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };

			epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
		}
	}
	if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
		ssize_t n = read(c->fd, c->in + c->in_len,
				 sizeof(c->in) - c->in_len - 1);
		char *nl;

		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			/* closed without (the rest of) an answer */
			t->failed++;
			load_close(c, ep, open);
			return;
		}
		c->in_len += (size_t)n;
		c->in[c->in_len] = '\0';
		nl = strchr(c->in, '\n');
		if (!nl) {
			if (c->in_len == sizeof(c->in) - 1)
				c->in_len = 0;	/* long answer: keep the tail */
			return;
		}
		load_record(t, ar_now() - c->t0,
			    strncmp(c->in, "{\"ok\":true", 10) == 0);
		c->in_len = 0;
		if (!load_send(c, ep))
			load_close(c, ep, open);
	}
}

static void *load_thread_run(void *arg)
{
	struct load_thread *t = arg;
	struct load_conn *conns = calloc((size_t)t->nconns, sizeof(*conns));
	struct epoll_event evs[128];
	int ep = epoll_create1(EPOLL_CLOEXEC), open = 0;

	if (!conns || ep < 0)
		return NULL;
	for (int i = 0; i < t->nconns; i++) {
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &conns[i] };

		conns[i].fd = load_connect();
		if (conns[i].fd < 0) {
			t->failed++;
			continue;
		}
		epoll_ctl(ep, EPOLL_CTL_ADD, conns[i].fd, &ev);
		open++;
		if (!load_send(&conns[i], ep))
			load_close(&conns[i], ep, &open);
	}
	while (open > 0) {
		int n = epoll_wait(ep, evs, 128, 60000);

		if (n <= 0) {
			if (n < 0 && errno == EINTR)
				continue;
			t->failed += open;	/* a minute without a byte */
			break;
		}
		for (int i = 0; i < n; i++)
			load_event(t, evs[i].data.ptr, ep, evs[i].events, &open);
	}
	for (int i = 0; i < t->nconns; i++)
		if (conns[i].fd >= 0)
			close(conns[i].fd);
	free(conns);
	close(ep);
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void load_read_lines(const char *path)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0, lines_cap = 0;
	ssize_t n;

	if (!f) {
		fprintf(stderr, "plannerd-load: %s: %s\n", path, strerror(errno));
		exit(2);
	}
	while ((n = getline(&line, &cap, f)) > 0) {
		if (line[n - 1] == '\n')
			line[--n] = '\0';
		if (!n)
			continue;
		if (AR_GROW(load.lines, lines_cap, load.nlines + 1, 16) < 0 ||
		    !(load.lines[load.nlines] = strdup(line))) {
			fprintf(stderr, "plannerd-load: %s: out of memory\n", path);
			exit(2);
		}
		load.nlines++;
	}
	free(line);
	fclose(f);
	if (!load.nlines) {
		fprintf(stderr, "plannerd-load: %s: no request lines\n", path);
		exit(2);
	}
}

int main(int argc, char **argv)
{
	struct load_thread *threads;
	int nthreads = 1, c;
	long ok = 0, errors = 0, failed = 0;
	double *all, wall;
	size_t nall = 0;

	while ((c = getopt(argc, argv, "s:c:n:t:d:h")) != -1) {
		switch (c) {
		case 's': load.socket = optarg; break;
		case 'c': load.conns = atoi(optarg); break;
		case 'n': load.requests = atoi(optarg); break;
		case 't': nthreads = atoi(optarg); break;
		case 'd': load.duration_s = atof(optarg); break;
		case 'h': fputs(usage, stdout); return 0;
		default: fputs(usage, stderr); return 2;
		}
	}
	if (!load.socket || optind + 1 != argc || load.conns < 1 ||
	    load.requests < 1 || nthreads < 1) {
		fputs(usage, stderr);
		return 2;
	}
	if (nthreads > load.conns)
		nthreads = load.conns;
	load_read_lines(argv[optind]);
	pthread_mutex_init(&load.lock, NULL);
	threads = calloc((size_t)nthreads, sizeof(*threads));
	load.start = ar_now();
	for (int i = 0, first = 0; i < nthreads; i++) {
		threads[i].first = first;
		threads[i].nconns = load.conns / nthreads +
				    (i < load.conns % nthreads);
		first += threads[i].nconns;
		pthread_create(&threads[i].tid, NULL, load_thread_run, &threads[i]);
	}
	for (int i = 0; i < nthreads; i++) {
		pthread_join(threads[i].tid, NULL);
		ok += threads[i].ok;
		errors += threads[i].errors;
		failed += threads[i].failed;
		nall += threads[i].nlat;
	}
	wall = ar_now() - load.start;
	all = calloc(nall ? nall : 1, sizeof(*all));
	nall = 0;
	for (int i = 0; i < nthreads; i++) {
		memcpy(all + nall, threads[i].lat, threads[i].nlat * sizeof(*all));
		nall += threads[i].nlat;
		free(threads[i].lat);
	}
	qsort(all, nall, sizeof(*all), cmp_double);
	printf("{\"answers\":%zu,\"ok\":%ld,\"errors\":%ld,\"failed\":%ld,"
	       "\"wall_s\":%.3f,\"per_s\":%.1f,\"p50_ms\":%.3f,\"p99_ms\":%.3f,"
	       "\"max_ms\":%.3f}\n", nall, ok, errors, failed, wall,
	       nall / wall, nall ? all[nall / 2] * 1e3 : 0,
	       nall ? all[(size_t)(nall * 0.99)] * 1e3 : 0,
	       nall ? all[nall - 1] * 1e3 : 0);
	free(all);
	free(threads);
	return failed ? 1 : 0;
}
