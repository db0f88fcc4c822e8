/*
 * test/jobdir.c - an elastic job's plan directory: generations written
 * whole and in order with the composition each plan was made for, a stale
 * migration or composition of an abandoned attempt removed,
 * compositions without the nodes that leave, and the replan request that
 * carries the plan the state is in (the pending change's "from" while one
 * is pending).
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ar.h"

static char dir[64];

static int setup(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/ar-jobdir.XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	return ar_jobdir_remove(dir);
}

static json_t *comp3(void)
{
	return json_loads("{\"name\":\"slurm-job-7\",\"nodes\":["
			  "{\"gpu\":\"h100\",\"gpus_per_node\":2,\"hosts\":\"n1\"},"
			  "{\"gpu\":\"a100\",\"gpus_per_node\":2,\"hosts\":\"n2\"},"
			  "{\"gpu\":\"h100\",\"gpus_per_node\":2,\"hosts\":\"n3\"}]}",
			  0, NULL);
}

static void test_generations(void **unused)
{
	json_t *state = json_pack("{s:i, s:i, s:i}", "job_id", 7,
				  "generation", 0, "uid", 0), *loaded = NULL;
	json_t *p1 = json_pack("{s:i}", "plan", 1), *p2 = json_pack("{s:i}", "plan", 2);
	json_t *mig = json_pack("{s:i}", "arachne_migration", 1), *got;
	json_t *planned = comp3();
	char path[128], other[128];
	unsigned g = 0;
	int lock;

	lock = ar_jobdir_lock(dir, 1.0);
	assert_true(lock >= 0);
	/* A second locker waits and gives up at its bound. */
	assert_int_equal(ar_jobdir_lock(dir, 0.05), -AR_ETIMEOUT);
	assert_int_equal(ar_jobdir_load(dir, &loaded), 0);
	assert_null(loaded);
	assert_int_equal(ar_jobdir_store(dir, state, p1, NULL, NULL, &g), 0);
	assert_int_equal(g, 1);
	assert_int_equal(ar_jobdir_store(dir, state, p2, planned, mig, &g), 0);
	assert_int_equal(g, 2);
	/* Plan 2's composition as plannerd saw it; plan 1 came without. */
	got = ar_jobdir_cluster(dir, 2);
	assert_true(json_equal(got, planned));
	json_decref(got);
	errno = 0;
	assert_null(ar_jobdir_cluster(dir, 1));
	assert_int_equal(errno, ENOENT);
	assert_int_equal(ar_jobdir_load(dir, &loaded), 0);
	assert_int_equal(json_integer_value(json_object_get(loaded, "generation")), 2);
	got = ar_jobdir_plan(dir, 1);
	assert_true(json_equal(got, p1));
	json_decref(got);
	ar_jobdir_file(path, sizeof(path), dir, "migration", 2);
	assert_int_equal(access(path, R_OK), 0);
	/* An abandoned attempt at 3 left a migration: the real 3 has none. */
	ar_jobdir_file(path, sizeof(path), dir, "migration", 3);
	assert_int_equal(ar_file_write_atomic(path, "{}", 2, 0644), 0);
	ar_jobdir_file(other, sizeof(other), dir, "cluster", 3);
	assert_int_equal(ar_file_write_atomic(other, "{}", 2, 0644), 0);
	assert_int_equal(ar_jobdir_store(dir, state, p1, NULL, NULL, &g), 0);
	assert_int_equal(g, 3);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(access(other, F_OK), -1);
	ar_jobdir_unlock(lock);
	lock = ar_jobdir_lock(dir, 0.05);
	assert_true(lock >= 0);
	ar_jobdir_unlock(lock);
	json_decref(loaded);
	json_decref(state);
	json_decref(p1);
	json_decref(p2);
	json_decref(mig);
	json_decref(planned);
}

static void test_composition_without(void **unused)
{
	json_t *c = comp3(), *gone = json_pack("[s]", "n2"), *out;

	out = ar_composition_without(c, gone);
	assert_int_equal(json_array_size(json_object_get(out, "nodes")), 2);
	assert_true(ar_composition_has(out, "n1"));
	assert_false(ar_composition_has(out, "n2"));
	assert_true(ar_composition_has(out, "n3"));
	/* Order kept, the name too: the plugin compares compositions whole. */
	assert_string_equal(json_string_value(json_object_get(json_array_get(
		json_object_get(out, "nodes"), 1), "hosts")), "n3");
	assert_string_equal(json_string_value(json_object_get(out, "name")),
			    "slurm-job-7");
	/* @c is untouched. */
	assert_int_equal(json_array_size(json_object_get(c, "nodes")), 3);
	json_decref(out);
	json_decref(gone);
	json_decref(c);
}

static void test_replan_request(void **unused)
{
	json_t *c = comp3(), *p1 = json_pack("{s:i}", "plan", 1);
	json_t *p2 = json_pack("{s:i}", "plan", 2), *state, *req, *small;
	unsigned g;

	state = json_pack("{s:i, s:i, s:O, s:{s:s}, s:s}", "job_id", 7,
			  "generation", 0, "composition", c,
			  "model", "name", "toy", "user", "alice");
	assert_int_equal(ar_jobdir_store(dir, state, p1, NULL, NULL, &g), 0);
	small = json_loads("{\"nodes\":[]}", 0, NULL);
	req = ar_jobdir_replan_request(dir, state, small);
	assert_non_null(req);
	assert_string_equal(json_string_value(json_object_get(req, "op")), "replan");
	assert_true(json_equal(json_object_get(json_object_get(req, "previous"), "plan"), p1));
	assert_true(json_equal(json_object_get(json_object_get(req, "previous"), "cluster"), c));
	assert_string_equal(json_string_value(json_object_get(req, "user")), "alice");
	assert_string_equal(json_string_value(json_object_get(json_object_get(req, "model"), "name")), "toy");
	json_decref(req);
	/*
	 * Generation 2 pending from 1: the state is still in plan 1's
	 * layout, on the composition before the change.
	 */
	assert_int_equal(ar_jobdir_store(dir, state, p2, NULL, NULL, &g), 0);
	json_object_set_new(state, "composition", json_incref(small));
	json_object_set_new(state, "pending", json_pack("{s:i, s:{s:O}}",
		"from", 1, "previous", "composition", c));
	req = ar_jobdir_replan_request(dir, state, small);
	assert_true(json_equal(json_object_get(json_object_get(req, "previous"), "plan"), p1));
	assert_true(json_equal(json_object_get(json_object_get(req, "previous"), "cluster"), c));
	json_decref(req);
	json_decref(small);
	json_decref(state);
	json_decref(p1);
	json_decref(p2);
	json_decref(c);
}

static void test_summary(void **unused)
{
	json_t *plan = json_loads("{\"model\":\"toy\",\"micro_batch\":2,\"templates\":["
		"{\"replicas\":2,\"placement\":[[{\"node\":\"n1\",\"gpus\":[0,1]}],"
		"[{\"node\":\"n2\",\"gpus\":[0]}]]}],"
		"\"predicted\":{\"iters_per_s\":0.5,\"samples_per_s\":64}}", 0, NULL);
	char buf[256];

	ar_plan_summary(plan, buf, sizeof(buf));
	assert_string_equal(buf, "model=toy templates=1 pipelines=2 gpus=3 micro_batch=2 iters_per_s=0.5 samples_per_s=64");
	json_decref(plan);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_generations, setup, teardown),
		cmocka_unit_test(test_composition_without),
		cmocka_unit_test_setup_teardown(test_replan_request, setup, teardown),
		cmocka_unit_test(test_summary),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
