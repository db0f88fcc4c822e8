/*
 * pool.c - the worker threads that plan.  Planning is CPU-bound and may
 * take the whole budget, so it never runs on the I/O loop: tasks queue
 * here, and each finished task goes on the daemon's done list and wakes
 * the loop through its eventfd.
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
};

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
		struct task *task;

		pthread_mutex_lock(&pool->lock);
		while (!pool->head && !pool->stopping)
			pthread_cond_wait(&pool->cond, &pool->lock);
		task = pool->head;
		if (!task) {
			pthread_mutex_unlock(&pool->lock);
			return NULL;
		}
		pool->head = task->next;
		if (!pool->head)
			pool->tail = NULL;
		pool->queued--;
		pthread_mutex_unlock(&pool->lock);

		task->next = NULL;
		ops_task_run(task);
		pool_finish(pool->d, task);
	}
}

int pool_create(struct daemon *d, int nthreads, struct pool **poolp)
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
	if (!pool->threads) {
		free(pool);
		return -ENOMEM;
	}
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
	free(pool);
}
