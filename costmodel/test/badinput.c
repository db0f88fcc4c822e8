/*
 * Bad input: every broken file or request is refused with an error that
 * names what is wrong, and nothing crashes (this test also runs under
 * ASan and UBSan in CI).
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "ar.h"
#include "fixture.h"

static void expect_error(int rc, int want_rc, const char *want_msg)
{
	if (rc != want_rc)
		fail_msg("rc %d (%s), want %d; message: %s", rc, ar_strerror(rc),
			 want_rc, ar_errmsg());
	if (!strstr(ar_errmsg(), want_msg))
		fail_msg("message \"%s\" does not mention \"%s\"", ar_errmsg(),
			 want_msg);
}

static void clusters(void **state)
{
	static const struct {
		const char *json;
		const char *msg;
	} cases[] = {
		{ "[]", "not a JSON object" },
		{ "{\"nodes\":[]}", "non-empty" },
		{ "{\"nodes\":[{\"gpu\":\"b200\",\"gpus_per_node\":4,\"count\":1}]}",
		  "unknown GPU \"b200\"" },
		{ "{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":4,\"count\":0}]}",
		  "\"count\" must be an integer from 1 to 65536, not 0" },
		{ "{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":4,\"count\":-3}]}",
		  "\"count\" must be an integer from 1 to 65536, not -3" },
		/* Read as 64 bits before the range check: 2^32 + 1 is not 1. */
		{ "{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":4,\"count\":4294967297}]}",
		  "\"count\" must be an integer from 1 to 65536, not 4294967297" },
		{ "{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":4,\"count\":40000},"
		  "{\"gpu\":\"fast\",\"gpus_per_node\":4,\"count\":40000}]}",
		  "more than 65536 nodes" },
		{ "{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":0,\"count\":1}]}",
		  "\"gpus_per_node\" must be an integer from 1 to 16, not 0" },
		{ "{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":32,\"count\":1}]}",
		  "\"gpus_per_node\" must be an integer from 1 to 16, not 32" },
		{ "{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":2.5,\"count\":1}]}",
		  "must be an integer" },
		{ "{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":4,\"hosts\":\"g[1-\"}]}",
		  "does not parse" },
		{ "{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":4,\"hosts\":\"g1\",\"count\":1}]}",
		  "not both" },
		{ "{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":4,\"hosts\":\"g[1-2],g2\"}]}",
		  "host \"g2\" appears twice" },
		{ "{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":4,\"hosts\":\"n[0000000-0999999]\"}]}",
		  "names more than 65536 hosts" },
		{ "{\"nodes\":[{\"gpu\":\"fast\",\"gpus\":4,\"count\":1}]}",
		  "unknown key \"gpus\"" },
		{ "{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":4,\"count\":1}],\"inter_node_gbps\":-1}",
		  "inter_node_gbps" },
		{ "{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":4,\"count\":1,\"nic_gbps\":-5}]}",
		  "\"nic_gbps\" must be a number from 0.1 to 100000, not -5" },
		{ "{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":4,\"count\":1,\"nic_gbps\":\"fast\"}]}",
		  "\"nic_gbps\" must be a number from 0.1 to 100000" },
		{ "{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":4,\"count\":1,\"nics\":0}]}",
		  "\"nics\" must be an integer from 1 to 64, not 0" },
		{ "{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":4,\"count\":1,\"intra_node\":\"nvlink9\"}]}",
		  "\"intra_node\" must be one of nvlink2" },
		{ "{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":4,\"count\":1,\"intra_node\":\"pcie4\","
		  "\"intra_node_GBps\":20}]}", "not both" },
		/* A link of 1e-308 Gb/s would price every plan at infinity. */
		{ "{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":4,\"count\":1}],\"inter_node_gbps\":1e-308}",
		  "\"inter_node_gbps\" must be a number from 0.1 to 100000, not 1e-308" },
	};
	const char *dir = fixture_create();
	struct costmodel *cm = fixture_load(dir, "toy");
	char path[4096];

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct costmodel_cluster *cl = (void *)1;
		json_t *root = json_loads(cases[i].json, 0, NULL);

		assert_non_null(root);
		expect_error(costmodel_cluster_from_json(cm, root, &cl),
			     -AR_EINVAL, cases[i].msg);
		assert_null(cl);
		json_decref(root);
	}
	/* Malformed JSON: the file, line and column are named. */
	fixture_write(dir, "bad.json", "{\"nodes\": [\n  {\"gpu\": \"fast\",}\n]}\n");
	snprintf(path, sizeof(path), "%s/bad.json", dir);
	struct costmodel_cluster *cl;
	expect_error(costmodel_cluster_load(cm, path, &cl), -AR_EINVAL, "bad.json:2:");
	costmodel_destroy(cm);
	fixture_destroy(dir);
}

static void profiles(void **state)
{
	static const struct {
		const char *file;
		const char *text;
		const char *msg;
	} cases[] = {
		{ "gpus/fast.ini", "[gpu]\nname = fast\n", "memory_gib is missing" },
		{ "gpus/fast.ini",
		  "[gpu]\nname = fast\nmemory_gib = lots\npeak_tflops = 1\nhbm_GBps = 1\n"
		  "intra_node_GBps = 1\nnetwork_gbps = 1\nmax_gpus_per_node = 4\n",
		  "memory_gib = \"lots\" is not a number" },
		{ "gpus/fast.ini",
		  "[gpu]\nname = fast\nmemory_gib = -80\npeak_tflops = 1\nhbm_GBps = 1\n"
		  "intra_node_GBps = 1\nnetwork_gbps = 1\nmax_gpus_per_node = 4\n",
		  "out of range" },
		{ "gpus/fast.ini",
		  "[gpu]\nname = fast\nmemory_gib = 80\npeak_tflops = 1\nhbm_GBps = 1\n"
		  "intra_node_GBps = 1\nnetwork_gbps = 1\nmax_gpus_per_node = 4\nmemroy = 3\n",
		  "unknown key \"memroy\"" },
		{ "gpus/fast.ini",
		  "[gpu]\nname = quick\nmemory_gib = 80\npeak_tflops = 1\nhbm_GBps = 1\n"
		  "intra_node_GBps = 1\nnetwork_gbps = 1\nmax_gpus_per_node = 4\n",
		  "does not match the file name" },
		{ "gpus/fast.ini", "no section here\n", "fast.ini" },
		{ "models/toy.ini", "[model]\nname = toy\nblocks = 8\n", "hidden is missing" },
		{ "models/toy.ini",
		  "[model]\nname = toy\nblocks = 8.5\nhidden = 1024\nffn = 1\nheads = 1\n"
		  "kv_heads = 1\nhead_dim = 1\nvocab = 1\n", "blocks = \"8.5\" is not an integer" },
		{ "models/toy.ini",
		  "[model]\nname = toy\nblocks = 4294967304\nhidden = 1024\nffn = 1\nheads = 1\n"
		  "kv_heads = 1\nhead_dim = 1\nvocab = 1\n", "blocks = 4294967304 is out of range [1, 1024]" },
		{ "gpus/fast.ini", "\xef\xbb\xbf[gpu]\nname = fast\n", "byte-order mark" },
		{ "models/toy.ini",
		  "[model]\nname = toy\nblocks = 8\nhidden = 1024\nffn = 1\nheads = 1\n"
		  "kv_heads = 1\nhead_dim = 1\nvocab = 1\nexperts = 8\ntop_k = 9\nexpert_ffn = 1\n",
		  "top_k" },
		{ "models/toy.ini",
		  "[model]\nname = toy\nblocks = 8\nhidden = 1024\nffn = 1\nheads = 1\n"
		  "kv_heads = 1\nhead_dim = 1\nvocab = 1\ngated = maybe\n",
		  "gated = \"maybe\" is not true or false" },
		{ "layers/toy/fast.ini", "[tp3.mbs1.block]\nfwd_ms = 1\n", "tp3.mbs1.block" },
		{ "layers/toy/fast.ini", "[tp1.mbs1.blocks]\nfwd_ms = 1\n", "tp1.mbs1.blocks" },
		{ "layers/toy/fast.ini",
		  "[tp1.mbs1.block]\nfwd_ms = 1\nbwd_ms = 2\ncomm_ms = 0\nact_bytes = 1\n",
		  "param_bytes is missing" },
		{ "layers/toy/fast.ini",
		  "[tp1.mbs1.block]\nfwd_ms = 1e999\nbwd_ms = 2\ncomm_ms = 0\nact_bytes = 1\nparam_bytes = 1\n",
		  "fwd_ms" },
		{ "layers/toy/fast.ini",
		  "[tp1.mbs1.block]\nfwd_ms = 1\nbwd_ms = 2\ncomm_ms = 0\nact_bytes = 1\nparam_bytes = 1\n"
		  "fwd_attn_ms = 2\n", "exceeds its whole" },
		{ "models/toy.ini",
		  "[model]\nname = toy\nblocks = 8\nhidden = 1024\nffn = 1\nheads = 1\n"
		  "kv_heads = 1\nhead_dim = 1\nvocab = 1\n[training]\nstate_bytes_per_param = 16\n",
		  "state_bytes_per_param is now grad_bytes_per_param" },
		{ "models/toy.ini",
		  "[model]\nname = toy\nblocks = 8\nhidden = 1024\nffn = 1\nheads = 1\n"
		  "kv_heads = 1\nhead_dim = 1\nvocab = 1\n[training]\nactivation_checkpointing = true\n",
		  "recomputation is a plan option" },
		/* A layer that takes no time is a broken profile. */
		{ "layers/toy/fast.ini",
		  "[tp1.mbs1.block]\nfwd_ms = 0\nbwd_ms = 0\ncomm_ms = 0\nact_bytes = 0\nparam_bytes = 0\n",
		  "fwd_ms = 0 is out of range" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		const char *dir = fixture_create();
		struct costmodel_opts opts = { .profiles_dir = dir };
		struct costmodel *cm = (void *)1;

		fixture_write(dir, cases[i].file, cases[i].text);
		expect_error(costmodel_load("toy", &opts, &cm), -AR_EINVAL,
			     cases[i].msg);
		assert_null(cm);
		fixture_destroy(dir);
	}
}

static void unknown_model(void **state)
{
	const char *dir = fixture_create();
	struct costmodel_opts opts = { .profiles_dir = dir };
	struct costmodel *cm;

	expect_error(costmodel_load("gpt-5", &opts, &cm), -AR_ENOTFOUND,
		     "unknown model \"gpt-5\"");
	expect_error(costmodel_load("../etc/passwd", &opts, &cm), -AR_EINVAL,
		     "not valid");
	fixture_destroy(dir);
}

static void fits_nowhere(void **state)
{
	const char *dir = fixture_create();
	struct costmodel *cm = fixture_load(dir, "huge");
	struct costmodel_cluster *cl = fixture_cluster(cm,
		"{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":4,\"count\":4}]}");

	/* Every depth that has room for one replica runs out of memory. */
	for (int depth = 1; depth <= 4; depth++) {
		struct costmodel_shape shape = { .depth = depth };
		struct costmodel_plan *plan = costmodel_plan_create(cm);
		struct costmodel_pool pool;

		for (int s = 0; s < depth; s++)
			shape.tp[s] = 4;
		assert_int_equal(costmodel_pool_init(&pool, cl), 0);
		expect_error(costmodel_fill_add(cm, cl, &pool, plan, &shape, NULL),
			     -AR_EINFEASIBLE, "memory");
		assert_int_equal(plan->ntemplates, 0);
		costmodel_pool_fini(&pool);
		costmodel_plan_free(plan);
	}
	costmodel_cluster_free(cl);
	costmodel_destroy(cm);
	fixture_destroy(dir);
}

static void plans(void **state)
{
#define STAGE(gpu, tp, a, b) "{\"gpu\":\"" gpu "\",\"tp\":" #tp ",\"layers\":[" #a "," #b "]}"
#define STAGE_X(extra) "{\"gpu\":\"fast\",\"tp\":1,\"layers\":[0,9]," extra "}"
#define PLACE(node, gpus) "{\"node\":\"" node "\",\"gpus\":[" gpus "]}"
#define PLAN(stages, placement) \
	"{\"arachne_plan\":1,\"model\":\"toy\",\"micro_batch\":1,\"templates\":" \
	"[{\"replicas\":1,\"stages\":[" stages "],\"placement\":[[" placement "]]}]}"
	static const struct {
		const char *json;
		const char *msg;
	} cases[] = {
		{ PLAN(STAGE("fast", 1, 0, 4) "," STAGE("fast", 1, 5, 9),
		       PLACE("n1", "0") "," PLACE("n1", "0")), "GPU 0 is used twice" },
		{ PLAN(STAGE("fast", 1, 0, 3) "," STAGE("fast", 1, 5, 9),
		       PLACE("n1", "0") "," PLACE("n1", "1")), "continue the pipeline" },
		{ PLAN(STAGE("fast", 1, 0, 8), PLACE("n1", "0")), "layers end at 8" },
		{ PLAN(STAGE("fast", 3, 0, 9), PLACE("n1", "0,1,2")), "tp 3" },
		{ PLAN(STAGE("fast", 1, 0, 9), PLACE("n9", "0")), "\"n9\" is not in the cluster" },
		{ PLAN(STAGE("fast", 1, 0, 9), PLACE("s1", "0")), "has slow GPUs" },
		{ PLAN(STAGE("fast", 1, 0, 9), PLACE("n1", "7")), "has no GPU 7" },
		{ PLAN(STAGE("fast", 2, 0, 9), PLACE("n1", "0")), "must list the stage's 2 GPUs" },
		{ "{\"arachne_plan\":1,\"model\":\"llama\",\"micro_batch\":1,\"templates\":[]}",
		  "\"model\" must be \"toy\"" },
		{ "{\"arachne_plan\":2}", "format version 2" },
		{ "{\"arachne_plan\":1,\"model\":\"toy\",\"micro_batch\":3,\"templates\":"
		  "[{\"replicas\":1,\"stages\":[" STAGE("fast", 1, 0, 9) "],\"placement\":[["
		  PLACE("n1", "0") "]]}]}", "micro_batch 3" },
		{ "{\"arachne_plan\":1,\"model\":\"toy\",\"micro_batch\":1,\"templates\":"
		  "[{\"replicas\":2,\"stages\":[" STAGE("fast", 1, 0, 9) "],\"placement\":[["
		  PLACE("n1", "0") "]]}]}", "one row per replica" },
		{ "{\"arachne_plan\":1,\"model\":\"toy\",\"micro_batch\":1,\"surprise\":1}",
		  "unknown key \"surprise\"" },
		{ "{\"arachne_plan\":1,\"model\":\"toy\",\"micro_batch\":1,\"recompute\":\"some\"}",
		  "\"recompute\" must be \"none\", \"selective\" or \"full\"" },
		{ "{\"arachne_plan\":1,\"model\":\"toy\",\"micro_batch\":1,\"distributed_optimizer\":1}",
		  "\"distributed_optimizer\" must be true or false" },
		/* ep or etp 0 without edp divided by zero (SIGFPE). */
		{ PLAN(STAGE_X("\"ep\":0"), PLACE("n1", "0")), "\"ep\" must be an integer from 1 to 4096, not 0" },
		{ PLAN(STAGE_X("\"etp\":0"), PLACE("n1", "0")), "\"etp\" must be an integer from 1 to 8, not 0" },
		/* ep * etp = 2^32 overflowed int to 0. */
		{ PLAN(STAGE_X("\"ep\":65536,\"etp\":65536"), PLACE("n1", "0")), "\"ep\" must be an integer from 1 to 4096" },
		{ PLAN(STAGE_X("\"ep\":2,\"etp\":1"), PLACE("n1", "0")), "ep*etp = 2*1 does not divide" },
		{ PLAN(STAGE_X("\"peak_mem_gib\":\"x\""), PLACE("n1", "0")), "\"peak_mem_gib\" must be a non-negative number" },
		{ PLAN(STAGE("fast", 0, 0, 9), PLACE("n1", "0")), "\"tp\" must be an integer from 1 to 8, not 0" },
		/* 2^32 + 9 is not layer 9. */
		{ PLAN(STAGE("fast", 1, 0, 4294967305), PLACE("n1", "0")), "\"layers\"[1] must be an integer from 0 to 9, not 4294967305" },
		{ "{\"arachne_plan\":1,\"model\":\"toy\",\"micro_batch\":1,\"templates\":"
		  "[{\"replicas\":4294967297,\"stages\":[" STAGE("fast", 1, 0, 9) "],\"placement\":[["
		  PLACE("n1", "0") "]]}]}", "\"replicas\" must be an integer from 1 to 8, not 4294967297" },
		/* Micro-batches that cover the batch many times over. */
		{ "{\"arachne_plan\":1,\"model\":\"toy\",\"global_batch\":1,\"micro_batch\":1,\"templates\":"
		  "[{\"replicas\":1,\"micro_batches\":256,\"stages\":[" STAGE("fast", 1, 0, 9) "],\"placement\":[["
		  PLACE("n1", "0") "]]}]}", "give 256 micro-batches of 1 samples for a global batch of 1" },
		{ "{\"arachne_plan\":1,\"model\":\"toy\",\"micro_batch\":1,\"templates\":"
		  "[{\"replicas\":1,\"micro_batches\":1073741824,\"stages\":[" STAGE("fast", 1, 0, 9) "],\"placement\":[["
		  PLACE("n1", "0") "]]}]}", "\"micro_batches\" must be an integer from 0 to 16777216" },
		{ "{\"arachne_plan\":1,\"model\":\"toy\",\"micro_batch\":1,\"templates\":"
		  "[{\"replicas\":1,\"micro_batches\":3,\"stages\":[" STAGE("fast", 1, 0, 9) "],\"placement\":[["
		  PLACE("n1", "0") "]]}]}", "cover 3 samples of the global batch of 64" },
		{ "{\"arachne_plan\":1,\"model\":\"toy\",\"global_batch\":-1,\"micro_batch\":1}",
		  "\"global_batch\" must be an integer from 1 to 16777216, not -1" },
		{ "{\"arachne_plan\":1,\"model\":\"toy\",\"micro_batch\":1,\"planner\":7}",
		  "\"planner\" must be an object" },
	};
	const char *dir = fixture_create();
	struct costmodel *cm = fixture_load(dir, "toy");
	struct costmodel_cluster *cl = fixture_cluster(cm,
		"{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":4,\"hosts\":\"n1\"},"
		"{\"gpu\":\"slow\",\"gpus_per_node\":4,\"hosts\":\"s1\"}]}");

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct costmodel_plan *plan = (void *)1;
		json_t *root = json_loads(cases[i].json, 0, NULL);

		if (!root)
			fail_msg("case %zu: test JSON does not parse", i);
		expect_error(costmodel_plan_from_json(cm, cl, root, &plan),
			     -AR_EINVAL, cases[i].msg);
		assert_null(plan);
		json_decref(root);
	}
	costmodel_cluster_free(cl);
	costmodel_destroy(cm);
	fixture_destroy(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(clusters),
		cmocka_unit_test(profiles),
		cmocka_unit_test(unknown_model),
		cmocka_unit_test(fits_nowhere),
		cmocka_unit_test(plans),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
