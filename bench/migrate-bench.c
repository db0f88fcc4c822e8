/*
 * migrate-bench - the migration schedule against its lower bound on the
 * paper's scenarios, and the time of the plan diff at 512 GPUs.
 *
 * Layouts and link bandwidths come from the cost model and the shipped
 * profiles (migrate_layout_from_costmodel(), migrate_topo_from_cluster()):
 * GPT-Neo-2.7B on the §6.2 testbed, LLaMA-3-8B on H100 nodes and on the
 * 3-type 512-GPU cluster, Qwen3-30B-A3B's expert re-layout on moe-512.
 * Plans are built the way planners shape them (one template per node type,
 * or pipelines that span the nodes), not searched: the bench measures the
 * migration, not the planner.
 *
 * Usage: migrate-bench [--repeat N]   (profiles from $AR_PROFILES)
 * The diff's time is the median of N runs (5), in CPU time and wall time.
 * MIGRATE_BENCH_DETAIL=1 adds tuple counts (all, and those over links)
 * and the two stages' times.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ar.h"
#include "costmodel.h"
#include "migrate.h"
#include "scenario.h"

struct setup {
	struct costmodel *cm;
	struct costmodel_cluster *cl;
	struct migrate_layout *layout;
	struct migrate_topo *topo;
};

static void setup_fini(struct setup *su)
{
	migrate_layout_free(su->layout);
	migrate_topo_free(su->topo);
	costmodel_cluster_free(su->cl);
	costmodel_destroy(su->cm);
}

/* @model's layout on the cluster of @cluster_json (a JSON text). */
static int setup_init(struct setup *su, const char *model,
		      const char *cluster_json)
{
	struct costmodel_opts opts = { .profiles_dir = getenv("AR_PROFILES") };
	json_t *root = json_loads(cluster_json, 0, NULL);
	int rc;

	memset(su, 0, sizeof(*su));
	if (!opts.profiles_dir)
		opts.profiles_dir = AR_SRC_PROFILES_DIR;
	rc = costmodel_load(model, &opts, &su->cm);
	if (!rc)
		rc = costmodel_cluster_from_json(su->cm, root, &su->cl);
	if (!rc)
		rc = migrate_layout_from_costmodel(su->cm, &su->layout);
	if (!rc)
		rc = migrate_topo_from_cluster(su->cm, su->cl, &su->topo);
	json_decref(root);
	if (rc < 0) {
		fprintf(stderr, "migrate-bench: %s: %s\n", model, ar_errmsg());
		setup_fini(su);
	}
	return rc;
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
		struct costmodel_template *tm;

		tm = scenario_template_add(p, t->nodes[i].gpus, 1);

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
	if (getenv("MIGRATE_BENCH_DETAIL"))
		printf("  %ld tuples, %ld transfers; stage 1 %.3f s, stage 2 %.3f s\n",
		       m->ntuples, st->ntuples, st->stage1_s, st->stage2_s);
	migrate_free(m);
	return 0;
}

/* §6.2: 3 RTX PRO 6000, then A6000, A5000, A6000, A6000 nodes join. */
static int testbed(void)
{
	static const char *const order[] = {
		"rtx-pro-6000", "a6000", "a5000", "a6000", "a6000",
	};
	struct setup su;
	char name[64];
	int rc;

	rc = setup_init(&su, "gpt-neo-2.7b",
		"{\"name\":\"testbed\",\"inter_node_gbps\":100,\"nodes\":["
		"{\"gpu\":\"rtx-pro-6000\",\"gpus_per_node\":3,\"count\":1},"
		"{\"gpu\":\"a6000\",\"gpus_per_node\":4,\"count\":1},"
		"{\"gpu\":\"a5000\",\"gpus_per_node\":4,\"count\":1},"
		"{\"gpu\":\"a6000\",\"gpus_per_node\":4,\"count\":2}]}");
	if (rc < 0)
		return rc;
	for (int k = 1; k < 5 && !rc; k++) {
		int nl = su.layout->nlayers;
		struct costmodel_plan *o, *n;

		o = per_node_pipelines(su.topo, k, nl);
		n = per_node_pipelines(su.topo, k + 1, nl);
		snprintf(name, sizeof(name), "testbed +%s (%d->%d GPUs)",
			 order[k], 3 + 4 * (k - 1), 3 + 4 * k);
		rc = row(name, su.layout, su.topo, o, n);
		scenario_plan_free(o);
		scenario_plan_free(n);

		/* The same join when pipelines span the nodes (PP grows). */
		o = spanning_pipelines(k, 3, nl);
		n = spanning_pipelines(k + 1, 3, nl);
		snprintf(name, sizeof(name), "testbed +%s, PP %d->%d",
			 order[k], k, k + 1);
		if (!rc)
			rc = row(name, su.layout, su.topo, o, n);
		scenario_plan_free(o);
		scenario_plan_free(n);
	}
	setup_fini(&su);
	return rc;
}

/* A homogeneous H100 job growing one 4-GPU node at a time. */
static int join_one_node(void)
{
	static const int sizes[] = { 2, 8, 32, 127 };
	struct setup su;
	char name[64];
	int rc;

	rc = setup_init(&su, "llama3-8b",
		"{\"name\":\"h100\",\"inter_node_gbps\":100,\"nodes\":["
		"{\"gpu\":\"h100\",\"gpus_per_node\":4,\"count\":128}]}");
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < ARRAY_SIZE(sizes) && !rc; i++) {
		int nl = su.layout->nlayers;
		struct costmodel_plan *o = node_replicas(sizes[i], 2, nl);
		struct costmodel_plan *n = node_replicas(sizes[i] + 1, 2, nl);

		snprintf(name, sizeof(name), "llama8b h100 +1 node (%d->%d)",
			 4 * sizes[i], 4 * sizes[i] + 4);
		rc = row(name, su.layout, su.topo, o, n);
		scenario_plan_free(o);
		scenario_plan_free(n);
	}
	setup_fini(&su);
	return rc;
}

/* profiles/clusters/3type-512.json: every node re-plans. */
static int diff_512(void)
{
	struct costmodel_plan *o, *n;
	struct costmodel_template *tm;
	struct setup su;
	char *text;
	json_t *cl;
	int rc, nl;

	cl = ar_json_load_file(AR_SRC_PROFILES_DIR "/clusters/3type-512.json");
	text = cl ? json_dumps(cl, 0) : NULL;
	json_decref(cl);
	if (!text) {
		fprintf(stderr, "migrate-bench: %s\n", ar_errmsg());
		return -1;
	}
	rc = setup_init(&su, "llama3-8b", text);
	free(text);
	if (rc < 0)
		return rc;
	nl = su.layout->nlayers;
	o = node_replicas(128, 2, nl);
	n = node_replicas(128, 4, nl);
	rc = row("512 GPUs PP2xTP2 -> PP4xTP1", su.layout, su.topo, o, n);
	scenario_plan_free(o);
	scenario_plan_free(n);

	/* TP 4 per node to pipelines spanning 4 nodes at TP 4. */
	o = node_replicas(128, 1, nl);
	n = scenario_plan_new();
	tm = scenario_template_add(n, 4, 32);
	tmpl_split(tm, nl, 4);
	for (int r = 0; r < 32; r++)
		for (int s = 0; s < 4; s++)
			scenario_place(tm, r, s, 4 * r + s, 0);
	if (!rc)
		rc = row("512 GPUs DP128xTP4 -> PP4xDP32xTP4", su.layout,
			 su.topo, o, n);
	scenario_plan_free(o);
	scenario_plan_free(n);
	setup_fini(&su);
	return rc;
}

/*
 * profiles/clusters/moe-512.json, Qwen3-30B-A3B (48 MoE blocks of 128
 * experts): every node a TP-4 replica; the expert layout over all 512 GPUs
 * changes from EP 8 x EDP 64 to EP 16 x ETP 2 x EDP 16.
 */
static int moe_512(void)
{
	struct costmodel_plan *o, *n;
	struct setup su;
	char *text;
	json_t *cl;
	int rc;

	cl = ar_json_load_file(AR_SRC_PROFILES_DIR "/clusters/moe-512.json");
	text = cl ? json_dumps(cl, 0) : NULL;
	json_decref(cl);
	if (!text) {
		fprintf(stderr, "migrate-bench: %s\n", ar_errmsg());
		return -1;
	}
	rc = setup_init(&su, "qwen3-30b-a3b", text);
	free(text);
	if (rc < 0)
		return rc;
	o = node_replicas(128, 1, su.layout->nlayers);
	n = node_replicas(128, 1, su.layout->nlayers);
	scenario_stage_experts(&o->templates[0], 0, 8, 1, 64);
	scenario_stage_experts(&n->templates[0], 0, 16, 2, 16);
	rc = row("moe-512 qwen3-30b EP8 -> EP16xETP2", su.layout, su.topo,
		 o, n);
	scenario_plan_free(o);
	scenario_plan_free(n);
	setup_fini(&su);
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
	if (testbed() < 0 || join_one_node() < 0 || diff_512() < 0 ||
	    moe_512() < 0)
		return 1;
	return 0;
}
