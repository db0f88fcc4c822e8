/*
 * test/role.c - task roles from a plan, and GPU counts from GRES strings.
 * The plan is the two-template example of ARCHITECTURE.md cut down: a
 * 2-stage h100+a100 pipeline replicated twice and a 1-stage a6000 one.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ar.h"
#include "arachne.h"

static const char plan_text[] =
	"{\"arachne_plan\":1,\"model\":\"llama3-8b\",\"micro_batch\":2,"
	"\"templates\":["
	"{\"replicas\":2,\"stages\":["
	"{\"gpu\":\"h100\",\"tp\":2,\"layers\":[0,19],\"ep\":1,\"etp\":1,\"edp\":1},"
	"{\"gpu\":\"a100\",\"tp\":2,\"layers\":[20,33],\"ep\":2,\"etp\":1,\"edp\":1}],"
	"\"placement\":["
	"[{\"node\":\"node2\",\"gpus\":[0,1]},{\"node\":\"node1\",\"gpus\":[0,1]}],"
	"[{\"node\":\"node2\",\"gpus\":[2,3]},{\"node\":\"node1\",\"gpus\":[2,3]}]]},"
	"{\"replicas\":1,\"stages\":["
	"{\"gpu\":\"a6000\",\"tp\":1,\"layers\":[0,33]}],"
	"\"placement\":[[{\"node\":\"node3\",\"gpus\":[0]}]]}],"
	"\"unused\":[],\"predicted\":{\"iters_per_s\":0.5,\"samples_per_s\":64}}";

static json_t *plan_load(void)
{
	json_t *p = json_loads(plan_text, 0, NULL);

	assert_non_null(p);
	return p;
}

static void role_second_replica_last_stage(void **state)
{
	json_t *p = plan_load();
	struct task_role r;

	assert_int_equal(role_find(p, "node1", 3, &r), 0);
	assert_true(r.found);
	assert_int_equal(r.template, 0);
	assert_int_equal(r.stage, 1);
	assert_int_equal(r.pp_size, 2);
	assert_int_equal(r.tp_rank, 1);
	assert_int_equal(r.tp_size, 2);
	assert_int_equal(r.dp_rank, 1);
	assert_int_equal(r.dp_size, 3);
	assert_int_equal(r.layer_first, 20);
	assert_int_equal(r.layer_last, 33);
	assert_int_equal(r.ep, 2);
	assert_string_equal(r.rdzv_node, "node2");
	json_decref(p);
}

static void role_second_template_counts_after_first(void **state)
{
	json_t *p = plan_load();
	struct task_role r;

	assert_int_equal(role_find(p, "node3", 0, &r), 0);
	assert_true(r.found);
	assert_int_equal(r.template, 1);
	assert_int_equal(r.dp_rank, 2);
	assert_int_equal(r.pp_size, 1);
	assert_int_equal(r.ep, 1);	/* absent: 1 */
	assert_string_equal(r.rdzv_node, "node3");
	json_decref(p);
}

static void role_unused_gpu_and_node(void **state)
{
	json_t *p = plan_load();
	struct task_role r;

	assert_int_equal(role_find(p, "node3", 1, &r), 0);
	assert_false(r.found);
	assert_int_equal(role_find(p, "node9", 0, &r), 0);
	assert_false(r.found);
	json_decref(p);
}

static void role_malformed(void **state)
{
	json_t *p = json_loads("{\"templates\":[{\"replicas\":1,"
			       "\"placement\":[[{\"gpus\":[0]}]]}]}", 0, NULL);
	struct task_role r;

	assert_int_equal(role_find(p, "node1", 0, &r), -1);
	json_decref(p);
	p = json_loads("{\"templates\":3}", 0, NULL);
	assert_int_equal(role_find(p, "node1", 0, &r), -1);
	json_decref(p);
}

/* A stage with data parallelism of its own has no role to give (Metis). */
static void role_stage_dp_refused(void **state)
{
	json_t *p = json_loads("{\"templates\":[{\"replicas\":1,\"stages\":["
			       "{\"gpu\":\"h100\",\"tp\":1,\"dp\":2,\"layers\":[0,33]}],"
			       "\"placement\":[[{\"node\":\"node1\",\"gpus\":[0]},"
			       "{\"node\":\"node1\",\"gpus\":[1]}]]}]}", 0, NULL);
	struct task_role r;

	assert_non_null(p);
	assert_int_equal(role_find(p, "node1", 1, &r), -1);
	json_decref(p);
}

static void summary_counts(void **state)
{
	json_t *p = plan_load();
	char buf[256];

	ar_plan_summary(p, buf, sizeof(buf));
	assert_string_equal(buf, "model=llama3-8b templates=2 pipelines=3 gpus=9 micro_batch=2 iters_per_s=0.5 samples_per_s=64");
	json_decref(p);
}

static void gres_strings(void **state)
{
	static const struct {
		const char *in;
		const char *type;
		unsigned count;
	} ok[] = {
		{ "gpu:a100:2(IDX:0-1)", "a100", 2 },
		{ "gpu:h100:3(IDX:0,2-3)", "h100", 3 },
		{ "tmpfs:1,gpu:a6000:1(IDX:0)", "a6000", 1 },
		{ "gpu:h100:4", "h100", 4 },
		{ "gpu:2(IDX:0-1)", "", 2 },
		{ "gpu(IDX:1,3)", "", 2 },
		{ "gpu:a100(IDX:0-3)", "a100", 4 },
		{ "gpu:a100:4(S:0-1),shard:8", "a100", 4 },
	};
	char type[64];
	unsigned n;

	for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
		assert_int_equal(job_gres_parse(ok[i].in, type, sizeof(type),
						&n), 0);
		assert_string_equal(type, ok[i].type);
		assert_int_equal(n, ok[i].count);
	}
	assert_int_equal(job_gres_parse("", type, sizeof(type), &n), -1);
	assert_int_equal(job_gres_parse("(null)", type, sizeof(type), &n), -1);
	assert_int_equal(job_gres_parse("gpumem:8G", type, sizeof(type), &n),
			 -1);
	assert_int_equal(job_gres_parse("tmpfs:1", type, sizeof(type), &n), -1);
}

static void composition_entries(void **state)
{
	struct job_node nodes[2] = {
		{ .name = "node2", .gpu = "h100", .gpus = 4 },
		{ .name = "ws07", .gpu = "", .gpus = 2 },
	};
	json_t *c = job_composition(nodes, 2, 42);
	char *text = json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS);

	assert_string_equal(text, "{\"name\":\"slurm-job-42\",\"nodes\":[{\"gpu\":\"h100\",\"gpus_per_node\":4,\"hosts\":\"node2\"},{\"gpus_per_node\":2,\"hosts\":\"ws07\"}]}");
	free(text);
	json_decref(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(role_second_replica_last_stage),
		cmocka_unit_test(role_second_template_counts_after_first),
		cmocka_unit_test(role_unused_gpu_and_node),
		cmocka_unit_test(role_malformed),
		cmocka_unit_test(role_stage_dp_refused),
		cmocka_unit_test(summary_counts),
		cmocka_unit_test(gres_strings),
		cmocka_unit_test(composition_entries),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
