/*
 * pool.c - the worker threads that plan.  Planning is CPU-bound and may
 * take the whole budget, so it never runs on the I/O loop: tasks queue
 * here, and each finished task goes on the daemon's done list and wakes
 * the loop through its eventfd.
 *
 * Fair share: at most per_user tasks of one job owner run at once.  A
 * worker takes the oldest queued task whose owner is under that share,
 * so one user's huge requests cannot hold every worker while another
 * user's small plan waits behind them.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "ar.h"
#include "plannerd.h"

struct pool {
	struct daemon *d;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct task *head, *tail;	/* queued, oldest first */
	size_t queued;
	bool stopping;
	int nthreads;
	pthread_t *threads;
	int per_user;			/* tasks of one owner running at once */
	struct pool_share {
		uid_t owner;
		int running;
	} *shares;			/* [nthreads]: owners with running tasks */
};

/* Running tasks of @owner's; its slot in pool->shares when @slotp. */
static int pool_running(struct pool *pool, uid_t owner,
			struct pool_share **slotp)
{
	struct pool_share *free_slot = NULL;

	for (int i = 0; i < pool->nthreads; i++) {
		struct pool_share *sh = &pool->shares[i];

		if (sh->running && sh->owner == owner) {
			if (slotp)
				*slotp = sh;
			return sh->running;
		}
		if (!sh->running && !free_slot)
			free_slot = sh;
	}
	if (slotp)
		*slotp = free_slot;
	return 0;
}

/* The oldest queued task whose owner is under its share, unlinked. */
static struct task *pool_take(struct pool *pool)
{
	struct task *prev = NULL;

	for (struct task *t = pool->head; t; prev = t, t = t->next) {
		struct pool_share *sh;

		if (pool_running(pool, t->owner, &sh) >= pool->per_user)
			continue;
		sh->owner = t->owner;
		sh->running++;
		if (prev)
			prev->next = t->next;
		else
			pool->head = t->next;
		if (pool->tail == t)
			pool->tail = prev;
		pool->queued--;
		t->next = NULL;
		return t;
	}
	return NULL;
}

static void pool_finish(struct daemon *d, struct task *task)
{
	uint64_t one = 1;

	pthread_mutex_lock(&d->done_lock);
	task->next = d->done;
	d->done = task;
	pthread_mutex_unlock(&d->done_lock);
	/* A full eventfd counter still wakes the loop; nothing to retry. */
	if (write(d->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		ar_log(LOG_ERR, "wake the event loop: %m");
}

static void *pool_thread(void *arg)
{
	struct pool *pool = arg;

	for (;;) {
		struct pool_share *sh;
		struct task *task;
		uid_t owner;

		pthread_mutex_lock(&pool->lock);
		while (!(task = pool_take(pool)) &&
		       !(pool->stopping && !pool->head))
			pthread_cond_wait(&pool->cond, &pool->lock);
		pthread_mutex_unlock(&pool->lock);
		if (!task)
			return NULL;

		owner = task->owner;
		ops_task_run(task);
		pool_finish(pool->d, task);

		/* A task its owner's share held back may run now. */
		pthread_mutex_lock(&pool->lock);
		pool_running(pool, owner, &sh);
		sh->running--;
		pthread_cond_broadcast(&pool->cond);
		pthread_mutex_unlock(&pool->lock);
	}
}

int pool_create(struct daemon *d, int nthreads, int per_user,
		struct pool **poolp)
{
	struct pool *pool;
	int rc;

	*poolp = NULL;
	if (nthreads <= 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);

		nthreads = n > 0 ? (int)n : 1;
	}
	pool = calloc(1, sizeof(*pool));
	if (!pool)
		return -ENOMEM;
	pool->threads = calloc((size_t)nthreads, sizeof(*pool->threads));
	pool->shares = calloc((size_t)nthreads, sizeof(*pool->shares));
	if (!pool->threads || !pool->shares) {
		free(pool->threads);
		free(pool->shares);
		free(pool);
		return -ENOMEM;
	}
	/* 0: half the workers, rounded up; never more than all of them. */
	pool->per_user = per_user > 0 ? per_user : (nthreads + 1) / 2;
	if (pool->per_user > nthreads)
		pool->per_user = nthreads;
	pool->d = d;
	pthread_mutex_init(&pool->lock, NULL);
	pthread_cond_init(&pool->cond, NULL);
	for (; pool->nthreads < nthreads; pool->nthreads++) {
		rc = pthread_create(&pool->threads[pool->nthreads], NULL,
				    pool_thread, pool);
		if (rc) {
			pool_destroy(pool);
			return ar_seterr(-rc, "worker thread: %s",
					 ar_strerror(-rc));
		}
	}
	*poolp = pool;
	return 0;
}

void pool_submit(struct pool *pool, struct task *task)
{
	task->next = NULL;
	pthread_mutex_lock(&pool->lock);
	if (pool->tail)
		pool->tail->next = task;
	else
		pool->head = task;
	pool->tail = task;
	pool->queued++;
	pthread_cond_signal(&pool->cond);
	pthread_mutex_unlock(&pool->lock);
}

size_t pool_queued(struct pool *pool)
{
	size_t n;

	pthread_mutex_lock(&pool->lock);
	n = pool->queued;
	pthread_mutex_unlock(&pool->lock);
	return n;
}

/* Runs the queue dry, then joins the threads. */
void pool_destroy(struct pool *pool)
{
	if (!pool)
		return;
	pthread_mutex_lock(&pool->lock);
	pool->stopping = true;
	pthread_cond_broadcast(&pool->cond);
	pthread_mutex_unlock(&pool->lock);
	for (int i = 0; i < pool->nthreads; i++)
		pthread_join(pool->threads[i], NULL);
	pthread_cond_destroy(&pool->cond);
	pthread_mutex_destroy(&pool->lock);
	free(pool->threads);
	free(pool->shares);
	free(pool);
}
