/*
 * parallel.c - the planners' one way to use several threads: run @n
 * independent tasks, task i always on thread i mod threads, so a result
 * never depends on the scheduling; the caller's thread takes part.
 */
#include "config.h"

#include <pthread.h>

#include "policy_private.h"

struct par_arg {
	planner_task_f fn;
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

void planner_parallel(planner_task_f fn, void *ctx, int n, int threads)
{
	pthread_t tid[PLANNER_MAX_THREADS];
	struct par_arg args[PLANNER_MAX_THREADS];
	int started = 0;

	if (n <= 0)
		return;
	if (threads > PLANNER_MAX_THREADS)
		threads = PLANNER_MAX_THREADS;
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
