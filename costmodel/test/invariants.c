/*
 * Invariants of the fill and the pricing on randomly generated clusters
 * and templates: every GPU used at most once, TP groups inside one node,
 * every stage within memory, layers covering the model exactly once, a
 * plan priced twice gives the same number, and a plan written to JSON and
 * read back prices the same.
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
#include "fixture.h"

#define CLUSTERS 60

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

/* A small deterministic generator, so failures reproduce. */
static unsigned rnd(unsigned long *s)
{
	*s = *s * 6364136223846793005UL + 1442695040888963407UL;
	return (unsigned)(*s >> 33);
}

static struct costmodel_cluster *random_cluster(const struct costmodel *cm,
						unsigned long *seed)
{
	static const int sizes[] = { 1, 2, 3, 4 };
	char json[2048], *p = json;
	int entries = 1 + rnd(seed) % 4;

	p += sprintf(p, "{\"nodes\":[");
	for (int e = 0; e < entries; e++)
		p += sprintf(p, "%s{\"gpu\":\"%s\",\"gpus_per_node\":%d,\"count\":%u}",
			     e ? "," : "", rnd(seed) % 2 ? "fast" : "slow",
			     sizes[rnd(seed) % 4], 1 + rnd(seed) % 6);
	sprintf(p, "]}");
	return fixture_cluster(cm, json);
}

static void random_shape(unsigned long *seed, struct costmodel_shape *shape)
{
	shape->depth = 1 + rnd(seed) % 4;
	for (int s = 0; s < shape->depth; s++) {
		shape->gpu[s] = rnd(seed) % 2;
		shape->tp[s] = 1 << (rnd(seed) % 3);
	}
}

static void check_plan(struct costmodel *cm, struct costmodel_cluster *cl,
		       struct costmodel_plan *plan,
		       const struct costmodel_pool *pool)
{
	struct costmodel_plan *again, *back;
	json_t *js;
	int free_gpus = 0;

	/* GPUs at most once, groups in one node, layers once, layouts. */
	if (costmodel_plan_check(cm, cl, plan) < 0)
		fail_msg("plan_check: %s", ar_errmsg());
	for (int j = 0; j < plan->ntemplates; j++)
		for (int s = 0; s < plan->templates[j].nstages; s++) {
			const struct costmodel_stage *st = &plan->templates[j].stages[s];

			assert_true(st->peak_mem_gib <=
				    costmodel_gpu(cm, st->gpu)->memory_gib + 1e-9);
		}
	for (int g = 0; g < costmodel_num_gpus(cm); g++)
		free_gpus += pool->free_by_type[g];
	assert_int_equal(free_gpus + costmodel_plan_total_gpus(plan),
			 costmodel_cluster_total_gpus(cl));

	/* Priced twice: the same number. */
	again = costmodel_plan_clone(plan);
	assert_int_equal(costmodel_plan_price(cm, cl, again), 0);
	assert_true(again->predicted.iter_s == plan->predicted.iter_s);

	/* Written and read back: the same number. */
	js = costmodel_plan_to_json(cm, cl, plan);
	assert_non_null(js);
	if (costmodel_plan_from_json(cm, cl, js, &back) < 0)
		fail_msg("round trip: %s", ar_errmsg());
	assert_int_equal(costmodel_plan_price(cm, cl, back), 0);
	assert_true(fabs(back->predicted.iter_s - plan->predicted.iter_s) <=
		    1e-12 * plan->predicted.iter_s);
	json_decref(js);
	costmodel_plan_free(back);
	costmodel_plan_free(again);
}

static void random_fills(const char *model, unsigned long seed)
{
	struct costmodel *cm = fixture_load(dir, model);
	int plans = 0, checked = 0;

	for (int c = 0; c < CLUSTERS; c++) {
		struct costmodel_cluster *cl = random_cluster(cm, &seed);
		struct costmodel_plan *plan = costmodel_plan_create(cm);
		struct costmodel_pool pool;

		assert_int_equal(costmodel_pool_init(&pool, cl), 0);
		for (int k = 0; k < 12; k++) {
			struct costmodel_shape shape;
			struct costmodel_pool before;
			int rc;

			random_shape(&seed, &shape);
			memset(&before, 0, sizeof(before));
			assert_int_equal(costmodel_pool_copy(&before, &pool), 0);
			rc = costmodel_fill_add(cm, cl, &pool, plan, &shape, NULL);
			if (rc < 0) {
				/* A failed fill changes nothing. */
				assert_int_equal(rc, -AR_EINFEASIBLE);
				assert_memory_equal(before.free_mask, pool.free_mask,
						    (size_t)pool.nnodes * sizeof(uint16_t));
			} else {
				plans++;
				check_plan(cm, cl, plan, &pool);
				checked++;
			}
			costmodel_pool_fini(&before);
		}
		costmodel_pool_fini(&pool);
		costmodel_plan_free(plan);
		costmodel_cluster_free(cl);
	}
	/* The generator must actually exercise the checks. */
	assert_true(plans > CLUSTERS);
	assert_int_equal(plans, checked);
	costmodel_destroy(cm);
}

/* The take of the old linear scan: fewest free GPUs >= t, lowest index. */
static int reference_take(const struct costmodel_cluster *cl, uint16_t *mask,
			  int gpu, int t)
{
	int best = -1, best_free = 99;

	for (size_t i = 0; i < cl->nnodes; i++) {
		int f = __builtin_popcount(mask[i]);

		if (cl->nodes[i].gpu == gpu && f >= t && f < best_free) {
			best = (int)i;
			best_free = f;
		}
	}
	for (int k = 0, taken = 0; best >= 0 && taken < t; k++)
		if (mask[best] & (1u << k)) {
			mask[best] &= (uint16_t)~(1u << k);
			taken++;
		}
	return best;
}

/*
 * The pool's best-fit take (bitsets over the nodes by type) chooses the
 * node a scan of every node would, on clusters of interleaved types large
 * enough to need several summary words, through copies and a reindex.
 */
static void pool_best_fit(void **state)
{
	struct costmodel *cm = fixture_load(dir, "toy");
	unsigned long seed = 11;

	for (int round = 0; round < 4; round++) {
		size_t cap = 64 * 1024, len = 0;
		char *json = malloc(cap);
		struct costmodel_cluster *cl;
		struct costmodel_pool pool, copy = { 0 };
		uint16_t *mask;
		int takes = 0;

		assert_non_null(json);
		len += (size_t)sprintf(json, "{\"nodes\":[");
		for (int e = 0; e < 600; e++)
			len += (size_t)snprintf(json + len, cap - len,
				"%s{\"gpu\":\"%s\",\"gpus_per_node\":%u,\"count\":%u}",
				e ? "," : "", rnd(&seed) % 2 ? "fast" : "slow",
				1 + rnd(&seed) % 8, 1 + rnd(&seed) % 30);
		snprintf(json + len, cap - len, "]}");
		cl = fixture_cluster(cm, json);
		free(json);
		assert_true(cl->nnodes > 4096);
		assert_int_equal(costmodel_pool_init(&pool, cl), 0);
		mask = malloc(cl->nnodes * sizeof(*mask));
		assert_non_null(mask);
		memcpy(mask, pool.free_mask, cl->nnodes * sizeof(*mask));
		for (;;) {
			int gpu = (int)(rnd(&seed) % 2), t = 1 + (int)(rnd(&seed) % 8);
			struct costmodel_group g;
			int want = reference_take(cl, mask, gpu, t);
			int rc = costmodel_pool_take(cl, &pool, gpu, t, &g);

			if (want < 0) {
				assert_int_equal(rc, -AR_EINFEASIBLE);
				if (t == 1 && !pool.free_by_type[gpu])
					break;
				continue;
			}
			assert_int_equal(rc, 0);
			assert_int_equal(g.node, want);
			if (++takes % 997 == 0) {
				/* A copy and a recount carry on where the pool was. */
				assert_int_equal(costmodel_pool_copy(&copy, &pool), 0);
				costmodel_pool_fini(&pool);
				pool = copy;
				memset(&copy, 0, sizeof(copy));
				costmodel_pool_reindex(&pool, cl);
			}
		}
		assert_true(takes > 1000);
		assert_memory_equal(mask, pool.free_mask, cl->nnodes * sizeof(*mask));
		free(mask);
		costmodel_pool_fini(&pool);
		costmodel_cluster_free(cl);
	}
	costmodel_destroy(cm);
}

static void dense_random(void **state)
{
	random_fills("toy", 42);
}

static void moe_random(void **state)
{
	random_fills("toymoe", 7);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(dense_random),
		cmocka_unit_test(moe_random),
		cmocka_unit_test(pool_best_fit),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
