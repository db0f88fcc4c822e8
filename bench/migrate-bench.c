/*
 * migrate-bench - the migration schedule against its lower bound on the
 * paper's scenarios, and the time of the plan diff at 512 GPUs.
 *
 * Layouts come from the models' published architectures (16 bytes of
 * state per parameter as docs/costmodel.md counts them: BF16 weights and
 * gradients, FP32 master weights and Adam moments); link bandwidths from docs/costmodel.md's GPU table at
 * the cost model's 0.8 efficiency, on 100 Gb/s Ethernet as in §6.2.  Plans
 * are built the way the planners shape them (one template per node type,
 * or pipelines that span the nodes), not searched: the bench measures the
 * migration, not the planner.
 *
 * Usage: migrate-bench [--repeat N]
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ar.h"
#include "migrate.h"
#include "scenario.h"

#define LINK_EFFICIENCY	0.8
#define NET_GBPS	100.0
#define STATE_PER_PARAM	16.0

struct arch {
	const char *name;
	double hidden, ffn, heads, kv_heads, head_dim, vocab;
	int blocks;
	bool gated;
};

static const struct arch gpt_neo = {
	"gpt-neo-2.7b", 2560, 10240, 20, 20, 128, 50257, 32, false,
};
static const struct arch llama8b = {
	"llama3-8b", 4096, 14336, 32, 8, 128, 128256, 32, true,
};

static void set_state(struct migrate_layer *ly, double params)
{
	ly->bytes[MIGRATE_KIND_WEIGHT] = (uint64_t)(2 * params);
	ly->bytes[MIGRATE_KIND_GRAD] = (uint64_t)(2 * params);
	ly->bytes[MIGRATE_KIND_OPTIM] =
		(uint64_t)((STATE_PER_PARAM - 4) * params);
}

static struct migrate_layout *layout_of(const struct arch *a)
{
	struct migrate_layout *l = migrate_layout_create(a->blocks + 2);
	double q = a->heads * a->head_dim, kv = a->kv_heads * a->head_dim;
	double block = a->hidden * (q + 2 * kv) + q * a->hidden +
		       (a->gated ? 3 : 2) * a->hidden * a->ffn + 2 * a->hidden;

	set_state(&l->layers[0], a->vocab * a->hidden);
	for (int i = 1; i <= a->blocks; i++)
		set_state(&l->layers[i], block);
	set_state(&l->layers[a->blocks + 1], a->vocab * a->hidden + a->hidden);
	return l;
}

struct gpu_type {
	const char *name;
	double intra_GBps;		/* nominal, per direction */
};

static const struct gpu_type rtx6000 = { "rtx-pro-6000", 50 };
static const struct gpu_type a6000 = { "a6000", 25 };
static const struct gpu_type a5000 = { "a5000", 25 };
static const struct gpu_type h100 = { "h100", 450 };
static const struct gpu_type a100 = { "a100-40", 300 };

static void node_set(struct migrate_node *n, const struct gpu_type *g,
		     int gpus, int idx)
{
	snprintf(n->name, sizeof(n->name), "%s-%03d", g->name, idx);
	n->gpus = gpus;
	n->intra_GBps = g->intra_GBps * LINK_EFFICIENCY;
	n->nic_GBps = NET_GBPS / 8 * LINK_EFFICIENCY;
}

/* Stages of @tp each, layers split evenly over the template's stages. */
static void tmpl_split(struct costmodel_template *tm, int nlayers, int tp)
{
	for (int s = 0; s < tm->nstages; s++)
		scenario_stage_set(tm, s, tp, nlayers * s / tm->nstages,
				   nlayers * (s + 1) / tm->nstages - 1);
}

/* Each of nodes [0, n) runs its own pipeline of one TP-1 stage per GPU. */
static struct costmodel_plan *per_node_pipelines(const struct migrate_topo *t,
						 int n, int nlayers)
{
	struct costmodel_plan *p = scenario_plan_new();

	for (int i = 0; i < n; i++) {
		struct costmodel_template *tm = scenario_template_add(p, t->nodes[i].gpus, 1);

		tmpl_split(tm, nlayers, 1);
		for (int s = 0; s < tm->nstages; s++)
			scenario_place(tm, 0, s, i, s);
	}
	return p;
}

/* @replicas pipelines across nodes [0, n): stage s on node s, GPU r. */
static struct costmodel_plan *spanning_pipelines(int n, int replicas,
						 int nlayers)
{
	struct costmodel_plan *p = scenario_plan_new();
	struct costmodel_template *tm = scenario_template_add(p, n, replicas);

	tmpl_split(tm, nlayers, 1);
	for (int r = 0; r < replicas; r++)
		for (int s = 0; s < n; s++)
			scenario_place(tm, r, s, s, r);
	return p;
}

/* Nodes [0, n) of 4 GPUs, each a replica of @depth stages of TP 4/depth. */
static struct costmodel_plan *node_replicas(int n, int depth, int nlayers)
{
	struct costmodel_plan *p = scenario_plan_new();
	struct costmodel_template *tm = scenario_template_add(p, depth, n);

	tmpl_split(tm, nlayers, 4 / depth);
	for (int r = 0; r < n; r++)
		for (int s = 0; s < depth; s++)
			scenario_place(tm, r, s, r, s * (4 / depth));
	return p;
}

static int repeat = 5;

/* CPU time of this thread: the machine may be shared, wall time inflates. */
static double cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int dbl_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int row(const char *name, const struct migrate_layout *l,
	       const struct migrate_topo *t, const struct costmodel_plan *o,
	       const struct costmodel_plan *n)
{
	struct migrate *m = NULL;
	double times[64], cpu[64];
	int reps = repeat < 64 ? repeat : 64;

	for (int i = 0; i < reps; i++) {
		double c0;
		int rc;

		migrate_free(m);
		m = NULL;
		c0 = cpu_now();
		rc = migrate_diff(l, t, o, n, NULL, &m);
		cpu[i] = cpu_now() - c0;
		if (rc < 0 || migrate_check(m) < 0) {
			fprintf(stderr, "migrate-bench: %s: %s\n", name,
				ar_errmsg());
			migrate_free(m);
			return -1;
		}
		times[i] = m->stats.diff_s;
	}
	qsort(times, reps, sizeof(double), dbl_cmp);
	qsort(cpu, reps, sizeof(double), dbl_cmp);

	const struct migrate_stats *st = &m->stats;

	printf("%-34s %5d %9.2f %9.2f %6d %9.3f %9.3f %6.3f %8.2f %8.2f\n", name,
	       m->nranks, st->bytes_moved / 1e9, st->bytes_min / 1e9,
	       st->nrounds, st->time_s, st->lower_bound_s,
	       st->lower_bound_s > 0 ? st->time_s / st->lower_bound_s : 1.0,
	       cpu[reps / 2] * 1e3, times[reps / 2] * 1e3);
	migrate_free(m);
	return 0;
}

/* §6.2: 3 RTX PRO 6000, then A6000, A5000, A6000, A6000 nodes join. */
static int testbed(void)
{
	static const struct gpu_type *order[] = {
		&rtx6000, &a6000, &a5000, &a6000, &a6000,
	};
	struct migrate_layout *l = layout_of(&gpt_neo);
	struct migrate_topo *t = migrate_topo_create(5);
	char name[64];
	int rc = 0;

	for (int i = 0; i < 5; i++)
		node_set(&t->nodes[i], order[i], i ? 4 : 3, i);
	for (int k = 1; k < 5 && !rc; k++) {
		struct costmodel_plan *o, *n;

		o = per_node_pipelines(t, k, l->nlayers);
		n = per_node_pipelines(t, k + 1, l->nlayers);
		snprintf(name, sizeof(name), "testbed +%s (%d->%d GPUs)",
			 order[k]->name, 3 + 4 * (k - 1), 3 + 4 * k);
		rc = row(name, l, t, o, n);
		scenario_plan_free(o);
		scenario_plan_free(n);

		/* The same join when pipelines span the nodes (PP grows). */
		o = spanning_pipelines(k, 3, l->nlayers);
		n = spanning_pipelines(k + 1, 3, l->nlayers);
		snprintf(name, sizeof(name), "testbed +%s, PP %d->%d", order[k]->name,
			 k, k + 1);
		if (!rc)
			rc = row(name, l, t, o, n);
		scenario_plan_free(o);
		scenario_plan_free(n);
	}
	migrate_layout_free(l);
	migrate_topo_free(t);
	return rc;
}

/* A homogeneous H100 job growing one 4-GPU node at a time. */
static int join_one_node(void)
{
	static const int sizes[] = { 2, 8, 32, 127 };
	struct migrate_layout *l = layout_of(&llama8b);
	struct migrate_topo *t = migrate_topo_create(128);
	char name[64];
	int rc = 0;

	for (int i = 0; i < 128; i++)
		node_set(&t->nodes[i], &h100, 4, i);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(*sizes) && !rc; i++) {
		struct costmodel_plan *o = node_replicas(sizes[i], 2, l->nlayers);
		struct costmodel_plan *n = node_replicas(sizes[i] + 1, 2,
							 l->nlayers);

		snprintf(name, sizeof(name), "llama8b h100 +1 node (%d->%d)",
			 4 * sizes[i], 4 * sizes[i] + 4);
		rc = row(name, l, t, o, n);
		scenario_plan_free(o);
		scenario_plan_free(n);
	}
	migrate_layout_free(l);
	migrate_topo_free(t);
	return rc;
}

/* 512 GPUs: every node re-plans (PP2 x TP2 -> PP4 x TP1), and a 3-type mix. */
static int diff_512(void)
{
	struct migrate_layout *l = layout_of(&llama8b);
	struct migrate_topo *t = migrate_topo_create(128);
	struct costmodel_plan *o, *n;
	int rc;

	for (int i = 0; i < 128; i++)
		node_set(&t->nodes[i], i < 64 ? &h100 : i < 96 ? &a100 : &a6000,
			 4, i);
	o = node_replicas(128, 2, l->nlayers);
	n = node_replicas(128, 4, l->nlayers);
	rc = row("512 GPUs PP2xTP2 -> PP4xTP1", l, t, o, n);
	scenario_plan_free(o);
	scenario_plan_free(n);

	/* TP 4 per node to pipelines spanning 4 nodes at TP 4. */
	o = node_replicas(128, 1, l->nlayers);
	n = scenario_plan_new();
	{
		struct costmodel_template *tm = scenario_template_add(n, 4, 32);

		tmpl_split(tm, l->nlayers, 4);
		for (int r = 0; r < 32; r++)
			for (int s = 0; s < 4; s++)
				scenario_place(tm, r, s, 4 * r + s, 0);
	}
	if (!rc)
		rc = row("512 GPUs DP128xTP4 -> PP4xDP32xTP4", l, t, o, n);
	scenario_plan_free(o);
	scenario_plan_free(n);
	migrate_layout_free(l);
	migrate_topo_free(t);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--repeat"))
		repeat = atoi(argv[2]) > 0 ? atoi(argv[2]) : 1;
	else if (argc != 1) {
		fprintf(stderr, "usage: migrate-bench [--repeat N]\n");
		return 2;
	}
	printf("%-34s %5s %9s %9s %6s %9s %9s %6s %8s %8s\n", "scenario", "GPUs",
	       "moved GB", "min GB", "rounds", "pred s", "bound s", "ratio",
	       "diff cpu", "wall ms");
	if (testbed() < 0 || join_one_node() < 0 || diff_512() < 0)
		return 1;
	return 0;
}
