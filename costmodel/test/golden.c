/*
 * Golden numbers: the memory and time model against hand calculations
 * written out below, on the synthetic profiles of fixture.h.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "ar.h"
#include "fixture.h"

#define REL_TOL 1e-6

static const char *dir;

static int setup(void **state)
{
	dir = fixture_create();
	return 0;
}

static int teardown(void **state)
{
	fixture_destroy(dir);
	return 0;
}

static void assert_close(double got, double want, const char *what)
{
	double err = got > want ? got - want : want - got;

	if (err > REL_TOL * (want > 0 ? want : 1))
		fail_msg("%s: got %.12g, want %.12g", what, got, want);
}

static struct costmodel_plan *plan_from(struct costmodel *cm,
					struct costmodel_cluster *cl,
					const char *json)
{
	struct costmodel_plan *plan = fixture_plan(cm, cl, json);

	if (costmodel_plan_price(cm, cl, plan) < 0)
		fail_msg("price: %s", ar_errmsg());
	return plan;
}

/*
 * Dense: 2 stages x 2 replicas on one 4-GPU "fast" node, micro-batch 1,
 * 64 micro-batches, so M = 32 per replica.
 *   t0 = embed 0.3 + 4 blocks * 3.0 = 12.3 ms, plus p2p inside the node:
 *        2 * (1*1024*1024*2 B / (400e9*0.8 B/s) + 5 us) = 23.1072 us
 *   t1 = 4 blocks * 3.0 + head 1.5 = 13.5 ms
 *   pipeline = 31 * 13.5 + (12.3231072 + 13.5) = 444.3231072 ms
 *   sync: both replicas in one node, ring of 2 at 320e9 B/s + 5 us steps:
 *        block 268435456 B -> 838.8608 + 10 us = 0.8488608 ms
 *        embed/head 67108864 B -> 209.7152 + 10 us = 0.2197152 ms
 *        per stage 0.2197152 + 4 * 0.8488608 = 3.6151584 ms
 *   iteration = 0.4443231072 + 0.0036151584 = 0.4479382656 s
 *   memory stage 0: (64 + 4*256) MiB * 8 = 8.5 GiB of state,
 *        2 in flight * (8 + 4*64) MiB = 0.515625 GiB, + 1.5 GiB overhead
 */
static void dense_two_stages(void **state)
{
	struct costmodel *cm = fixture_load(dir, "toy");
	struct costmodel_cluster *cl = fixture_cluster(cm,
		"{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":4,\"hosts\":\"n1\"}]}");
	struct costmodel_plan *plan = plan_from(cm, cl,
		"{\"arachne_plan\":1,\"model\":\"toy\",\"micro_batch\":1,"
		"\"templates\":[{\"replicas\":2,\"stages\":["
		"{\"gpu\":\"fast\",\"tp\":1,\"layers\":[0,4]},"
		"{\"gpu\":\"fast\",\"tp\":1,\"layers\":[5,9]}],"
		"\"placement\":[[{\"node\":\"n1\",\"gpus\":[0]},{\"node\":\"n1\",\"gpus\":[1]}],"
		"[{\"node\":\"n1\",\"gpus\":[2]},{\"node\":\"n1\",\"gpus\":[3]}]]}]}");

	assert_int_equal(plan->templates[0].micro_batches, 32);
	assert_close(plan->templates[0].stages[0].time_s, 0.0123231072, "t0");
	assert_close(plan->templates[0].stages[1].time_s, 0.0135, "t1");
	assert_close(plan->predicted.pipeline_s, 0.4443231072, "pipeline");
	assert_close(plan->predicted.sync_s, 0.0036151584, "sync");
	assert_close(plan->predicted.iter_s, 0.4479382656, "iteration");
	assert_close(plan->predicted.samples_per_s, 64 / 0.4479382656, "samples/s");
	assert_close(plan->templates[0].stages[0].peak_mem_gib,
		     8.5 + 0.515625 + 1.5, "stage 0 memory");
	costmodel_plan_free(plan);
	costmodel_cluster_free(cl);
	costmodel_destroy(cm);
}

/*
 * Two templates of different speed share the batch: one "fast" GPU and
 * one "slow" GPU (3x slower), each a whole-model pipeline, 1-GPU nodes.
 *   t_fast = 0.3 + 8*3 + 1.5 = 25.8 ms; t_slow = 77.4 ms
 *   T = 64 / (1/25.8 + 1/77.4) = 1238.4 ms: M_fast = 48, M_slow = 16
 *   sync over the network, 100 Gb/s * 0.8 = 10e9 B/s per 1-GPU node,
 *   ring of 2 with 20 us steps: block 26.8435456 + 0.04 ms,
 *   embed/head 6.7108864 + 0.04 ms; a stage holds all 10 layers:
 *   2 * 6.7508864 + 8 * 26.8835456 = 228.5701376 ms
 *   iteration = 1.2384 + 0.2285701376 s
 */
static void speed_proportional_batch(void **state)
{
	struct costmodel *cm = fixture_load(dir, "toy");
	struct costmodel_cluster *cl = fixture_cluster(cm,
		"{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":1,\"hosts\":\"f1\"},"
		"{\"gpu\":\"slow\",\"gpus_per_node\":1,\"hosts\":\"s1\"}]}");
	struct costmodel_plan *plan = plan_from(cm, cl,
		"{\"arachne_plan\":1,\"model\":\"toy\",\"micro_batch\":1,\"templates\":["
		"{\"replicas\":1,\"stages\":[{\"gpu\":\"fast\",\"tp\":1,\"layers\":[0,9]}],"
		"\"placement\":[[{\"node\":\"f1\",\"gpus\":[0]}]]},"
		"{\"replicas\":1,\"stages\":[{\"gpu\":\"slow\",\"tp\":1,\"layers\":[0,9]}],"
		"\"placement\":[[{\"node\":\"s1\",\"gpus\":[0]}]]}]}");

	assert_int_equal(plan->templates[0].micro_batches, 48);
	assert_int_equal(plan->templates[1].micro_batches, 16);
	assert_close(plan->predicted.pipeline_s, 1.2384, "pipeline");
	assert_close(plan->predicted.sync_s, 0.2285701376, "sync");
	assert_close(plan->predicted.iter_s, 1.2384 + 0.2285701376, "iteration");
	assert_close(plan->templates[0].stages[0].peak_mem_gib,
		     17 + 648 / 1024.0 + 1.5, "fast stage memory");
	costmodel_plan_free(plan);
	costmodel_cluster_free(cl);
	costmodel_destroy(cm);
}

/*
 * MoE: one stage at TP 2, 2 replicas on a 4-GPU node (W = 4), experts
 * laid out EP 2 x ETP 1 x EDP 2, micro-batch 1, M = 32.
 *   per MoE block: attn at tp 2: 0.25 + 0.5 + 0.1 = 0.85 ms;
 *     experts at etp 1: 6 ms * etp/tp = 3 ms;
 *     all-to-all: 1024*2*0.5 slots * 1024 * 2 B * 1/2 = 1048576 B
 *     inside the node: 4 * (1048576 / 320e9 + 5 us) = 0.0331072 ms
 *   stage = embed 0.3 + 8 * 3.8831072 + head 0.75 = 32.1148576 ms
 *   pipeline = 32 * 32.1148576 ms
 *   sync in the node (320e9 B/s, ring of 2): attn 64 MiB 0.2197152 ms,
 *     experts 1024/2 MiB over EDP 2: 1.6877216 ms, embed/head 32 MiB
 *     0.1148576 ms: 8 * 1.9074368 + 2 * 0.1148576 = 15.4892096 ms
 *   memory: (32 + 32 + 8 * (64 + 512)) MiB * 8 = 36.5 GiB of state;
 *     activations 8 + 64 + 8 * (64 + 16) MiB; 1.5 GiB overhead
 */
static void moe_expert_layout(void **state)
{
	struct costmodel *cm = fixture_load(dir, "toymoe");
	struct costmodel_cluster *cl = fixture_cluster(cm,
		"{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":4,\"hosts\":\"n1\"}]}");
	struct costmodel_plan *plan = plan_from(cm, cl,
		"{\"arachne_plan\":1,\"model\":\"toymoe\",\"micro_batch\":1,"
		"\"templates\":[{\"replicas\":2,\"stages\":["
		"{\"gpu\":\"fast\",\"tp\":2,\"layers\":[0,9],\"ep\":2,\"etp\":1,\"edp\":2}],"
		"\"placement\":[[{\"node\":\"n1\",\"gpus\":[0,1]}],"
		"[{\"node\":\"n1\",\"gpus\":[2,3]}]]}]}");

	assert_close(plan->templates[0].stages[0].time_s, 0.0321148576, "stage");
	assert_close(plan->predicted.pipeline_s, 32 * 0.0321148576, "pipeline");
	assert_close(plan->predicted.sync_s, 0.0154892096, "sync");
	assert_close(plan->templates[0].stages[0].peak_mem_gib,
		     36.5 + 712 / 1024.0 + 1.5, "memory");
	costmodel_plan_free(plan);
	costmodel_cluster_free(cl);
	costmodel_destroy(cm);
}

/*
 * A stage with data parallelism of its own (Metis's device groups): one
 * pipeline on a 4-GPU "fast" node, micro-batch 2, M = 32; stage 0 (layers
 * 0-4) on dp 2 groups of TP 1, each taking 1 sample of every micro-batch;
 * stage 1 (layers 5-9) on one GPU taking both.
 *   t0 = embed 0.3 + 4 blocks * 3.0 at micro-batch 1 = 12.3 ms, plus the
 *        p2p of 2 samples over min(2, 1) = 1 stream inside the node:
 *        2 * (2*1024*1024*2 B / 320e9 B/s + 5 us) = 36.2144 us
 *   t1 = 4 blocks * 6.0 + head 3.0 at micro-batch 2 = 27 ms
 *   pipeline = 31 * 27 + (12.3362144 + 27) = 876.3362144 ms
 *   sync: stage 0's layers are held by 2 groups in one node (ring of 2,
 *        as in dense_two_stages): 3.6151584 ms; stage 1's by one: 0
 *   memory stage 0: 8.5 GiB of state, 2 in flight * (8 + 4*64) MiB at
 *        micro-batch 1 = 0.515625 GiB, + 1.5 GiB overhead
 */
static void stage_data_parallel(void **state)
{
	static const char json[] =
		"{\"arachne_plan\":1,\"model\":\"toy\",\"micro_batch\":2,"
		"\"templates\":[{\"replicas\":1,\"stages\":["
		"{\"gpu\":\"fast\",\"tp\":1,\"dp\":2,\"layers\":[0,4]},"
		"{\"gpu\":\"fast\",\"tp\":1,\"layers\":[5,9]}],"
		"\"placement\":[[{\"node\":\"n1\",\"gpus\":[0]},{\"node\":\"n1\",\"gpus\":[1]},"
		"{\"node\":\"n1\",\"gpus\":[2]}]]}]}";
	struct costmodel *cm = fixture_load(dir, "toy");
	struct costmodel_cluster *cl = fixture_cluster(cm,
		"{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":4,\"hosts\":\"n1\"}]}");
	struct costmodel_plan *plan = plan_from(cm, cl, json), *back;
	const struct costmodel_template *t = &plan->templates[0];
	json_t *out, *row;

	assert_int_equal(costmodel_stage_dp(&t->stages[0]), 2);
	assert_int_equal(costmodel_stage_dp(&t->stages[1]), 1);
	assert_int_equal(costmodel_template_slots(t), 3);
	assert_int_equal(costmodel_template_group(t, 0, 1, 0)->gpu[0], 2);
	assert_int_equal(costmodel_plan_total_gpus(plan), 3);
	assert_int_equal(t->stages[0].edp, 2);
	assert_int_equal(t->micro_batches, 32);
	assert_close(t->stages[0].time_s, 0.0123362144, "t0");
	assert_close(t->stages[1].time_s, 0.027, "t1");
	assert_close(plan->predicted.pipeline_s, 0.8763362144, "pipeline");
	assert_close(t->stages[0].sync_s, 0.0036151584, "stage 0 sync");
	assert_close(t->stages[1].sync_s, 0, "stage 1 sync");
	assert_close(plan->predicted.iter_s, 0.8763362144 + 0.0036151584,
		     "iteration");
	assert_close(t->stages[0].peak_mem_gib, 8.5 + 0.515625 + 1.5,
		     "stage 0 memory");

	/* The JSON round-trips: "dp" on the stage, its groups in the row. */
	out = costmodel_plan_to_json(cm, cl, plan);
	assert_non_null(out);
	row = json_array_get(json_object_get(json_array_get(
		json_object_get(out, "templates"), 0), "placement"), 0);
	assert_int_equal(json_array_size(row), 3);
	assert_int_equal(costmodel_plan_from_json(cm, cl, out, &back), 0);
	assert_int_equal(costmodel_plan_price(cm, cl, back), 0);
	assert_close(back->predicted.iter_s, plan->predicted.iter_s, "round trip");
	json_decref(out);
	costmodel_plan_free(back);

	/* The fill does not complete such a stage, and says so. */
	assert_int_equal(costmodel_plan_refill(cm, cl, plan, NULL), -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "dp > 1"));
	costmodel_plan_free(plan);

	/* A dp that does not divide the micro-batch is refused, by name. */
	{
		char bad[sizeof(json) + 8];
		json_t *root;

		snprintf(bad, sizeof(bad), "%s", json);
		memcpy(strstr(bad, "\"micro_batch\":2"), "\"micro_batch\":1", 15);
		root = json_loads(bad, 0, NULL);
		assert_non_null(root);
		assert_int_equal(costmodel_plan_from_json(cm, cl, root, &back), -AR_EINVAL);
		assert_non_null(strstr(ar_errmsg(), "dp 2"));
		json_decref(root);
	}
	costmodel_cluster_free(cl);
	costmodel_destroy(cm);
}

/* The fill: packing counts and layer balance on known clusters. */
static void fill_packs_and_balances(void **state)
{
	struct costmodel *cm = fixture_load(dir, "toy");
	/* Nodes of 3 fast GPUs: a TP-2 group per node, never across. */
	struct costmodel_cluster *cl = fixture_cluster(cm,
		"{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":3,\"count\":4},"
		"{\"gpu\":\"slow\",\"gpus_per_node\":4,\"count\":2}]}");
	struct costmodel_pool pool;
	struct costmodel_plan *plan = costmodel_plan_create(cm);
	struct costmodel_shape tp2 = { .depth = 1, .gpu = { 0 }, .tp = { 2 } };
	struct costmodel_shape mixed = { .depth = 2, .gpu = { 0, 1 }, .tp = { 1, 1 } };

	assert_int_equal(costmodel_gpu_find(cm, "fast"), 0);
	assert_int_equal(costmodel_pool_init(&pool, cl), 0);
	assert_int_equal(costmodel_fill_replicas(cm, &pool, &tp2), 4);
	assert_int_equal(costmodel_fill_add(cm, cl, &pool, plan, &tp2, NULL), 0);
	assert_int_equal(plan->templates[0].replicas, 4);
	assert_int_equal(pool.free_by_type[0], 4);	/* one left per node */
	/* fast x1 + slow x1: min(4 fast singles, 8 slow) = 4 replicas. */
	assert_int_equal(costmodel_fill_replicas(cm, &pool, &mixed), 4);
	assert_int_equal(costmodel_fill_add(cm, cl, &pool, plan, &mixed, NULL), 0);
	/* A 3x slower stage gets about a quarter of the 8 blocks. */
	const struct costmodel_template *t = &plan->templates[1];
	int fast_blocks = t->stages[0].last_layer - t->stages[0].first_layer;
	assert_true(fast_blocks >= 5 && fast_blocks <= 7);
	assert_int_equal(costmodel_plan_check(cm, cl, plan), 0);
	costmodel_pool_fini(&pool);
	costmodel_plan_free(plan);
	costmodel_cluster_free(cl);
	costmodel_destroy(cm);
}

/*
 * The split weighs each stage's gradient all-reduce.  On a 1 Gb/s network
 * the all-reduce of a block costs more than its compute over a whole
 * iteration, so the split that balances compute (three quarters of the
 * blocks on the fast GPU) is far from the best; the fill's split must be
 * within 1 % of the best of every contiguous split, each priced.
 */
static void fill_split_weighs_sync(void **state)
{
	struct costmodel *cm = fixture_load(dir, "toy");
	struct costmodel_cluster *cl = fixture_cluster(cm,
		"{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":4,\"count\":2},"
		"{\"gpu\":\"slow\",\"gpus_per_node\":4,\"count\":2}],"
		"\"inter_node_gbps\":1}");
	int fast = costmodel_gpu_find(cm, "fast"), slow = costmodel_gpu_find(cm, "slow");
	struct costmodel_shape mixed = { .depth = 2, .gpu = { slow, fast }, .tp = { 1, 1 } };
	struct costmodel_plan *plan = costmodel_plan_create(cm), *trial;
	struct costmodel_pool pool;
	double best = 0, compute_balanced = 0;
	int L = costmodel_num_layers(cm);

	assert_int_equal(costmodel_pool_init(&pool, cl), 0);
	assert_int_equal(costmodel_fill_add(cm, cl, &pool, plan, &mixed, NULL), 0);
	assert_int_equal(plan->templates[0].replicas, 8);
	trial = costmodel_plan_clone(plan);
	assert_non_null(trial);
	/* stage 0 holds layers 0..b, stage 1 the rest */
	for (int b = 1; b <= L - 3; b++) {
		struct costmodel_template *t;

		assert_int_equal(costmodel_plan_copy(trial, plan), 0);
		t = &trial->templates[0];
		t->stages[0].last_layer = b;
		t->stages[1].first_layer = b + 1;
		t->micro_batches = 0;
		if (costmodel_plan_price(cm, cl, trial) < 0)
			continue;
		if (trial->predicted.samples_per_s > best)
			best = trial->predicted.samples_per_s;
		if (b == 2)	/* 2 of 8 blocks on the 3x slower GPU */
			compute_balanced = trial->predicted.samples_per_s;
	}
	assert_true(compute_balanced > 0);
	if (compute_balanced > 0.95 * best)
		fail_msg("the sync does not matter here: compute-balanced %.3f, best %.3f",
			 compute_balanced, best);
	if (plan->predicted.samples_per_s < 0.99 * best)
		fail_msg("filled split %.3f samples/s, best contiguous split %.3f",
			 plan->predicted.samples_per_s, best);
	costmodel_plan_free(trial);
	costmodel_pool_fini(&pool);
	costmodel_plan_free(plan);
	costmodel_cluster_free(cl);
	costmodel_destroy(cm);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(dense_two_stages),
		cmocka_unit_test(speed_proportional_batch),
		cmocka_unit_test(moe_expert_layout),
		cmocka_unit_test(stage_data_parallel),
		cmocka_unit_test(fill_packs_and_balances),
		cmocka_unit_test(fill_split_weighs_sync),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
