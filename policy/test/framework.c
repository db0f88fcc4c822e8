/*
 * framework.c - plans stock Megatron-LM runs: the layer splits its
 * arguments express (even, the first and last stage given, the embedding
 * and the loss counted as layers) and those they do not, the other
 * properties a plan must have, and the restricted search on the shipped
 * profiles: its plan passes the check, the unrestricted plan is at least
 * as fast, and it honours the budget.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ar.h"
#include "policy.h"

static struct costmodel *cm;	/* llama3-8b: 32 blocks, layers 0..33 */
static struct costmodel *tiny;	/* gpt-tiny: 8 blocks, layers 0..9 */

static int setup(void **state)
{
	struct costmodel_opts o = { .profiles_dir = getenv("AR_PROFILES") };

	if (costmodel_load("llama3-8b", &o, &cm) < 0 ||
	    costmodel_load("gpt-tiny", &o, &tiny) < 0)
		return -1;
	return 0;
}

static int teardown(void **state)
{
	costmodel_destroy(cm);
	costmodel_destroy(tiny);
	return 0;
}

/* A one-template plan of @d stages with @blocks transformer blocks each. */
static void make_plan(struct costmodel_plan *p, struct costmodel_template *t,
		      const int *blocks, int d, int tp)
{
	int layer = 0;

	memset(p, 0, sizeof(*p));
	memset(t, 0, sizeof(*t));
	p->ntemplates = 1;
	p->templates = t;
	p->micro_batch = 2;
	p->global_batch = 64;
	t->nstages = d;
	t->replicas = 4;
	t->micro_batches = 8;
	for (int s = 0; s < d; s++) {
		t->stages[s].tp = tp;
		t->stages[s].ep = 1;
		t->stages[s].etp = tp;
		t->stages[s].first_layer = layer;
		layer += blocks[s] + (s == 0) + (s == d - 1);
		t->stages[s].last_layer = layer - 1;
	}
}

static void expect_split_of(const struct costmodel *m, const int *blocks,
			    int d, int first, int last, bool emb, bool loss)
{
	struct costmodel_plan p;
	struct costmodel_template t;
	struct policy_megatron_split sp;

	make_plan(&p, &t, blocks, d, 2);
	assert_int_equal(policy_megatron_split(m, &t, &sp), 0);
	assert_int_equal(sp.first, first);
	assert_int_equal(sp.last, last);
	assert_int_equal(sp.account_embedding, emb);
	assert_int_equal(sp.account_loss, loss);
	assert_int_equal(policy_framework_check(m, &p, POLICY_FRAMEWORK_MEGATRON), 0);
}

static void expect_split(const int *blocks, int d, int first, int last,
			 bool emb, bool loss)
{
	expect_split_of(cm, blocks, d, first, last, emb, loss);
}

static void test_splits(void **state)
{
	expect_split((const int[]){ 32 }, 1, 0, 0, false, false);
	expect_split((const int[]){ 8, 8, 8, 8 }, 4, 0, 0, false, false);
	expect_split((const int[]){ 10, 22 }, 2, 10, 0, false, false);
	expect_split((const int[]){ 6, 10, 10, 6 }, 4, 6, 6, false, false);
	expect_split((const int[]){ 12, 10, 10 }, 3, 12, 0, false, false);
	expect_split((const int[]){ 10, 10, 12 }, 3, 0, 12, false, false);
	/* a stage of the embedding (or the head) alone: only an even split
	 * that counts it as a layer says it (gpt-tiny: 8 blocks) */
	expect_split_of(tiny, (const int[]){ 0, 1, 1, 1, 1, 1, 1, 1, 1 }, 9,
			0, 0, true, false);
	expect_split_of(tiny, (const int[]){ 0, 1, 1, 1, 1, 1, 1, 1, 1, 0 }, 10,
			0, 0, true, true);
	expect_split_of(tiny, (const int[]){ 1, 1, 1, 1, 1, 1, 1, 1, 0 }, 9,
			0, 0, false, true);
}

static void expect_refusal(struct costmodel_plan *p, const char *property)
{
	assert_int_equal(policy_framework_check(cm, p, POLICY_FRAMEWORK_MEGATRON),
			 -AR_EINFEASIBLE);
	if (!strstr(ar_errmsg(), property))
		fail_msg("\"%s\" does not name \"%s\"", ar_errmsg(), property);
	assert_int_equal(policy_framework_check(cm, p, POLICY_FRAMEWORK_ANY), 0);
}

static void test_refusals(void **state)
{
	struct costmodel_plan p;
	struct costmodel_template t[2];

	make_plan(&p, &t[0], (const int[]){ 4, 8, 12, 8 }, 4, 2);
	expect_refusal(&p, "a layer split it cannot express (transformer blocks per stage: 4 8 12 8)");
	make_plan(&p, &t[0], (const int[]){ 16, 16 }, 2, 2);
	t[0].stages[1].tp = 4;
	t[0].stages[1].etp = 4;
	expect_refusal(&p, "per-stage TP (stage 0 TP 2, stage 1 TP 4)");
	make_plan(&p, &t[0], (const int[]){ 16, 16 }, 2, 2);
	t[0].stages[1].dp = 2;
	expect_refusal(&p, "per-stage data parallelism (stage 1: dp 2)");
	make_plan(&p, &t[0], (const int[]){ 16, 16 }, 2, 2);
	t[0].micro_batches = 9;
	expect_refusal(&p, "9 micro-batches of 2 on 4 replicas are 72 samples, not the global batch of 64");
	make_plan(&p, &t[0], (const int[]){ 16, 16 }, 2, 2);
	t[1] = t[0];
	p.ntemplates = 2;
	expect_refusal(&p, "several templates (2)");
}

static void test_search(void **state)
{
	static const char text[] =
		"{\"name\": \"two\", \"nodes\": ["
		"{\"gpu\": \"a100-40\", \"gpus_per_node\": 4, \"count\": 1},"
		"{\"gpu\": \"h100\", \"gpus_per_node\": 4, \"count\": 1}]}";
	struct costmodel_cluster *cl;
	struct costmodel_plan *meg, *any;
	json_t *root = json_loads(text, 0, NULL);
	struct policy_request req = { .planner = "exhaustive", .threads = 1,
				      .quiet = true, .budget_s = 120 };

	assert_non_null(root);
	assert_int_equal(costmodel_cluster_from_json(cm, root, &cl), 0);
	json_decref(root);
	req.cm = cm;
	req.cl = cl;
	req.framework = POLICY_FRAMEWORK_MEGATRON;
	assert_int_equal(policy_plan(&req, &meg), 0);
	assert_string_equal(meg->planner, "megatron");
	assert_true(meg->search_complete);
	assert_int_equal(policy_framework_check(cm, meg, POLICY_FRAMEWORK_MEGATRON), 0);
	assert_int_equal(costmodel_plan_check(cm, cl, meg), 0);
	req.framework = POLICY_FRAMEWORK_ANY;
	assert_int_equal(policy_plan(&req, &any), 0);
	print_message("# megatron %.1f samples/s, exhaustive %.1f (search %s)\n",
		      meg->predicted.samples_per_s,
		      any->predicted.samples_per_s,
		      any->search_complete ? "complete" : "stopped");
	/*
	 * The exhaustive search takes the fill's split and replicas; the
	 * restricted one also prices other splits, so it may edge past it,
	 * but a plan of one template and one TP degree cannot beat the whole
	 * space by more than the fill's own approximation.
	 */
	if (any->search_complete)
		assert_true(meg->predicted.samples_per_s <=
			    any->predicted.samples_per_s * 1.02);
	costmodel_plan_free(any);
	costmodel_plan_free(meg);
	/* a budget too short to search is reported, not exceeded */
	req.framework = POLICY_FRAMEWORK_MEGATRON;
	req.budget_s = 1e-9;
	assert_int_equal(policy_plan(&req, &meg), -AR_EINFEASIBLE);
	assert_non_null(strstr(ar_errmsg(), "within the budget"));
	costmodel_cluster_free(cl);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_splits),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_search),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
