/*
 * test/improve.c - the local improvement and the planner's ablations:
 *   - a template's stages insert and remove in place, and a template
 *     survives the round trip through the cost model's shape;
 *   - a climb never ends below its start, ends on a plan the fill places
 *     and the structural check accepts, at the throughput it reports, and
 *     lifts a poor start; with the order moves (shipped profiles, a
 *     cell where the order of the climbed plan's stages matters) it ends
 *     above the best single stage moved in the plan the climb without
 *     them ends on;
 *   - the set of priced candidates tells candidates apart by every part
 *     of every template, also once it has grown; a climb that recalls
 *     numbers from it ends where one that fills every neighbour ends,
 *     with the same work, filling fewer, and a second climb from the same
 *     start fills none of its neighbours;
 *   - "random" prices as many templates as asked (within one
 *     construction), gives the same plan whatever the threads, and never
 *     uses the network;
 *   - --no-climb returns the best rollout plan as built, which the full
 *     planner never ends below; --seed-planners never ends below AMP;
 *   - the paired start: two templates of one depth, together the
 *     proportional pipeline of twice it, the first capped and filled to
 *     its cap, the second taking the GPUs it leaves; the planner never
 *     ends below it.
 */
#define AR_INTERNAL 1
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ar.h"
#include "arachne_private.h"
#include "fixture.h"

static char *dir;
static struct costmodel *cm;
static struct costmodel_cluster *mix;
static char policy_path[4200];

static const char *mix_json =
	"{\"name\":\"mix\",\"nodes\":["
	"{\"gpu\":\"big\",\"gpus_per_node\":8,\"count\":2},"
	"{\"gpu\":\"mid\",\"gpus_per_node\":4,\"count\":4},"
	"{\"gpu\":\"small\",\"gpus_per_node\":1,\"count\":10}]}";

static int setup(void **state)
{
	const struct costmodel_cluster *fixed[1];
	struct policy_train_result res;
	struct policy_train_opts o = {
		.model = "dense", .episodes = 4, .seed = 3, .threads = 2,
		.group = 8, .batch = 1, .command = "test/improve.t", .quiet = true,
		.nfixed = 1,
	};

	dir = pfix_create();
	cm = fixture_load(dir, "dense");
	mix = fixture_cluster(cm, mix_json);
	snprintf(policy_path, sizeof(policy_path), "%s/policy.safetensors", dir);
	fixed[0] = mix;
	o.fixed = fixed;
	o.out = policy_path;
	return policy_train(cm, &o, &res);
}

static int teardown(void **state)
{
	costmodel_cluster_free(mix);
	costmodel_destroy(cm);
	fixture_destroy(dir);
	return 0;
}

static void test_template_edits(void **state)
{
	struct policy_template t = { .depth = 3, .stage = { { 0, 1 }, { 1, 2 }, { 2, 4 } } };
	struct policy_template u = t;
	struct costmodel_shape sh;

	policy_template_insert(&u, 1, (struct policy_stage){ 7, 8 });
	assert_int_equal(u.depth, 4);
	assert_int_equal(u.stage[1].gpu, 7);
	assert_int_equal(u.stage[1].tp, 8);
	assert_int_equal(u.stage[2].gpu, 1);
	assert_int_equal(u.stage[3].tp, 4);
	assert_false(policy_template_equal(&t, &u));
	policy_template_remove(&u, 1);
	assert_true(policy_template_equal(&t, &u));
	policy_template_insert(&u, 3, (struct policy_stage){ 5, 1 });
	assert_int_equal(u.stage[3].gpu, 5);
	policy_template_remove(&u, 3);
	assert_true(policy_template_equal(&t, &u));

	policy_template_to_shape(&t, &sh);
	assert_int_equal(sh.depth, 3);
	assert_int_equal(sh.gpu[2], 2);
	assert_int_equal(sh.tp[1], 2);
	policy_template_from_shape(&u, &sh);
	assert_true(policy_template_equal(&t, &u));
}

static void test_climb_never_descends(void **state)
{
	struct policy_env env;
	struct planner_deadline dl = { .start = ar_now(), .end = ar_now() + 600 };
	int small = costmodel_gpu_find(cm, "small");
	struct policy_candidate x = { .n = 1 };
	struct costmodel_plan *plan;
	double start;

	assert_int_equal(policy_env_init(&env, cm, mix), 0);
	/* a poor start: the whole model on the slowest type, as deep as it must be */
	x.t[0].depth = policy_env_uniform_depth(&env, env.type_slot[small], 0);
	assert_true(x.t[0].depth > 0);
	for (int s = 0; s < x.t[0].depth; s++)
		x.t[0].stage[s] = (struct policy_stage){ small, 1 };
	assert_int_equal(policy_candidate_fill(&env, &x, NULL, NULL), 0);
	start = x.thr;
	assert_true(start > 0.0);

	for (int threads = 1; threads <= 2; threads++) {
		struct policy_candidate y = x;
		struct policy_climb c = { .env = &env, .threads = threads, .dl = &dl };

		assert_int_equal(policy_climb_run(&c, &y, 1e9), 0);
		print_message("# climb on %d threads: %.2f -> %.2f samples/s, %ld priced\n",
			      threads, start, y.thr, c.priced);
		assert_true(y.thr > 1.5 * start);	/* the big and mid GPUs join */
		assert_true(c.priced > 0);
		assert_true(c.work > 0.0);
		assert_int_equal(policy_candidate_fill(&env, &y, &plan, NULL), 0);
		assert_int_equal(costmodel_plan_check(cm, mix, plan), 0);
		assert_float_equal(plan->predicted.samples_per_s, y.thr, 1e-9 * y.thr);
		costmodel_plan_free(plan);
	}

	/* no work allowed: nothing moves */
	{
		struct policy_candidate y = x;
		struct policy_climb c = { .env = &env, .threads = 1, .dl = &dl };

		assert_int_equal(policy_climb_run(&c, &y, 0.0), 0);
		assert_float_equal(y.thr, start, 0.0);
		assert_true(policy_template_equal(&y.t[0], &x.t[0]));
	}
}

/* The best of @x with one stage moved elsewhere in its template, by hand. */
static double best_single_shift(const struct policy_env *env,
				const struct policy_candidate *x)
{
	double best = 0.0;

	for (int t = 0; t < x->n; t++)
		for (int from = 0; from < x->t[t].depth; from++)
			for (int to = 0; to < x->t[t].depth; to++) {
				struct policy_candidate y = *x;
				struct policy_stage st = y.t[t].stage[from];

				policy_template_remove(&y.t[t], from);
				policy_template_insert(&y.t[t], to, st);
				assert_int_equal(policy_candidate_fill(env, &y, NULL, NULL), 0);
				if (y.thr > best)
					best = y.thr;
			}
	return best;
}

/*
 * The order moves, on the shipped profiles: llama3-8b on ls1, where the
 * order of the climbed plan's stages matters.  A climb with them agrees
 * with one without until that one finds nothing, so it ends at or above
 * that plan and above the best single stage moved elsewhere in it.
 */
static void test_climb_reorders(void **state)
{
	const char *profiles = getenv("AR_PROFILES");
	struct costmodel_opts opts = {
		.profiles_dir = profiles && *profiles ? profiles : AR_SRC_PROFILES_DIR,
	};
	struct costmodel *llama;
	struct costmodel_cluster *ls1;
	struct costmodel_plan *plan;
	struct policy_env env;
	struct planner_deadline dl = { .start = ar_now(), .end = ar_now() + 600 };
	struct policy_candidate start, plain, ordered;
	struct policy_climb c = { .env = &env, .threads = 1, .dl = &dl,
				  .depth_moves = true };
	char path[4200];
	double shifted;
	long priced = 0;

	snprintf(path, sizeof(path), "%s/clusters/ls1.json", opts.profiles_dir);
	assert_int_equal(costmodel_load("llama3-8b", &opts, &llama), 0);
	assert_int_equal(costmodel_cluster_load(llama, path, &ls1), 0);
	assert_int_equal(policy_env_init(&env, llama, ls1), 0);
	assert_int_equal(policy_structured_start(&env, 1, &start, &priced), 1);

	plain = start;
	assert_int_equal(policy_climb_run(&c, &plain, 1e9), 0);
	shifted = best_single_shift(&env, &plain);
	c.order_moves = true;
	ordered = start;
	assert_int_equal(policy_climb_run(&c, &ordered, 1e9), 0);
	print_message("# ls1: start %.3f, climbed %.3f, a stage moved %.3f, "
		      "climbed with order moves %.3f samples/s\n",
		      start.thr, plain.thr, shifted, ordered.thr);
	assert_true(shifted > plain.thr * 1.001);	/* the case is one where order matters */
	assert_true(ordered.thr >= shifted);
	assert_int_equal(policy_candidate_fill(&env, &ordered, &plan, NULL), 0);
	assert_int_equal(costmodel_plan_check(llama, ls1, plan), 0);
	assert_float_equal(plan->predicted.samples_per_s, ordered.thr, 1e-9 * ordered.thr);
	costmodel_plan_free(plan);
	costmodel_cluster_free(ls1);
	costmodel_destroy(llama);
}

static void test_priced_set(void **state)
{
	struct policy_priced set;
	struct policy_candidate x = { .n = 1 }, y;
	bool added;
	int e;

	policy_priced_init(&set);
	x.t[0].depth = 2;
	x.t[0].stage[0] = (struct policy_stage){ 0, 1 };
	x.t[0].stage[1] = (struct policy_stage){ 1, 2 };
	e = policy_priced_find(&set, &x, &added);
	assert_int_equal(e, 0);
	assert_true(added);
	assert_false(set.entry[e].known);
	set.entry[e].thr = 12.5;
	set.entry[e].known = true;
	y = x;
	y.thr = 99.0;			/* not part of the key */
	assert_int_equal(policy_priced_find(&set, &y, &added), 0);
	assert_false(added);
	assert_float_equal(set.entry[0].thr, 12.5, 0.0);

	/* each part of a template makes another candidate */
	y = x;
	y.t[0].max_replicas = 3;
	assert_int_equal(policy_priced_find(&set, &y, &added), 1);
	assert_true(added);
	y = x;
	y.t[0].stage[1].tp = 4;
	assert_int_equal(policy_priced_find(&set, &y, &added), 2);
	y = x;
	y.t[0].stage[0].gpu = 2;
	assert_int_equal(policy_priced_find(&set, &y, &added), 3);
	y = x;
	y.t[0].depth = 1;
	assert_int_equal(policy_priced_find(&set, &y, &added), 4);
	y = x;
	y.n = 2;
	y.t[1] = x.t[0];
	assert_int_equal(policy_priced_find(&set, &y, &added), 5);
	assert_true(added);

	/* past the first index and key arena: every entry is found again */
	for (int k = 0; k < 5000; k++) {
		y = x;
		y.t[0].max_replicas = 100 + k;
		assert_int_equal(policy_priced_find(&set, &y, &added), 6 + k);
		assert_true(added);
	}
	for (int k = 0; k < 5000; k += 7) {
		y = x;
		y.t[0].max_replicas = 100 + k;
		assert_int_equal(policy_priced_find(&set, &y, &added), 6 + k);
		assert_false(added);
	}
	assert_int_equal(policy_priced_find(&set, &x, &added), 0);
	assert_false(added);
	policy_priced_fini(&set);
}

static void test_climb_recalls_priced(void **state)
{
	struct policy_env env;
	struct planner_deadline dl = { .start = ar_now(), .end = ar_now() + 600 };
	int small = costmodel_gpu_find(cm, "small");
	struct policy_candidate x = { .n = 1 }, filled, recalled, again;
	struct policy_priced set;
	struct policy_climb every = { .env = &env, .threads = 2, .dl = &dl };
	struct policy_climb first = { .env = &env, .threads = 2, .dl = &dl,
				      .priced_set = &set };
	struct policy_climb second = first;

	assert_int_equal(policy_env_init(&env, cm, mix), 0);
	x.t[0].depth = policy_env_uniform_depth(&env, env.type_slot[small], 0);
	for (int s = 0; s < x.t[0].depth; s++)
		x.t[0].stage[s] = (struct policy_stage){ small, 1 };
	assert_int_equal(policy_candidate_fill(&env, &x, NULL, NULL), 0);
	policy_priced_init(&set);
	filled = recalled = again = x;
	assert_int_equal(policy_climb_run(&every, &filled, 1e9), 0);
	assert_int_equal(policy_climb_run(&first, &recalled, 1e9), 0);
	assert_int_equal(policy_climb_run(&second, &again, 1e9), 0);
	print_message("# climb filling every neighbour: %ld templates; recalling: %ld, then %ld\n",
		      every.priced, first.priced, second.priced);
	assert_true(filled.thr > x.thr);
	for (const struct policy_candidate *y = &recalled; y; y = y == &recalled ? &again : NULL) {
		assert_int_equal(y->n, filled.n);
		for (int t = 0; t < y->n; t++)
			assert_true(policy_template_equal(&y->t[t], &filled.t[t]));
		assert_float_equal(y->thr, filled.thr, 0.0);
	}
	assert_float_equal(first.work, every.work, 0.0);
	assert_float_equal(second.work, every.work, 0.0);
	assert_true(first.priced < every.priced);
	/* the second climb fills only its current plan each round */
	assert_true(second.priced * 10 < first.priced);
	policy_priced_fini(&set);
}

static struct costmodel_plan *plan_on(const struct costmodel_cluster *cl,
				      struct policy_request req)
{
	struct costmodel_plan *plan = NULL;

	req.cm = cm;
	req.cl = cl;
	req.budget_s = 60;
	req.quiet = true;
	assert_int_equal(policy_plan(&req, &plan), 0);
	assert_int_equal(costmodel_plan_check(cm, cl, plan), 0);
	return plan;
}

static struct costmodel_plan *plan_with(struct policy_request req)
{
	return plan_on(mix, req);
}

static void test_random_planner(void **state)
{
	struct costmodel_plan *a, *b, *c;

	a = plan_with((struct policy_request){ .planner = "random", .seed = 4,
					       .threads = 1, .evaluations = 100 });
	b = plan_with((struct policy_request){ .planner = "random", .seed = 4,
					       .threads = 2, .evaluations = 100,
					       .policy_path = "/nonexistent" });
	c = plan_with((struct policy_request){ .planner = "random", .seed = 4,
					       .threads = 2 });
	assert_string_equal(a->planner, "random");
	assert_true(a->plans_priced >= 100);
	assert_true(a->plans_priced < 100 + POLICY_MAX_STEPS);
	assert_int_equal(a->plans_priced, b->plans_priced);
	assert_float_equal(a->predicted.samples_per_s, b->predicted.samples_per_s, 0.0);
	/* the default: one batch of constructions, at least a template each */
	assert_true(c->plans_priced >= POLICY_BATCH);
	costmodel_plan_free(a);
	costmodel_plan_free(b);
	costmodel_plan_free(c);
}

static void test_ablations(void **state)
{
	struct policy_request req = { .planner = "arachne", .seed = 2, .threads = 2,
				      .policy_path = policy_path };
	struct costmodel_plan *full, *policy, *seeded, *amp;
	struct policy_env env;
	struct policy_net net;
	struct policy_batch *batch = calloc(1, sizeof(*batch));
	int best;

	full = plan_with(req);
	req.no_climb = true;
	policy = plan_with(req);
	req.no_climb = false;
	req.seed_planners = true;
	seeded = plan_with(req);
	amp = plan_with((struct policy_request){ .planner = "amp", .threads = 2 });
	print_message("# policy %.2f, full %.2f, seeded %.2f, amp %.2f samples/s\n",
		      policy->predicted.samples_per_s, full->predicted.samples_per_s,
		      seeded->predicted.samples_per_s, amp->predicted.samples_per_s);

	/* --no-climb: the best of the same rollouts, as built */
	assert_non_null(batch);
	assert_int_equal(policy_env_init(&env, cm, mix), 0);
	assert_int_equal(policy_net_load_for(&net, cm, policy_path), 0);
	*batch = (struct policy_batch){ .env = &env, .net = &net, .seed = 2,
					.n = POLICY_BATCH };
	policy_batch_run(batch, 1);
	best = policy_batch_best(batch);
	assert_true(best >= 0);
	assert_float_equal(policy->predicted.samples_per_s,
			   batch->plan[best]->predicted.samples_per_s, 0.0);
	policy_batch_clear(batch);
	free(batch);
	policy_net_fini(&net);

	assert_true(full->predicted.samples_per_s >= policy->predicted.samples_per_s);
	assert_true(full->plans_priced > policy->plans_priced);
	assert_true(seeded->predicted.samples_per_s >= amp->predicted.samples_per_s);
	costmodel_plan_free(full);
	costmodel_plan_free(policy);
	costmodel_plan_free(seeded);
	costmodel_plan_free(amp);
}

/* Stages of GPU type @gpu in @t. */
static int stages_of(const struct policy_template *t, int gpu)
{
	int n = 0;

	for (int s = 0; s < t->depth; s++)
		n += t->stage[s].gpu == gpu;
	return n;
}

static void test_paired_start(void **state)
{
	/* 12 big and 12 mid GPUs: an odd depth splits them unevenly */
	struct costmodel_cluster *even = fixture_cluster(cm,
		"{\"name\":\"even\",\"nodes\":["
		"{\"gpu\":\"big\",\"gpus_per_node\":8,\"count\":1},"
		"{\"gpu\":\"big\",\"gpus_per_node\":4,\"count\":1},"
		"{\"gpu\":\"mid\",\"gpus_per_node\":4,\"count\":3}]}");
	int big = costmodel_gpu_find(cm, "big"), mid = costmodel_gpu_find(cm, "mid");
	struct policy_candidate x = { 0 };
	struct costmodel_plan *plan, *full;
	struct policy_env env;
	long priced = 0;
	int d, cap;

	assert_int_equal(policy_env_init(&env, cm, even), 0);
	assert_int_equal(policy_paired_start(&env, 2, &x, &priced), 1);
	assert_true(priced > 0);
	assert_int_equal(x.n, 2);
	d = x.t[0].depth;
	cap = x.t[0].max_replicas;
	print_message("# paired start: 2 x %d stages, the first capped at %d: %.2f samples/s\n",
		      d, cap, x.thr);
	assert_int_equal(x.t[1].depth, d);
	assert_true(cap >= 1);
	assert_int_equal(x.t[1].max_replicas, 0);
	/* equal GPUs: each type holds d of the pair's 2d stages, split unevenly */
	assert_int_equal(stages_of(&x.t[0], big) + stages_of(&x.t[1], big), d);
	assert_int_equal(stages_of(&x.t[0], mid) + stages_of(&x.t[1], mid), d);
	assert_int_not_equal(stages_of(&x.t[0], big), stages_of(&x.t[1], big));

	assert_int_equal(policy_candidate_fill(&env, &x, &plan, NULL), 0);
	assert_int_equal(costmodel_plan_check(cm, even, plan), 0);
	assert_int_equal(plan->ntemplates, 2);
	assert_true(plan->templates[0].replicas <= cap);
	assert_true(plan->templates[1].replicas >= 1);
	assert_float_equal(plan->predicted.samples_per_s, x.thr, 1e-9 * x.thr);
	costmodel_plan_free(plan);

	/* the fill holds a template to its cap: one mid GPU a replica, 12 or 5 */
	for (int limit = 0; limit <= 5; limit += 5) {
		struct policy_candidate y = { .n = 1 };

		y.t[0] = (struct policy_template){ .depth = 1, .max_replicas = limit,
						   .stage = { { mid, 1 } } };
		assert_int_equal(policy_candidate_fill(&env, &y, &plan, NULL), 0);
		assert_int_equal(plan->templates[0].replicas, limit ? limit : 12);
		costmodel_plan_free(plan);
	}

	full = plan_on(even, (struct policy_request){ .planner = "arachne", .seed = 2,
						      .threads = 2,
						      .policy_path = policy_path });
	assert_true(full->predicted.samples_per_s >= x.thr * (1 - 1e-9));
	costmodel_plan_free(full);
	costmodel_cluster_free(even);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_template_edits),
		cmocka_unit_test(test_climb_never_descends),
		cmocka_unit_test(test_climb_reorders),
		cmocka_unit_test(test_priced_set),
		cmocka_unit_test(test_climb_recalls_priced),
		cmocka_unit_test(test_random_planner),
		cmocka_unit_test(test_ablations),
		cmocka_unit_test(test_paired_start),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
