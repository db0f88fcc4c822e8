/*
 * test/masks.c - the feasibility masks, as a property over random
 * clusters: walking a construction by uniformly random allowed actions,
 *   - STOP is refused until a template stands; an allowed depth leaves a
 *     GPU for every stage; an allowed GPU type has free GPUs; an allowed TP
 *     degree fits a free node of its type after the stages before it;
 *   - no allowed action leads to a stage where nothing is allowed, except
 *     an MoE template's last stage, where the fill itself is asked (its
 *     experts tile over replicas only the fill knows) and may refuse all;
 *   - every template so built packs (costmodel_fill_replicas() >= 1) and
 *     the fill places it.
 * Also: a rollout that steps back from an MoE last stage keeps a record
 * of exactly its kept decisions, and a model that fits nowhere makes the
 * planner say so, and the replica features of the state read the
 * template's scarcest type.
 */
#define AR_INTERNAL 1
#include "config.h"

#include <math.h>
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

#define CLUSTERS 120
#define WALKS 4

static char *dir;

static int setup(void **state)
{
	dir = pfix_create();
	return 0;
}

static int teardown(void **state)
{
	fixture_destroy(dir);
	return 0;
}

static int largest_free(const int *hist)
{
	for (int c = COSTMODEL_MAX_NODE_GPUS; c > 0; c--)
		if (hist[c] > 0)
			return c;
	return 0;
}

static int pick(struct policy_rng *rng, uint32_t mask)
{
	int n = __builtin_popcount(mask), i = policy_rng_below(rng, n);

	for (int c = 0; c < 32; c++)
		if ((mask & (1u << c)) && i-- == 0)
			return c;
	return -1;
}

struct tally {
	long templates;
	long placed;
	long decisions;
	long dead_ends;
};

/* One random walk of masked-in actions over @ep; checks every invariant. */
static void walk(struct policy_episode *ep, struct policy_rng *rng,
		 struct tally *t)
{
	const struct policy_env *env = ep->env;

	assert_int_equal(policy_episode_reset(ep), 0);
	while (ep->step < POLICY_MAX_STEPS) {
		uint32_t dmask = policy_mask_depth(ep);
		int free_total = 0, depth, rc, reps;

		for (int s = 0; s < env->nslots; s++)
			free_total += ep->pool.free_by_type[env->slot_type[s]];
		if (ep->step == 0)
			assert_false(dmask & 1u);	/* no STOP before a template */
		for (int d = 1; d <= POLICY_DMAX; d++)
			if (dmask & (1u << d))
				assert_true(d <= free_total);
		if ((dmask & ~1u) == 0)
			return;
		depth = pick(rng, dmask & ~1u);
		policy_partial_begin(ep, depth);
		for (int j = 0; j < depth; j++) {
			uint32_t gmask = policy_mask_device(ep), tmask;
			int slot, k;

			t->decisions++;
			if (!gmask) {
				/* only where the exact MoE check refused every last stage */
				assert_true(costmodel_model(env->cm)->experts > 0);
				assert_int_equal(j, depth - 1);
				t->dead_ends++;
				return;
			}
			for (int s = 0; s < POLICY_SLOTS; s++)
				if (gmask & (1u << s)) {
					assert_true(s < env->nslots);
					assert_true(ep->part.free[s] > 0);
				}
			slot = pick(rng, gmask);
			tmask = policy_mask_tp(ep, slot);
			assert_int_not_equal(tmask, 0);
			for (int k2 = 0; k2 < POLICY_NUM_TP; k2++)
				if (tmask & (1u << k2))
					assert_true(policy_tp_of(k2) <=
						    largest_free(ep->part.hist[slot]));
			k = pick(rng, tmask);
			policy_partial_push(ep, slot, k);
		}
		reps = costmodel_fill_replicas(env->cm, &ep->pool, &ep->part.shape);
		assert_true(reps >= 1);
		t->templates++;
		rc = costmodel_fill_add(env->cm, env->cl, &ep->pool, ep->plan,
					&ep->part.shape, NULL);
		if (rc < 0)
			print_message("# the fill refused a masked-in template: %s\n",
				      ar_errmsg());
		assert_int_equal(rc, 0);
		t->placed++;
		ep->step++;
	}
}

typedef void visit_f(struct policy_episode *ep, struct policy_rng *rng,
		     void *arg);

/*
 * @visit an episode on each of CLUSTERS random clusters of @cm's types;
 * one generator draws the clusters and what @visit draws.
 */
static void each_cluster(struct costmodel *cm, visit_f *visit, void *arg)
{
	struct policy_compose_opts co = { .min_types = 1, .max_types = 3,
					  .min_gpus = 4, .max_gpus = 256 };
	struct policy_rng rng;

	policy_rng_seed(&rng, 2024, 1);
	for (int i = 0; i < CLUSTERS; i++) {
		struct costmodel_cluster *cl = policy_compose_random(cm, &rng, &co);
		struct policy_episode ep;
		struct policy_env env;

		assert_non_null(cl);
		assert_int_equal(policy_env_init(&env, cm, cl), 0);
		assert_int_equal(policy_episode_init(&ep, &env), 0);
		visit(&ep, &rng, arg);
		policy_episode_fini(&ep);
		policy_compose_free(cl);
	}
}

struct walks {
	struct tally t;
	int usable;
};

static void walk_cluster(struct policy_episode *ep, struct policy_rng *rng,
			 void *arg)
{
	struct walks *wk = arg;

	if (policy_mask_depth(ep))
		wk->usable++;
	for (int w = 0; w < WALKS; w++)
		walk(ep, rng, &wk->t);
}

static void property(const char *model)
{
	struct costmodel *cm = fixture_load(dir, model);
	struct walks wk = { 0 };

	each_cluster(cm, walk_cluster, &wk);
	print_message("# %s: %d of %d clusters hold the model; %ld templates, %ld decisions, %ld dead ends\n",
		      model, wk.usable, CLUSTERS, wk.t.templates, wk.t.decisions,
		      wk.t.dead_ends);
	assert_true(wk.t.dead_ends <= wk.t.templates / 3);
	/* the property must have been exercised, not vacuously true */
	assert_true(wk.usable > CLUSTERS / 2);
	assert_true(wk.t.templates > CLUSTERS);
	costmodel_destroy(cm);
}

/*
 * Rollouts of uniformly random masked-in actions through policy_rollout():
 * a construction that meets an MoE last stage that fits nowhere steps
 * back once and chooses the stage before it again among the choices that
 * leave a last stage that fits.  Its record must then hold exactly the
 * decisions it kept, each inside its mask, and some step back must end
 * in a placed template.
 */
struct rollouts {
	struct policy_trace tr;
	long count, stepped_back, placed_after;
};

static void roll_cluster(struct policy_episode *ep, struct policy_rng *rng,
			 void *arg)
{
	static const struct policy_rollout_opts opts = {
		.draw = POLICY_DRAW_UNIFORM, .record = true
	};
	struct rollouts *ro = arg;
	const struct policy_trace *tr = &ro->tr;

	for (int w = 0; w < WALKS; w++) {
		int rc = policy_rollout(ep, NULL, NULL, rng, &opts, &ro->tr);
		int in_step[POLICY_MAX_STEPS + 1] = { 0 };

		if (rc == -AR_EINFEASIBLE)
			continue;	/* no depth fits this cluster */
		assert_int_equal(rc, 0);
		for (int d = 0; d < tr->ndec; d++) {
			const struct policy_decision *dec = &tr->dec[d];

			in_step[tr->dec_step[d]]++;
			assert_true(dec->mask & (1u << dec->action));
			if (dec->head == POLICY_HEAD_TP) {
				assert_true(d > 0);
				assert_int_equal(tr->dec[d - 1].head, POLICY_HEAD_DEVICE);
				assert_int_equal(tr->dec[d - 1].action, dec->slot);
			}
		}
		/* a STOP after the last template is its step's only decision */
		for (int s = 0; s < tr->nsteps; s++)
			assert_int_equal(in_step[s], tr->decisions_in_step[s]);
		assert_true(in_step[tr->nsteps] <= 1);
		ro->count++;
		if (tr->steps_back > 0)
			ro->stepped_back++;
		/* every template placed: each step back found a last stage */
		if (tr->steps_back > 0 && tr->nshapes == tr->nsteps)
			ro->placed_after++;
	}
}

static void test_rollout_steps_back(void **state)
{
	struct costmodel *cm = fixture_load(dir, "moe");
	struct rollouts ro = { 0 };

	each_cluster(cm, roll_cluster, &ro);
	print_message("# %ld rollouts, %ld stepped back, %ld of those placed every template\n",
		      ro.count, ro.stepped_back, ro.placed_after);
	assert_true(ro.count > CLUSTERS);
	assert_true(ro.placed_after > 0);
	policy_trace_fini(&ro.tr);
	costmodel_destroy(cm);
}

static void test_masks_dense(void **state)
{
	property("dense");
}

static void test_masks_moe(void **state)
{
	property("moe");
}

/*
 * Small GPUs only: TP 1 stages of a replica alone hold 2 blocks, but the
 * distributed optimizer shards the optimizer state over the replicas.
 */
static void test_masks_memory_bound(void **state)
{
	struct costmodel *cm = fixture_load(dir, "dense");
	struct costmodel_cluster *cl = fixture_cluster(cm,
		"{\"name\":\"s\",\"nodes\":[{\"gpu\":\"small\",\"gpus_per_node\":1,\"count\":64}]}");
	struct policy_episode ep;
	struct policy_env env;
	uint32_t mask;

	assert_int_equal(policy_env_init(&env, cm, cl), 0);
	assert_int_equal(policy_episode_init(&ep, &env), 0);
	/* 8 GiB of state a block on 24 GiB GPUs: 2 blocks on a stage alone */
	assert_int_equal(floor(policy_env_stage_capacity(&env, 0, 0, 0, 1, 64, 1)), 2);
	/*
	 * A block: 1 GiB of BF16 weights, so 2 GiB of weights and gradients
	 * and 6 GiB of optimizer state, of which each GPU of 32 replicas
	 * keeps 6/32, and 0.25 GiB of activations a micro-batch in flight:
	 * the first of 2 stages (2 in flight) holds 22.5 / 2.6875 = 8.4.
	 */
	assert_float_equal(policy_env_stage_capacity(&env, 0, 0, 0, 2, 64, 32),
			   22.5 / 2.6875, 1e-9);
	/* the depth features' mean: one micro-batch in flight, every GPU small */
	assert_float_equal(policy_env_mean_capacity(&env, 1), 22.5 / 8.25, 1e-9);
	assert_float_equal(policy_env_mean_capacity(&env, 32), 22.5 / 2.4375, 1e-9);
	mask = policy_mask_depth(&ep);
	assert_false(mask & (1u << 1));	/* 64 replicas: 9 blocks, not 12 and embeddings */
	assert_true(mask & (1u << 2));
	assert_true(mask & (1u << 12));
	/* a stage holds one block at least: no deeper than the 12 blocks */
	for (int d = 13; d <= POLICY_DMAX; d++)
		assert_false(mask & (1u << d));
	/* every node has one GPU: only TP 1 */
	policy_partial_begin(&ep, 12);
	assert_int_equal(policy_mask_tp(&ep, 0), 1u);
	policy_episode_fini(&ep);
	costmodel_cluster_free(cl);
	costmodel_destroy(cm);
}

static void test_infeasible_model(void **state)
{
	struct costmodel *cm = fixture_load(dir, "huge");
	struct costmodel_cluster *cl = fixture_cluster(cm,
		"{\"name\":\"h\",\"nodes\":[{\"gpu\":\"big\",\"gpus_per_node\":8,\"count\":2}]}");
	struct policy_episode ep;
	struct policy_env env;
	struct policy_net net;
	struct policy_work w;
	struct policy_rng rng;
	struct policy_trace tr = { 0 };
	struct policy_rollout_opts opts = { .draw = POLICY_DRAW_GREEDY };
	int rc;

	assert_int_equal(policy_env_init(&env, cm, cl), 0);
	assert_int_equal(policy_episode_init(&ep, &env), 0);
	assert_int_equal(policy_mask_depth(&ep), 0);
	assert_int_equal(policy_net_init(&net, 1), 0);
	assert_int_equal(policy_work_init(&w, 1), 0);
	policy_rng_seed(&rng, 1, 1);
	rc = policy_rollout(&ep, &net, &w, &rng, &opts, &tr);
	/* the fill has the last word: the first template is refused, -delta */
	assert_true(rc == 0 || rc == -AR_EINFEASIBLE);
	assert_true(tr.throughput == 0.0);
	if (rc == 0)
		assert_float_equal(tr.rewards[0], -POLICY_INFEASIBLE_PENALTY, 1e-6);
	policy_trace_fini(&tr);
	policy_work_fini(&w);
	policy_net_fini(&net);
	policy_episode_fini(&ep);
	costmodel_cluster_free(cl);
	costmodel_destroy(cm);
}

/* The replicas a next stage would leave the template, from its scarcest type. */
static void test_replica_features(void **state)
{
	struct costmodel *cm = fixture_load(dir, "dense");
	struct costmodel_cluster *cl = fixture_cluster(cm,
		"{\"name\":\"r\",\"nodes\":[{\"gpu\":\"big\",\"gpus_per_node\":8,\"count\":2},"
		"{\"gpu\":\"mid\",\"gpus_per_node\":4,\"count\":1}]}");
	struct policy_episode ep;
	struct policy_env env;
	float x[POLICY_STATE_DIM];
	const float *big, *mid;

	assert_int_equal(policy_env_init(&env, cm, cl), 0);
	assert_int_equal(policy_episode_init(&ep, &env), 0);
	big = x + env.type_slot[costmodel_gpu_find(cm, "big")] * POLICY_TYPE_FEATURES;
	mid = x + env.type_slot[costmodel_gpu_find(cm, "mid")] * POLICY_TYPE_FEATURES;

	/* the depth decision: no template, no replica features */
	policy_state_build(&ep, POLICY_HEAD_DEPTH, 0, x);
	assert_float_equal(big[PT_REPLICAS], 0.0, 1e-6);
	assert_float_equal(mid[PT_SHRINK], 0.0, 1e-6);

	/* 4 stages on 20 free GPUs: 5 replicas were every GPU used */
	policy_partial_begin(&ep, 4);
	policy_state_build(&ep, POLICY_HEAD_DEVICE, 0, x);
	assert_float_equal(big[PT_REPLICAS + 0], 1.0, 1e-6);	/* 16 replicas, capped */
	assert_float_equal(mid[PT_REPLICAS + 0], 4.0 / 5.0, 1e-6);
	assert_float_equal(mid[PT_REPLICAS + 1], 2.0 / 5.0, 1e-6);
	assert_float_equal(mid[PT_SHRINK + 2], 1.0, 1e-6);	/* nothing before */

	/* a big stage at TP 1 stands: 16 replicas so far */
	policy_partial_push(&ep, env.type_slot[costmodel_gpu_find(cm, "big")], 0);
	policy_state_build(&ep, POLICY_HEAD_DEVICE, 0, x);
	assert_float_equal(big[PT_REPLICAS + 1], 1.0, 1e-6);	/* 16 / 3 */
	assert_float_equal(big[PT_SHRINK + 1], 1.0 / 3.0, 1e-6);
	assert_float_equal(mid[PT_REPLICAS + 0], 4.0 / 5.0, 1e-6);
	assert_float_equal(mid[PT_SHRINK + 0], 4.0 / 16.0, 1e-6);
	assert_float_equal(mid[PT_SHRINK + 2], 1.0 / 16.0, 1e-6);

	policy_episode_fini(&ep);
	costmodel_cluster_free(cl);
	costmodel_destroy(cm);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_masks_dense),
		cmocka_unit_test(test_masks_moe),
		cmocka_unit_test(test_rollout_steps_back),
		cmocka_unit_test(test_masks_memory_bound),
		cmocka_unit_test(test_infeasible_model),
		cmocka_unit_test(test_replica_features),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
