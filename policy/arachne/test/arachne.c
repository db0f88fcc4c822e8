/*
 * test/arachne.c - training and planning end to end on the synthetic
 * profiles: a short training run on a toy composition raises the reward
 * of its greedy construction, training is reproducible from its seed
 * whatever the thread count, and planning with the same seed gives the
 * same plan (also across thread counts).  A replay (opts.follow) builds
 * exactly the plan it follows, refuses one the masks refuse, each sampling
 * temperature acts on its own head's decisions, and training
 * imitates climbed plans that beat its rollouts and its teacher plans.
 */
#define AR_INTERNAL 1
#include "config.h"

#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ar.h"
#include "arachne_private.h"
#include "fixture.h"

static char *dir;
static struct costmodel *cm;
static struct costmodel_cluster *toy;
static char policy_path[4200];

static const char *toy_json =
	"{\"name\":\"toy\",\"nodes\":["
	"{\"gpu\":\"big\",\"gpus_per_node\":4,\"count\":2},"
	"{\"gpu\":\"mid\",\"gpus_per_node\":8,\"count\":1},"
	"{\"gpu\":\"small\",\"gpus_per_node\":4,\"count\":4}]}";

static int setup(void **state)
{
	dir = pfix_create();
	cm = fixture_load(dir, "dense");
	toy = fixture_cluster(cm, toy_json);
	snprintf(policy_path, sizeof(policy_path), "%s/policy.safetensors", dir);
	return 0;
}

static int teardown(void **state)
{
	costmodel_cluster_free(toy);
	costmodel_destroy(cm);
	fixture_destroy(dir);
	return 0;
}

/* Mean return of @n rollouts (greedy when @n == 1) of @net on the toy. */
static double toy_return(const struct policy_net *net, int n)
{
	struct policy_env env;
	struct policy_episode ep;
	struct policy_work w;
	struct policy_rng rng;
	struct policy_trace tr = { 0 };
	double sum = 0.0;

	assert_int_equal(policy_env_init(&env, cm, toy), 0);
	assert_int_equal(policy_episode_init(&ep, &env), 0);
	assert_int_equal(policy_work_init(&w, 1), 0);
	policy_rng_seed(&rng, 77, 0);
	for (int i = 0; i < n; i++) {
		struct policy_rollout_opts o = {
			.draw = n == 1 ? POLICY_DRAW_GREEDY : POLICY_DRAW_SAMPLE,
			.depth_temperature = 1.0f,
			.stage_temperature = 1.0f,
		};

		assert_int_equal(policy_rollout(&ep, net, &w, &rng, &o, &tr), 0);
		sum += tr.ret;
	}
	policy_trace_fini(&tr);
	policy_work_fini(&w);
	policy_episode_fini(&ep);
	return sum / n;
}

static struct policy_train_opts train_opts(long episodes, int threads,
					   unsigned long seed, const char *out)
{
	static const struct costmodel_cluster *fixed[1];

	fixed[0] = toy;
	return (struct policy_train_opts){
		.model = "dense", .episodes = episodes, .seed = seed,
		.threads = threads, .group = 8, .batch = 1, .out = out,
		.command = "test/arachne.t", .quiet = true,
		.fixed = fixed, .nfixed = 1,
	};
}

static int train(long episodes, int threads, unsigned long seed, const char *out,
		 struct policy_train_result *res)
{
	struct policy_train_opts o = train_opts(episodes, threads, seed, out);

	return policy_train(cm, &o, res);
}

static void test_training_raises_reward(void **state)
{
	struct policy_train_result res;
	struct policy_net before, after;
	struct policy_meta meta;
	double g0, g1, s0, s1;

	assert_int_equal(policy_net_init(&before, 3), 0);	/* the trainer's init for seed 3 */
	g0 = toy_return(&before, 1);
	s0 = toy_return(&before, 64);
	/* The policy gradient alone, no teacher: 320 updates move the toy's
	 * sampled mean clearly (the depth head scoring 17 candidate rows
	 * moves more slowly than a single 17-way row did at 160). */
	assert_int_equal(train(320, 2, 3, policy_path, &res), 0);
	assert_int_equal(policy_net_init(&after, 0), 0);
	assert_int_equal(policy_weights_load(&after, &meta, policy_path), 0);
	assert_int_equal(meta.episodes, 320);
	assert_int_equal(meta.seed, 3);
	assert_string_equal(meta.model, "dense");
	g1 = toy_return(&after, 1);
	s1 = toy_return(&after, 64);
	print_message("# greedy return %.4f -> %.4f, sampled mean %.4f -> %.4f\n",
		      g0, g1, s0, s1);
	assert_true(s1 > s0 + 0.02);
	assert_true(g1 >= g0);
	policy_net_fini(&before);
	policy_net_fini(&after);
}

/* A sampled rollout's plan, replayed, is built again decision by decision. */
static void test_replay_builds_the_plan(void **state)
{
	struct policy_env env;
	struct policy_episode ep;
	struct policy_work w;
	struct policy_rng rng;
	struct policy_net net;
	struct policy_trace orig = { 0 }, again = { 0 };
	struct policy_rollout_opts sample = { .draw = POLICY_DRAW_SAMPLE,
					      .depth_temperature = 1.0f,
					      .stage_temperature = 1.0f,
					      .record = true };
	struct policy_rollout_opts replay = { .draw = POLICY_DRAW_GREEDY,
					      .record = true };
	struct policy_candidate x = { 0 };
	bool ok = true;
	int replayed = 0;

	assert_int_equal(policy_env_init(&env, cm, toy), 0);
	assert_int_equal(policy_episode_init(&ep, &env), 0);
	assert_int_equal(policy_work_init(&w, 1), 0);
	assert_int_equal(policy_net_init(&net, 5), 0);
	for (int seed = 0; seed < 16; seed++) {
		policy_rng_seed(&rng, 91, seed);
		assert_int_equal(policy_rollout(&ep, &net, &w, &rng, &sample, &orig), 0);
		if (orig.throughput <= 0.0)
			continue;
		assert_int_equal(policy_rollout_starts(&orig, &ok, 1, &x, 1), 1);
		replay.follow = &x;
		assert_int_equal(policy_rollout(&ep, &net, &w, &rng, &replay, &again), 0);
		assert_int_equal(again.nshapes, x.n);
		for (int i = 0; i < x.n; i++)
			assert_memory_equal(&again.shapes[i], &orig.shapes[i],
					    sizeof(orig.shapes[i]));
		assert_float_equal(again.throughput, orig.throughput,
				   1e-9 * orig.throughput);
		for (int i = 0; i < again.ndec; i++)
			assert_int_equal(again.dec[i].forced, 1);
		/* it ends on STOP unless the masks left nothing but STOP */
		if (again.ndec && again.dec[again.ndec - 1].head == POLICY_HEAD_DEPTH)
			assert_int_equal(again.dec[again.ndec - 1].action, 0);
		replayed++;
	}
	assert_true(replayed > 0);

	/* a TP degree the policy cannot name is refused, not built */
	x.t[0].stage[0].tp = 3;
	assert_int_equal(policy_rollout(&ep, &net, &w, &rng, &replay, &again),
			 -AR_EINFEASIBLE);
	policy_trace_fini(&orig);
	policy_trace_fini(&again);
	policy_net_fini(&net);
	policy_work_fini(&w);
	policy_episode_fini(&ep);
}

/*
 * Each temperature acts on its own decisions: near zero, the depths (or
 * the stages) a sampled construction draws are the greedy one's, while
 * the other decisions still vary.  (The untrained network's scores
 * differ by thousandths, hence 1e-5.)  Unset, they sample at 1.
 */
static void test_temperatures_by_head(void **state)
{
	struct policy_env env;
	struct policy_episode ep;
	struct policy_work w;
	struct policy_rng rng;
	struct policy_net net;
	struct policy_trace greedy = { 0 }, tr = { 0 }, tr_at_one = { 0 };
	struct policy_rollout_opts gopts = { .draw = POLICY_DRAW_GREEDY };
	int other_stages = 0, other_depths = 0, same_depth = 0;

	assert_int_equal(policy_env_init(&env, cm, toy), 0);
	assert_int_equal(policy_episode_init(&ep, &env), 0);
	assert_int_equal(policy_work_init(&w, 1), 0);
	assert_int_equal(policy_net_init(&net, 5), 0);
	policy_rng_seed(&rng, 93, 0);
	assert_int_equal(policy_rollout(&ep, &net, &w, &rng, &gopts, &greedy), 0);
	assert_true(greedy.nshapes > 0);
	for (int seed = 0; seed < 32; seed++) {
		struct policy_rollout_opts cold_depth = {
			.draw = POLICY_DRAW_SAMPLE,
			.depth_temperature = 1e-5f, .stage_temperature = 1.0f,
		};
		struct policy_rollout_opts cold_stages = {
			.draw = POLICY_DRAW_SAMPLE,
			.depth_temperature = 1.0f, .stage_temperature = 1e-5f,
		};

		policy_rng_seed(&rng, 93, seed + 1);
		assert_int_equal(policy_rollout(&ep, &net, &w, &rng, &cold_depth, &tr), 0);
		assert_int_equal(tr.first_depth, greedy.first_depth);
		other_stages += tr.nshapes > 0 &&
				memcmp(&tr.shapes[0], &greedy.shapes[0],
				       sizeof(tr.shapes[0])) != 0;

		policy_rng_seed(&rng, 93, seed + 1);
		assert_int_equal(policy_rollout(&ep, &net, &w, &rng, &cold_stages, &tr), 0);
		if (tr.first_depth != greedy.first_depth) {
			other_depths++;
		} else if (tr.nshapes > 0) {
			assert_memory_equal(&tr.shapes[0], &greedy.shapes[0],
					    sizeof(tr.shapes[0]));
			same_depth++;
		}
	}
	assert_true(other_stages > 0);
	assert_true(other_depths > 0);
	assert_true(same_depth > 0);

	/* unset (0) samples as the policy does, at 1 */
	for (int seed = 0; seed < 8; seed++) {
		struct policy_rollout_opts unset = { .draw = POLICY_DRAW_SAMPLE };
		struct policy_rollout_opts at_one = {
			.draw = POLICY_DRAW_SAMPLE,
			.depth_temperature = 1.0f, .stage_temperature = 1.0f,
		};

		policy_rng_seed(&rng, 95, seed);
		assert_int_equal(policy_rollout(&ep, &net, &w, &rng, &unset, &tr), 0);
		policy_rng_seed(&rng, 95, seed);
		assert_int_equal(policy_rollout(&ep, &net, &w, &rng, &at_one, &tr_at_one), 0);
		assert_int_equal(tr.nshapes, tr_at_one.nshapes);
		for (int i = 0; i < tr.nshapes; i++)
			assert_memory_equal(&tr.shapes[i], &tr_at_one.shapes[i],
					    sizeof(tr.shapes[i]));
	}
	policy_trace_fini(&greedy);
	policy_trace_fini(&tr);
	policy_trace_fini(&tr_at_one);
	policy_net_fini(&net);
	policy_work_fini(&w);
	policy_episode_fini(&ep);
}

/*
 * Training climbs its best rollouts and imitates what the climb gained
 * (without the teacher plan, which the climbs would rarely pass).
 */
static void test_training_imitates_climbed_plans(void **state)
{
	struct policy_train_opts o = train_opts(40, 2, 4, NULL);
	struct policy_train_result res;

	o.no_teacher = true;
	assert_int_equal(policy_train(cm, &o, &res), 0);
	print_message("# %ld climbed plans imitated\n", res.distilled);
	assert_true(res.distilled > 0);
	assert_int_equal(res.teachers, 0);
}

/* The toy's teacher plan: its best structured plan, climbed as training climbs it. */
static double teacher_return(void)
{
	struct policy_env env;
	struct planner_deadline dl = { .start = ar_now(), .end = INFINITY };
	struct policy_climb climb = { .env = &env, .threads = 1, .dl = &dl };
	struct policy_candidate x;
	long priced = 0;

	assert_int_equal(policy_env_init(&env, cm, toy), 0);
	assert_int_equal(policy_structured_start(&env, 1, &x, &priced), 1);
	assert_int_equal(policy_climb_run(&climb, &x, POLICY_START_WORK), 0);
	return x.thr / env.reference;
}

/*
 * Imitating the teacher before any rollout makes the greedy construction
 * build the teacher's plan, which an untrained policy does not reach.
 */
static void test_training_imitates_the_teacher(void **state)
{
	struct policy_train_opts o = train_opts(1, 2, 6, policy_path);
	struct policy_train_result res;
	struct policy_net before, after;
	double teacher = teacher_return(), g0, g1;

	assert_int_equal(policy_net_init(&before, 6), 0);
	g0 = toy_return(&before, 1);
	o.imitation_steps = 300;
	assert_int_equal(policy_train(cm, &o, &res), 0);
	assert_int_equal(res.teachers, 1);
	assert_int_equal(policy_net_init(&after, 0), 0);
	assert_int_equal(policy_weights_load(&after, NULL, policy_path), 0);
	g1 = toy_return(&after, 1);
	print_message("# teacher %.4f, greedy return %.4f -> %.4f\n", teacher, g0, g1);
	assert_true(g0 < 0.99 * teacher);
	assert_true(g1 >= 0.99 * teacher);
	policy_net_fini(&before);
	policy_net_fini(&after);
}

static void test_training_is_reproducible(void **state)
{
	struct policy_train_result res;
	struct policy_net a, b;
	char pa[4300], pb[4300];

	snprintf(pa, sizeof(pa), "%s/a.safetensors", dir);
	snprintf(pb, sizeof(pb), "%s/b.safetensors", dir);
	assert_int_equal(train(6, 1, 9, pa, &res), 0);
	assert_int_equal(train(6, 2, 9, pb, &res), 0);
	assert_int_equal(policy_net_init(&a, 0), 0);
	assert_int_equal(policy_net_init(&b, 0), 0);
	assert_int_equal(policy_weights_load(&a, NULL, pa), 0);
	assert_int_equal(policy_weights_load(&b, NULL, pb), 0);
	assert_memory_equal(a.params, b.params, a.num_params * sizeof(float));
	policy_net_fini(&a);
	policy_net_fini(&b);
}

static char *plan_json(const struct costmodel_cluster *cl, unsigned long seed,
		       int threads, double *thr)
{
	struct policy_request req = {
		.cm = cm, .cl = cl, .planner = "arachne", .budget_s = 60,
		.policy_path = policy_path, .threads = threads, .seed = seed,
		.quiet = true,
	};
	struct costmodel_plan *plan;
	json_t *j;
	char *s;

	assert_int_equal(policy_plan(&req, &plan), 0);
	assert_string_equal(plan->planner, "arachne");
	assert_true(plan->plans_priced > 0);
	assert_int_equal(costmodel_plan_check(cm, cl, plan), 0);
	*thr = plan->predicted.samples_per_s;
	j = costmodel_plan_to_json(cm, cl, plan);
	json_object_del(j, "planner");	/* timing differs run to run */
	s = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT);
	json_decref(j);
	costmodel_plan_free(plan);
	return s;
}

static void test_same_seed_same_plan(void **state)
{
	struct costmodel_cluster *cl = fixture_cluster(cm,
		"{\"name\":\"mix\",\"nodes\":["
		"{\"gpu\":\"big\",\"gpus_per_node\":8,\"count\":3},"
		"{\"gpu\":\"mid\",\"gpus_per_node\":4,\"count\":5},"
		"{\"gpu\":\"small\",\"gpus_per_node\":1,\"count\":12}]}");
	double t1, t2, t3;
	char *a, *b, *c;

	if (access(policy_path, R_OK) != 0) {
		struct policy_train_result res;

		assert_int_equal(train(4, 2, 3, policy_path, &res), 0);
	}
	a = plan_json(cl, 5, 2, &t1);
	b = plan_json(cl, 5, 2, &t2);
	c = plan_json(cl, 5, 1, &t3);
	assert_string_equal(a, b);
	assert_string_equal(a, c);
	assert_true(t1 > 0.0);
	free(a);
	free(b);
	free(c);
	costmodel_cluster_free(cl);
}

static void test_missing_policy(void **state)
{
	struct policy_request req = {
		.cm = cm, .cl = toy, .planner = "arachne",
		.policy_path = "/nonexistent/p.safetensors", .seed = 1,
	};
	struct costmodel_plan *plan;

	assert_int_equal(policy_plan(&req, &plan), -ENOENT);
	assert_null(plan);
	assert_non_null(strstr(ar_errmsg(), "/nonexistent/p.safetensors"));
	/* no shipped policy in the fixture's profiles either */
	req.policy_path = NULL;
	assert_int_equal(policy_plan(&req, &plan), -AR_ENOTFOUND);
	assert_non_null(strstr(ar_errmsg(), "arachne-train"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_training_raises_reward),
		cmocka_unit_test(test_training_is_reproducible),
		cmocka_unit_test(test_replay_builds_the_plan),
		cmocka_unit_test(test_temperatures_by_head),
		cmocka_unit_test(test_training_imitates_climbed_plans),
		cmocka_unit_test(test_training_imitates_the_teacher),
		cmocka_unit_test(test_same_seed_same_plan),
		cmocka_unit_test(test_missing_policy),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
