/*
 * price-bench - how fast the cost model prices and fills plans.
 *
 *   price-bench --model M --cluster FILE [--seconds S]
 *
 * Builds a plan for the cluster (the first stage option of each GPU type
 * that fits, one template per type, through the fill), then prices it
 * repeatedly for S seconds, and fills it repeatedly likewise.  Prints
 * plans priced per second and microseconds per plan, with the machine's
 * CPU model, since absolute times only mean something with the machine.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ar.h"
#include "costmodel.h"

static void cpu_model(char *buf, size_t len)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[512];

	snprintf(buf, len, "unknown CPU");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');

		if (strncmp(line, "model name", 10) == 0 && colon) {
			snprintf(buf, len, "%s", colon + 2);
			buf[strcspn(buf, "\n")] = '\0';
			break;
		}
	}
	fclose(f);
}

int main(int argc, char **argv)
{
	const char *model = NULL, *cluster = NULL;
	double seconds = 2;
	struct costmodel *cm;
	struct costmodel_cluster *cl;
	struct costmodel_plan *plan, *work;
	struct costmodel_pool pool;
	char cpu[256];
	long n;
	double t0, dt;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--model"))
			model = argv[i + 1];
		else if (!strcmp(argv[i], "--cluster"))
			cluster = argv[i + 1];
		else if (!strcmp(argv[i], "--seconds"))
			seconds = atof(argv[i + 1]);
	}
	if (!model || !cluster || seconds <= 0) {
		fprintf(stderr, "usage: price-bench --model M --cluster FILE [--seconds S]\n");
		return 2;
	}
	if (costmodel_load(model, NULL, &cm) < 0 ||
	    costmodel_cluster_load(cm, cluster, &cl) < 0) {
		fprintf(stderr, "price-bench: %s\n", ar_errmsg());
		return 2;
	}
	plan = costmodel_plan_create(cm);
	costmodel_pool_init(&pool, cl);
	/* One template per GPU type: the deepest TP-1..8, depth-1..8 that fits. */
	for (int g = 0; g < costmodel_num_gpus(cm); g++) {
		bool done = false;

		for (int d = 2; d <= 8 && !done; d *= 2)
			for (int tp = 1; tp <= 8 && !done; tp *= 2) {
				struct costmodel_shape s = { .depth = d };

				for (int k = 0; k < d; k++) {
					s.gpu[k] = g;
					s.tp[k] = tp;
				}
				done = costmodel_fill_add(cm, cl, &pool, plan, &s, NULL) == 0;
			}
	}
	if (!plan->ntemplates) {
		fprintf(stderr, "price-bench: nothing fits: %s\n", ar_errmsg());
		return 1;
	}
	cpu_model(cpu, sizeof(cpu));
	printf("machine: %s\n", cpu);
	printf("plan: %s on %s, %d GPUs in %d templates, %.1f samples/s\n",
	       model, cl->name, costmodel_plan_total_gpus(plan), plan->ntemplates,
	       plan->predicted.samples_per_s);

	work = costmodel_plan_clone(plan);
	t0 = ar_now();
	n = 0;
	do {
		for (int i = 0; i < 100; i++)
			costmodel_plan_price(cm, cl, work);
		n += 100;
		dt = ar_now() - t0;
	} while (dt < seconds);
	printf("price: %ld plans in %.2f s: %.0f plans/s, %.2f us/plan\n",
	       n, dt, n / dt, dt / n * 1e6);

	t0 = ar_now();
	n = 0;
	do {
		costmodel_plan_refill(cm, cl, work, NULL);
		n++;
		dt = ar_now() - t0;
	} while (dt < seconds);
	printf("refill (split, tiling, 5 micro-batch sizes): %ld in %.2f s: %.2f us each\n",
	       n, dt, dt / n * 1e6);

	costmodel_plan_free(work);
	costmodel_plan_free(plan);
	costmodel_pool_fini(&pool);
	costmodel_cluster_free(cl);
	costmodel_destroy(cm);
	return 0;
}
