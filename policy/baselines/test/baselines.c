/*
 * The five baseline planners on the shipped profiles: every plan is
 * feasible (each GPU at most once, TP groups inside a node of the stage's
 * type, stages within memory, layers covering the model once a pipeline,
 * the same price twice), every planner keeps its own restriction, one
 * test per distinctive rule, and budgets are honoured.
 */
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ar.h"
#include "baseline.h"

static const char *const baselines[] = {
	"amp", "sailor", "metis", "hexiscale", "espresso",
};
#define NBASELINES ARRAY_SIZE(baselines)

/* Two types on 4-GPU nodes. */
static const char two_types[] =
	"{\"name\": \"two\", \"nodes\": ["
	"{\"gpu\": \"a100-40\", \"gpus_per_node\": 4, \"count\": 2},"
	"{\"gpu\": \"h100\", \"gpus_per_node\": 4, \"count\": 2}]}";
/* Three types, 1:1:2, on 4-GPU nodes. */
static const char three_types[] =
	"{\"name\": \"three\", \"nodes\": ["
	"{\"gpu\": \"a100-40\", \"gpus_per_node\": 4, \"count\": 1},"
	"{\"gpu\": \"a6000\", \"gpus_per_node\": 4, \"count\": 1},"
	"{\"gpu\": \"h100\", \"gpus_per_node\": 4, \"count\": 2}]}";
/* Non-uniform nodes: 4-GPU and 1-GPU nodes of three types. */
static const char mixed_nodes[] =
	"{\"name\": \"mixed\", \"nodes\": ["
	"{\"gpu\": \"h100\", \"gpus_per_node\": 4, \"count\": 2},"
	"{\"gpu\": \"a100-80\", \"gpus_per_node\": 1, \"count\": 4},"
	"{\"gpu\": \"a100-40\", \"gpus_per_node\": 4, \"count\": 1}]}";
/* 512 GPUs of three types: more than any baseline searches in a second. */
static const char large[] =
	"{\"name\": \"large\", \"nodes\": ["
	"{\"gpu\": \"a100-40\", \"gpus_per_node\": 4, \"count\": 32},"
	"{\"gpu\": \"a6000\", \"gpus_per_node\": 4, \"count\": 32},"
	"{\"gpu\": \"h100\", \"gpus_per_node\": 4, \"count\": 64}]}";
/* One small GPU: Qwen3-32B fits nowhere. */
static const char tiny[] =
	"{\"name\": \"tiny\", \"nodes\": ["
	"{\"gpu\": \"a6000\", \"gpus_per_node\": 1, \"count\": 1}]}";

static struct costmodel *llama;
static struct costmodel *qwen;

static struct costmodel *load(const char *model)
{
	struct costmodel_opts opts = { .profiles_dir = getenv("AR_PROFILES") };
	struct costmodel *cm = NULL;

	if (costmodel_load(model, &opts, &cm) < 0)
		fail_msg("cannot load %s: %s", model, ar_errmsg());
	return cm;
}

static int setup(void **state)
{
	llama = load("llama3-8b");
	qwen = load("qwen3-32b");
	return 0;
}

static int teardown(void **state)
{
	costmodel_destroy(llama);
	costmodel_destroy(qwen);
	return 0;
}

static struct costmodel_cluster *cluster(const struct costmodel *cm,
					 const char *text)
{
	struct costmodel_cluster *cl = NULL;
	json_error_t err;
	json_t *root = json_loads(text, 0, &err);

	assert_non_null(root);
	if (costmodel_cluster_from_json(cm, root, &cl) < 0)
		fail_msg("bad test cluster: %s", ar_errmsg());
	json_decref(root);
	return cl;
}

static struct costmodel_plan *plan_with(const char *planner,
					const struct costmodel *cm,
					const struct costmodel_cluster *cl,
					double budget_s)
{
	struct policy_request req = {
		.cm = cm, .cl = cl, .planner = planner, .budget_s = budget_s,
		.threads = 1, .quiet = true,
	};
	struct costmodel_plan *plan = NULL;
	int rc = policy_plan(&req, &plan);

	if (rc < 0)
		fail_msg("%s on %s: %s (%s)", planner, cl->name, ar_strerror(rc),
			 ar_errmsg());
	assert_non_null(plan);
	assert_string_equal(plan->planner, planner);
	assert_true(plan->plans_priced > 0);
	return plan;
}

/*
 * The invariants, checked here on their own rather than trusting
 * costmodel_plan_check() alone.
 */
static void assert_feasible(const struct costmodel *cm,
			    const struct costmodel_cluster *cl,
			    const struct costmodel_plan *plan)
{
	uint16_t *used = calloc(cl->nnodes, sizeof(*used));
	struct costmodel_plan *again;
	int L = costmodel_num_layers(cm);

	assert_non_null(used);
	assert_int_equal(costmodel_plan_check(cm, cl, plan), 0);
	assert_true(plan->ntemplates >= 1);
	for (int j = 0; j < plan->ntemplates; j++) {
		const struct costmodel_template *t = &plan->templates[j];

		assert_true(t->replicas >= 1);
		assert_int_equal(t->stages[0].first_layer, 0);
		assert_int_equal(t->stages[t->nstages - 1].last_layer, L - 1);
		for (int s = 0; s < t->nstages; s++) {
			const struct costmodel_stage *st = &t->stages[s];

			if (s)
				assert_int_equal(st->first_layer,
						 t->stages[s - 1].last_layer + 1);
			assert_true(st->first_layer <= st->last_layer);
			assert_true(st->peak_mem_gib > 0);
			assert_true(st->peak_mem_gib <=
				    costmodel_gpu(cm, st->gpu)->memory_gib);
			for (int r = 0; r < t->replicas; r++) {
				const struct costmodel_group *g =
					&t->placement[r * t->nstages + s];
				const struct costmodel_node *n =
					&cl->nodes[g->node];

				assert_int_equal(n->gpu, st->gpu);
				assert_true(st->tp <= n->gpus);
				for (int i = 0; i < st->tp; i++) {
					uint16_t bit = (uint16_t)(1u << g->gpu[i]);

					assert_true(g->gpu[i] < n->gpus);
					assert_false(used[g->node] & bit);
					used[g->node] |= bit;
				}
			}
		}
	}
	free(used);
	/* The same plan prices the same again. */
	again = costmodel_plan_clone(plan);
	assert_non_null(again);
	assert_int_equal(costmodel_plan_price(cm, cl, again), 0);
	assert_true(fabs(again->predicted.samples_per_s -
			 plan->predicted.samples_per_s) <=
		    1e-9 * plan->predicted.samples_per_s);
	costmodel_plan_free(again);
}

static bool all_tp_one(const struct costmodel_plan *plan)
{
	for (int j = 0; j < plan->ntemplates; j++)
		for (int s = 0; s < plan->templates[j].nstages; s++)
			if (plan->templates[j].stages[s].tp != 1)
				return false;
	return true;
}

static void every_baseline_is_feasible(void **state)
{
	const char *clusters[] = { two_types, three_types, mixed_nodes };

	for (size_t c = 0; c < 3; c++) {
		struct costmodel_cluster *cl = cluster(llama, clusters[c]);

		for (size_t i = 0; i < NBASELINES; i++) {
			struct costmodel_plan *plan =
				plan_with(baselines[i], llama, cl, 10);

			assert_feasible(llama, cl, plan);
			costmodel_plan_free(plan);
		}
		costmodel_cluster_free(cl);
	}
}

/* Espresso never searches TP: every stage of every plan at TP 1. */
static void espresso_keeps_tp_one(void **state)
{
	const char *clusters[] = { two_types, three_types, mixed_nodes };

	for (size_t c = 0; c < 3; c++) {
		struct costmodel_cluster *cl = cluster(llama, clusters[c]);
		struct costmodel_plan *plan = plan_with("espresso", llama, cl, 10);

		assert_true(all_tp_one(plan));
		costmodel_plan_free(plan);
		costmodel_cluster_free(cl);
	}
}

/*
 * Espresso plans one pipeline and replicates it while its GPU types last;
 * what does not make a whole replica stays idle.
 */
static void espresso_replicates_one_pipeline(void **state)
{
	const char *clusters[] = { two_types, three_types, mixed_nodes };

	for (size_t c = 0; c < 3; c++) {
		struct costmodel_cluster *cl = cluster(llama, clusters[c]);
		struct costmodel_plan *plan = plan_with("espresso", llama, cl, 10);
		const struct costmodel_template *t = &plan->templates[0];

		assert_int_equal(plan->ntemplates, 1);
		assert_int_equal(costmodel_plan_total_gpus(plan),
				 t->replicas * t->nstages);
		costmodel_plan_free(plan);
		costmodel_cluster_free(cl);
	}
}

/* Sailor splits the layers evenly, as the fill's uniform_layers does. */
static void sailor_splits_evenly(void **state)
{
	const char *clusters[] = { two_types, three_types, mixed_nodes };

	for (size_t c = 0; c < 3; c++) {
		struct costmodel_cluster *cl = cluster(llama, clusters[c]);
		struct costmodel_plan *plan = plan_with("sailor", llama, cl, 10);

		for (int j = 0; j < plan->ntemplates; j++) {
			const struct costmodel_template *t = &plan->templates[j];
			int first[COSTMODEL_MAX_DEPTH], last[COSTMODEL_MAX_DEPTH];

			assert_int_equal(baseline_split_even(llama, t->nstages,
							     first, last), 0);
			for (int s = 0; s < t->nstages; s++) {
				assert_int_equal(t->stages[s].first_layer,
						 first[s]);
				assert_int_equal(t->stages[s].last_layer,
						 last[s]);
			}
		}
		costmodel_plan_free(plan);
		costmodel_cluster_free(cl);
	}
}

/*
 * Sailor's TP rule: a stage's degree is the larger of the smallest that
 * fits its layers in memory and the largest whose doubling still sped
 * the stage up by Sailor's threshold (1.5).
 */
static void sailor_tp_is_memory_or_scaling(void **state)
{
	struct costmodel_cluster *cl = cluster(llama, two_types);
	struct costmodel_plan *plan = plan_with("sailor", llama, cl, 10);
	int mbs = plan->micro_batch;

	for (int j = 0; j < plan->ntemplates; j++) {
		const struct costmodel_template *t = &plan->templates[j];

		for (int s = 0; s < t->nstages; s++) {
			const struct costmodel_stage *st = &t->stages[s];
			int tp_mem = 0, tp_speed = 0, want;
			double prev = INFINITY;

			for (int tp = 1; tp <= 4 && !tp_mem; tp *= 2)
				if (baseline_stage_fits(llama, st->gpu, tp, mbs,
							st->first_layer,
							st->last_layer,
							t->nstages - s, NULL))
					tp_mem = tp;
			for (int tp = 1; tp <= 4; tp *= 2) {
				double x = baseline_range_time(llama, st->gpu,
							       tp, mbs,
							       st->first_layer,
							       st->last_layer);

				if (x <= 0 || prev / x < 1.5)
					break;
				tp_speed = tp;
				prev = x;
			}
			want = tp_mem > tp_speed ? tp_mem : tp_speed;
			assert_int_equal(st->tp, want);
		}
	}
	costmodel_plan_free(plan);
	costmodel_cluster_free(cl);
}

/* AMP: one TP degree for every stage of every replica. */
static void amp_keeps_one_tp(void **state)
{
	const char *clusters[] = { two_types, three_types, mixed_nodes };

	for (size_t c = 0; c < 3; c++) {
		struct costmodel_cluster *cl = cluster(llama, clusters[c]);
		struct costmodel_plan *plan = plan_with("amp", llama, cl, 10);
		int tp = plan->templates[0].stages[0].tp;

		for (int j = 0; j < plan->ntemplates; j++)
			for (int s = 0; s < plan->templates[j].nstages; s++)
				assert_int_equal(plan->templates[j].stages[s].tp,
						 tp);
		/* Every replica has the same depth and batch share. */
		for (int j = 1; j < plan->ntemplates; j++) {
			assert_int_equal(plan->templates[j].nstages,
					 plan->templates[0].nstages);
			assert_int_equal(plan->templates[j].micro_batches,
					 plan->templates[0].micro_batches);
		}
		costmodel_plan_free(plan);
		costmodel_cluster_free(cl);
	}
}

static void amp_split_is_optimal(const char *text)
{
	struct costmodel_cluster *cl = cluster(llama, text);
	struct costmodel_plan *plan = plan_with("amp", llama, cl, 10);
	const struct costmodel_template *t = &plan->templates[0];
	int L = costmodel_num_layers(llama), tp = t->stages[0].tp;
	int mbs = plan->micro_batch, ntypes = 0;
	bool present[COSTMODEL_MAX_GPU_TYPES] = { false };
	double *cost = calloc(L, sizeof(*cost)), got = 0, lo = 0, hi = 0;

	assert_non_null(cost);
	for (size_t i = 0; i < cl->nnodes; i++)
		present[cl->nodes[i].gpu] = true;
	for (int g = 0; g < COSTMODEL_MAX_GPU_TYPES; g++)
		ntypes += present[g];
	for (int l = 0; l < L; l++) {
		for (int g = 0; g < COSTMODEL_MAX_GPU_TYPES; g++)
			if (present[g])
				cost[l] += baseline_layer_time(llama, g, tp, mbs,
							       l) / ntypes;
		hi += cost[l];
	}
	for (int s = 0; s < t->nstages; s++) {
		double sum = 0;

		for (int l = t->stages[s].first_layer;
		     l <= t->stages[s].last_layer; l++)
			sum += cost[l];
		got = fmax(got, sum);
	}
	for (int it = 0; it < 200; it++) {
		double mid = (lo + hi) / 2, run = 0;
		int stages = 1;
		bool ok = true;

		for (int l = 0; l < L && ok; l++) {
			if (cost[l] > mid)
				ok = false;
			else if (run + cost[l] > mid) {
				stages++;
				run = cost[l];
			} else {
				run += cost[l];
			}
		}
		if (ok && stages <= t->nstages)
			hi = mid;
		else
			lo = mid;
	}
	assert_true(fabs(got - hi) <= 1e-6 * hi);
	free(cost);
	costmodel_plan_free(plan);
	costmodel_cluster_free(cl);
}

/*
 * AMP's layer split: the smallest bottleneck of per-layer costs averaged
 * over the cluster's GPU types, checked against a bisection on the
 * bottleneck with a greedy test (a different method, the same optimum).
 */
static void amp_splits_by_averaged_cost(void **state)
{
	amp_split_is_optimal(two_types);
	amp_split_is_optimal(three_types);
}

/* HexiScale: one pipeline a data-parallel group, groups on disjoint nodes. */
static void hexiscale_groups_are_disjoint(void **state)
{
	const char *clusters[] = { two_types, three_types, mixed_nodes };

	for (size_t c = 0; c < 3; c++) {
		struct costmodel_cluster *cl = cluster(llama, clusters[c]);
		struct costmodel_plan *plan = plan_with("hexiscale", llama, cl, 10);
		int *owner = malloc(cl->nnodes * sizeof(*owner));

		assert_non_null(owner);
		for (size_t i = 0; i < cl->nnodes; i++)
			owner[i] = -1;
		for (int j = 0; j < plan->ntemplates; j++) {
			const struct costmodel_template *t = &plan->templates[j];

			assert_int_equal(t->replicas, 1);
			for (int s = 0; s < t->nstages; s++) {
				int node = t->placement[s].node;

				assert_true(owner[node] == -1 || owner[node] == j);
				owner[node] = j;
			}
		}
		free(owner);
		costmodel_plan_free(plan);
		costmodel_cluster_free(cl);
	}
}

static bool power_of_two(int x)
{
	return x > 0 && !(x & (x - 1));
}

/* Metis: every stage's device group (replicas x TP) is a power of two. */
static void metis_groups_are_powers_of_two(void **state)
{
	const char *clusters[] = { two_types, three_types, mixed_nodes };

	for (size_t c = 0; c < 3; c++) {
		struct costmodel_cluster *cl = cluster(llama, clusters[c]);
		struct costmodel_plan *plan = plan_with("metis", llama, cl, 10);

		assert_int_equal(plan->ntemplates, 1);
		for (int s = 0; s < plan->templates[0].nstages; s++)
			assert_true(power_of_two(plan->templates[0].replicas *
						 plan->templates[0].stages[s].tp));
		costmodel_plan_free(plan);
		costmodel_cluster_free(cl);
	}
}

/*
 * Metis orders stages by device type: the stages of one GPU type are
 * contiguous, as Metis lays device groups out along a type order.
 */
static void metis_stages_follow_a_type_order(void **state)
{
	struct costmodel_cluster *cl = cluster(llama, three_types);
	struct costmodel_plan *plan = plan_with("metis", llama, cl, 10);
	const struct costmodel_template *t = &plan->templates[0];
	bool seen[COSTMODEL_MAX_GPU_TYPES] = { false };

	for (int s = 0; s < t->nstages; s++) {
		if (s && t->stages[s].gpu != t->stages[s - 1].gpu)
			assert_false(seen[t->stages[s].gpu]);
		seen[t->stages[s].gpu] = true;
	}
	costmodel_plan_free(plan);
	costmodel_cluster_free(cl);
}

/*
 * Sailor, AMP and Espresso need uniform nodes: on a cluster of 4-GPU and
 * 1-GPU nodes every GPU is its own node to them, so no TP group at all.
 */
static void uniform_node_planners_see_single_gpus(void **state)
{
	const char *names[] = { "sailor", "amp", "espresso" };
	struct costmodel_cluster *cl = cluster(llama, mixed_nodes);

	assert_int_equal(baseline_node_gpus(cl), 1);
	for (size_t i = 0; i < 3; i++) {
		struct costmodel_plan *plan = plan_with(names[i], llama, cl, 10);

		assert_true(all_tp_one(plan));
		costmodel_plan_free(plan);
	}
	costmodel_cluster_free(cl);
	cl = cluster(llama, two_types);
	assert_int_equal(baseline_node_gpus(cl), 4);
	costmodel_cluster_free(cl);
}

/* A 1-s budget returns within 2 s, with the search marked incomplete. */
static void budgets_are_honoured(void **state)
{
	struct costmodel_cluster *cl = cluster(llama, large);

	for (size_t i = 0; i < NBASELINES; i++) {
		double start = ar_now(), took;
		struct costmodel_plan *plan =
			plan_with(baselines[i], llama, cl, 1.0);

		took = ar_now() - start;
		if (took > 2.0)
			fail_msg("%s took %.2f s on a 1-s budget", baselines[i],
				 took);
		assert_true(plan->planning_s <= took);
		if (took >= 1.0)
			assert_false(plan->search_complete);
		costmodel_plan_free(plan);
	}
	costmodel_cluster_free(cl);
}

/* A model that fits nowhere: every baseline says so, with the reason. */
static void infeasible_is_reported(void **state)
{
	struct costmodel_cluster *cl = cluster(qwen, tiny);

	for (size_t i = 0; i < NBASELINES; i++) {
		struct policy_request req = {
			.cm = qwen, .cl = cl, .planner = baselines[i],
			.budget_s = 5, .threads = 1, .quiet = true,
		};
		struct costmodel_plan *plan = NULL;

		assert_int_equal(policy_plan(&req, &plan), -AR_EINFEASIBLE);
		assert_null(plan);
		assert_non_null(strstr(ar_errmsg(), baselines[i]));
	}
	costmodel_cluster_free(cl);
}

/* The split helpers: even counts, shares, the embedding and head placed. */
static void splits_cover_the_model(void **state)
{
	int L = costmodel_num_layers(llama), blocks = L - 2;
	int first[COSTMODEL_MAX_DEPTH], last[COSTMODEL_MAX_DEPTH];
	double share[3] = { 1, 1, 2 };

	assert_int_equal(baseline_split_even(llama, 5, first, last), 0);
	assert_int_equal(first[0], 0);
	assert_int_equal(last[4], L - 1);
	/* 32 blocks over 5 stages: 7, 7, 6, 6, 6 */
	assert_int_equal(last[0], 7);
	assert_int_equal(last[1] - first[1] + 1, 7);
	assert_int_equal(last[2] - first[2] + 1, 6);
	assert_int_equal(baseline_split_even(llama, blocks + 1, first, last),
			 -AR_EINVAL);
	assert_int_equal(baseline_split_share(llama, 3, share, first, last), 0);
	/* 32 blocks by 1:1:2 -> 8, 8, 16, with the embedding and the head */
	assert_int_equal(first[0], 0);
	assert_int_equal(last[0], 8);
	assert_int_equal(last[1], 16);
	assert_int_equal(first[2], 17);
	assert_int_equal(last[2], L - 1);
}

/* The shipped layer profiles these tests plan with, or NULL. */
static bool have_profiles(void)
{
	const char *dir = getenv("AR_PROFILES");
	char path[4096];
	FILE *f;

	if (!dir)
		return false;
	snprintf(path, sizeof(path), "%s/layers/qwen3-32b/a6000.ini", dir);
	f = fopen(path, "r");
	if (f)
		fclose(f);
	return f != NULL;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(splits_cover_the_model),
		cmocka_unit_test(every_baseline_is_feasible),
		cmocka_unit_test(espresso_keeps_tp_one),
		cmocka_unit_test(espresso_replicates_one_pipeline),
		cmocka_unit_test(sailor_splits_evenly),
		cmocka_unit_test(sailor_tp_is_memory_or_scaling),
		cmocka_unit_test(amp_keeps_one_tp),
		cmocka_unit_test(amp_splits_by_averaged_cost),
		cmocka_unit_test(hexiscale_groups_are_disjoint),
		cmocka_unit_test(metis_groups_are_powers_of_two),
		cmocka_unit_test(metis_stages_follow_a_type_order),
		cmocka_unit_test(uniform_node_planners_see_single_gpus),
		cmocka_unit_test(budgets_are_honoured),
		cmocka_unit_test(infeasible_is_reported),
	};

	if (!have_profiles()) {
		printf("1..0 # SKIP no layer profiles under $AR_PROFILES\n");
		return 0;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}
