/*
 * prune.c - plannerd forgets jobs that are over.
 *
 * The plugin tells plannerd to forget a job when it ends, but a job whose
 * end never reached this daemon (the daemon was down or hung, the node
 * failed, the job ran on other nodes) would stay in the store for ever,
 * and its id may be handed to another user later.  A thread asks
 * slurmctld at start and then every prune_interval_s whether each stored
 * job is still pending or running, and forgets the others.  Without
 * libslurm (slurmjobs.h) there is no thread.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ar.h"
#include "plannerd.h"
#include "slurmjobs.h"

struct prune {
	struct daemon *d;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;		/* CLOCK_MONOTONIC */
	bool stop;
};

struct prune_ids {
	char **ids;
	size_t n, cap;
};

static void prune_collect(const char *job, const char *key, const json_t *doc,
			  void *arg)
{
	struct prune_ids *v = arg;
	char *id = strdup(job);

	if (!id || AR_GROW(v->ids, v->cap, v->n + 1, 64) < 0) {
		free(id);
		return;
	}
	v->ids[v->n++] = id;
}

/* One pass over the stored jobs; stops at the first unanswered question. */
static void prune_pass(struct daemon *d)
{
	struct prune_ids v = { 0 };
	size_t forgotten = 0;

	store_foreach(d->store, prune_collect, &v);
	for (size_t i = 0; i < v.n; i++) {
		bool over = false;
		int rc = sjob_is_over(v.ids[i], &over);

		if (rc == -AR_EINVAL)
			continue;	/* not a Slurm job id */
		if (rc < 0) {
			ar_log(LOG_DEBUG, "stored jobs not checked: %s",
			       ar_errmsg());
			break;
		}
		if (over && store_forget(d->store, v.ids[i]) == 0) {
			ar_log(LOG_INFO, "job %s: forgotten: slurmctld reports it over",
			       v.ids[i]);
			forgotten++;
		}
	}
	if (forgotten)
		ar_log(LOG_NOTICE, "forgot %zu stored jobs that are over; %zu stored",
		       forgotten, store_count(d->store));
	for (size_t i = 0; i < v.n; i++)
		free(v.ids[i]);
	free(v.ids);
}

static double prune_interval(struct daemon *d)
{
	struct gen *gen = gen_get(d);
	double s = gen->conf->prune_interval_s;

	gen_put(gen);
	return s;
}

static void *prune_main(void *arg)
{
	struct prune *p = arg;

	pthread_mutex_lock(&p->lock);
	while (!p->stop) {
		double interval = prune_interval(p->d);
		struct timespec until;

		if (interval > 0) {
			pthread_mutex_unlock(&p->lock);
			prune_pass(p->d);
			pthread_mutex_lock(&p->lock);
		} else {
			interval = 60;	/* off: look at the setting again later */
		}
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_sec += (time_t)interval;
		until.tv_nsec += (long)((interval - (time_t)interval) * 1e9);
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		while (!p->stop &&
		       pthread_cond_timedwait(&p->cond, &p->lock, &until) !=
		       ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int prune_start(struct daemon *d, struct prune **pp)
{
	pthread_condattr_t attr;
	struct prune *p;
	int rc;

	*pp = NULL;
	if (!sjob_supported())
		return 0;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->d = d;
	pthread_mutex_init(&p->lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&p->cond, &attr);
	pthread_condattr_destroy(&attr);
	rc = pthread_create(&p->thread, NULL, prune_main, p);
	if (rc) {
		pthread_cond_destroy(&p->cond);
		pthread_mutex_destroy(&p->lock);
		free(p);
		return ar_seterr(-rc, "cannot start the pruning thread: %s",
				 strerror(rc));
	}
	*pp = p;
	return 0;
}

void prune_stop(struct prune *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
	pthread_join(p->thread, NULL);
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->lock);
	free(p);
}
