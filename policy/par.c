/*
 * par.c - run @n independent tasks over a few threads.  Task i always runs
 * on thread i mod threads, so a result never depends on the scheduling;
 * the caller's thread takes part.
 */
#define AR_INTERNAL 1
#include "config.h"

#include <pthread.h>

#include "arachne_private.h"

#define PAR_MAX_THREADS 64

struct par_arg {
	policy_task_f fn;
	void *ctx;
	int thread;
	int threads;
	int n;
};

static void *par_main(void *p)
{
	struct par_arg *a = p;

	for (int i = a->thread; i < a->n; i += a->threads)
		a->fn(a->ctx, a->thread, i);
	return NULL;
}

void policy_parallel(policy_task_f fn, void *ctx, int n, int threads)
{
	pthread_t tid[PAR_MAX_THREADS];
	struct par_arg args[PAR_MAX_THREADS];
	int started = 0;

	if (n <= 0)
		return;
	if (threads > PAR_MAX_THREADS)
		threads = PAR_MAX_THREADS;
	if (threads > n)
		threads = n;
	if (threads < 1)
		threads = 1;
	for (int t = 0; t < threads; t++)
		args[t] = (struct par_arg){ fn, ctx, t, threads, n };
	for (int t = 1; t < threads; t++) {
		if (pthread_create(&tid[t], NULL, par_main, &args[t]) != 0)
			break;
		started = t;
	}
	par_main(&args[0]);
	/* the share of threads that could not start runs here */
	for (int t = started + 1; t < threads; t++)
		par_main(&args[t]);
	for (int t = 1; t <= started; t++)
		pthread_join(tid[t], NULL);
}
