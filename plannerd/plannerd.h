/*
 * plannerd.h - the daemon's shared state: configuration generations, the
 * connection and task objects the event loop, the worker pool and the
 * operations pass between them.
 *
 * Threads: one I/O thread runs the event loop (loop.c) and answers what is
 * cheap (ping, status, get, forget, a plan already stored for the same
 * request); planning and durable writes run on the worker pool (pool.c),
 * whose results come back to the loop through an eventfd.
 */
#ifndef PLANNERD_H
#define PLANNERD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

#include <jansson.h>

#include "cache.h"
#include "conf.h"
#include "req.h"
#include "store.h"
#include "topo.h"

struct planner;
struct pool;

/*
 * One configuration and what was built from it.  SIGHUP makes a new one;
 * a task keeps the generation it started with until it ends.
 */
struct gen {
	atomic_int refs;
	struct conf *conf;
	struct planner *planner;
};

struct conn {
	struct conn *prev, *next;	/* waiting list, oldest deadline first */
	int fd;
	uid_t uid;			/* SO_PEERCRED */
	gid_t gid;
	pid_t pid;
	char *in;			/* bytes read, not yet a whole request */
	size_t in_len, in_cap;
	char *out;			/* answer not yet written */
	size_t out_len, out_off;
	double deadline;		/* ar_now() when the client is dropped */
	double req_start;		/* first byte of the partial request */
	double out_start;		/* when the pending answer was ready */
	unsigned int events;		/* epoll mask registered */
	bool listed;			/* on the waiting list */
	bool busy;			/* a task for it is on the pool */
	bool eof;			/* the client shut down its side */
	bool closing;			/* close once the answer is written */
	bool dead;			/* fd closed; freed when its task ends */
};

struct task {
	struct task *next;
	struct daemon *d;
	struct conn *conn;
	struct gen *gen;		/* a reference */
	struct req req;
	uid_t peer_uid;
	uid_t owner;			/* plan: the job's owner */
	json_t *request;		/* plan: the normalized request */
	char *key;			/* plan: its store_request_key() */
	json_t *cached;			/* plan: a cached plan to store */
	/*
	 * The uid whose stored plan of this job id the request would
	 * replace when slurmctld confirms the id changed hands; -1: none.
	 */
	long reclaim_from;
	char *reply;			/* the answer line */
	bool failed;			/* the answer is an error */
};

struct stats {
	atomic_ulong requests;
	atomic_ulong errors;
	atomic_ulong cache_hits;
	atomic_ulong plans;		/* planner calls that made a plan */
	atomic_ulong replans;
	atomic_ulong timeouts;		/* clients dropped for idling */
};

struct daemon {
	/* from the command line */
	const char *conf_path;
	const char *topology_path;
	bool foreground;
	/* state */
	pthread_mutex_t gen_lock;
	struct gen *gen;		/* current generation */
	struct topo topo;
	struct store *store;
	struct cache *cache;
	struct pool *pool;
	int listen_fd;
	int epoll_fd;
	int signal_fd;
	int wake_fd;			/* eventfd: tasks done */
	ino_t socket_ino;		/* ours to unlink at exit */
	char *socket_path;		/* where it was bound (a reload may
					 * name another path for next start) */
	double started;
	struct stats stats;
	struct conn waiting;		/* list sentinel */
	size_t nconns;			/* open or awaiting a task */
	size_t nbusy;			/* tasks on the pool */
	bool draining;			/* SIGTERM: finish and exit */
	pthread_mutex_t done_lock;
	struct task *done;		/* finished tasks for the loop */
};

/* gen.c */
int gen_create(const char *conf_path, struct gen **genp);
struct gen *gen_get(struct daemon *d);
void gen_put(struct gen *gen);

/* ops.c: runs on the loop; either *@replyp or *@taskp is set. */
void ops_dispatch(struct daemon *d, struct conn *c, const char *line,
		  size_t len, char **replyp, struct task **taskp);
/* ops.c: runs on a worker; sets task->reply. */
void ops_task_run(struct task *task);
void ops_task_free(struct task *task);

/* pool.c */
int pool_create(struct daemon *d, int nthreads, int per_user,
		struct pool **poolp);
void pool_submit(struct pool *pool, struct task *task);
size_t pool_queued(struct pool *pool);
void pool_destroy(struct pool *pool);

/* loop.c */
int loop_init(struct daemon *d);
int loop_run(struct daemon *d);
void loop_fini(struct daemon *d);

/* sock.c */
int sock_listen(const struct conf *conf, ino_t *inop);
void sock_unlink(const char *path, ino_t ino);

/* prune.c: forget stored jobs slurmctld reports over (with libslurm). */
struct prune;
int prune_start(struct daemon *d, struct prune **pp);
void prune_stop(struct prune *p);

/* notify.c: sd_notify(3)'s protocol; a no-op outside systemd. */
void notify_send(const char *state);

#endif /* PLANNERD_H */
