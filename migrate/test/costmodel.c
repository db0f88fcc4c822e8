/*
 * costmodel.c - the layout and topology derived from the cost model, and a
 * diff of two plans parsed by costmodel_plan_from_json(), on the cost
 * model's synthetic profiles (costmodel/test/fixture.h).
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ar.h"
#include "fixture.h"
#include "migrate.h"

#define MiB (1024ull * 1024ull)

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

/* toy: 16 B/param = 2 weights + 2 gradients + 12 optimizer. */
static void check_kinds(const struct migrate_layer *ly, int part,
			uint64_t weight)
{
	const uint64_t *b = &ly->bytes[part * MIGRATE_NUM_KINDS];

	assert_int_equal(b[MIGRATE_KIND_WEIGHT], weight);
	assert_int_equal(b[MIGRATE_KIND_GRAD], weight);
	assert_int_equal(b[MIGRATE_KIND_OPTIM], 6 * weight);
}

static void layout_dense(void **state)
{
	struct costmodel *cm = fixture_load(dir, "toy");
	struct migrate_layout *l = NULL;

	assert_int_equal(migrate_layout_from_costmodel(cm, &l), 0);
	assert_int_equal(l->nlayers, 10);
	check_kinds(&l->layers[0], MIGRATE_PART_DENSE, 64 * MiB);
	for (int i = 1; i <= 8; i++) {
		check_kinds(&l->layers[i], MIGRATE_PART_DENSE, 256 * MiB);
		check_kinds(&l->layers[i], MIGRATE_PART_EXPERT, 0);
		assert_int_equal(l->layers[i].experts, 0);
	}
	check_kinds(&l->layers[9], MIGRATE_PART_DENSE, 64 * MiB);
	assert_int_equal(migrate_layout_total_bytes(l),
			 (2 * 64 + 8 * 256) * MiB * 8);
	migrate_layout_free(l);
	costmodel_destroy(cm);
}

static void layout_moe(void **state)
{
	struct costmodel *cm = fixture_load(dir, "toymoe");
	struct migrate_layout *l = NULL;

	assert_int_equal(migrate_layout_from_costmodel(cm, &l), 0);
	for (int i = 1; i <= 8; i++) {
		/* Attention: half a block; the 8 experts: 1024 MiB at ETP 1 */
		check_kinds(&l->layers[i], MIGRATE_PART_DENSE, 128 * MiB);
		check_kinds(&l->layers[i], MIGRATE_PART_EXPERT, 1024 * MiB);
		assert_int_equal(l->layers[i].experts, 8);
	}
	assert_int_equal(l->layers[0].experts, 0);
	migrate_layout_free(l);
	costmodel_destroy(cm);
}

static void topo_bandwidths(void **state)
{
	struct costmodel *cm = fixture_load(dir, "toy");
	struct costmodel_cluster *cl = fixture_cluster(cm,
		"{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":4,\"hosts\":\"f[1-2]\"},"
		"{\"gpu\":\"slow\",\"gpus_per_node\":2,\"hosts\":\"s1\"}]}");
	struct migrate_topo *t = NULL;

	assert_int_equal(migrate_topo_from_cluster(cm, cl, &t), 0);
	assert_int_equal(t->nnodes, 3);
	assert_string_equal(t->nodes[1].name, "f2");
	assert_int_equal(t->nodes[2].gpus, 2);
	/* Nominal times the cost model's link efficiency of 0.8. */
	assert_true(t->nodes[0].intra_GBps > 319.999 &&
		    t->nodes[0].intra_GBps < 320.001);
	assert_true(t->nodes[2].intra_GBps > 159.999 &&
		    t->nodes[2].intra_GBps < 160.001);
	assert_true(t->nodes[0].nic_GBps > 9.999 &&
		    t->nodes[0].nic_GBps < 10.001);
	migrate_topo_free(t);
	costmodel_cluster_free(cl);
	costmodel_destroy(cm);
}

/*
 * Two replicas of two TP-1 stages become one replica of two TP-2 stages
 * with the split moved from 4|5 to 5|6.  GPU 0 (old stage 0 of replica 0)
 * becomes TP rank 0 of layers 0-5: it keeps the first half of layers 0-4
 * and fetches the first half of layer 5 from a GPU of its own node.
 */
static void diff_of_parsed_plans(void **state)
{
	struct costmodel *cm = fixture_load(dir, "toy");
	struct costmodel_cluster *cl = fixture_cluster(cm,
		"{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":4,\"hosts\":\"n1\"}]}");
	struct costmodel_plan *old_plan = fixture_plan(cm, cl,
		"{\"arachne_plan\":1,\"model\":\"toy\",\"micro_batch\":1,"
		"\"templates\":[{\"replicas\":2,\"stages\":["
		"{\"gpu\":\"fast\",\"tp\":1,\"layers\":[0,4]},"
		"{\"gpu\":\"fast\",\"tp\":1,\"layers\":[5,9]}],"
		"\"placement\":[[{\"node\":\"n1\",\"gpus\":[0]},{\"node\":\"n1\",\"gpus\":[1]}],"
		"[{\"node\":\"n1\",\"gpus\":[2]},{\"node\":\"n1\",\"gpus\":[3]}]]}]}");
	struct costmodel_plan *new_plan = fixture_plan(cm, cl,
		"{\"arachne_plan\":1,\"model\":\"toy\",\"micro_batch\":1,"
		"\"templates\":[{\"replicas\":1,\"stages\":["
		"{\"gpu\":\"fast\",\"tp\":2,\"layers\":[0,5]},"
		"{\"gpu\":\"fast\",\"tp\":2,\"layers\":[6,9]}],"
		"\"placement\":[[{\"node\":\"n1\",\"gpus\":[0,1]},{\"node\":\"n1\",\"gpus\":[2,3]}]]}]}");
	struct migrate_layout *l = NULL;
	struct migrate_topo *t = NULL;
	struct migrate *m = NULL;
	uint64_t kept0 = 0, total;

	assert_int_equal(migrate_layout_from_costmodel(cm, &l), 0);
	assert_int_equal(migrate_topo_from_cluster(cm, cl, &t), 0);
	if (migrate_diff(l, t, old_plan, new_plan, NULL, &m) < 0)
		fail_msg("diff: %s", ar_errmsg());
	if (migrate_check(m) < 0)
		fail_msg("check: %s", ar_errmsg());
	total = migrate_layout_total_bytes(l);
	assert_int_equal(m->nranks, 4);
	/* One replica: the new state is one copy of the model. */
	assert_int_equal(m->stats.bytes_local + m->stats.bytes_moved, total);
	for (long i = 0; i < m->ntuples; i++)
		if (m->tuples[i].from == 0 && m->tuples[i].to == 0)
			kept0 += migrate_tuple_bytes(&m->tuples[i]);
	assert_int_equal(kept0, (64 + 4 * 256) * MiB * 8 / 2);
	/* Every transfer stays inside the node, and stage 1 carries it. */
	assert_int_equal(m->stats.nrounds, 0);
	assert_true(m->stats.lower_bound_s > 0.0);
	/* The one-call form plannerd uses gives the same migration. */
	{
		struct migrate *m2 = NULL;

		int rc = migrate_diff_costmodel(cm, cl, old_plan, new_plan,
						NULL, &m2);

		assert_int_equal(rc, 0);
		assert_int_equal(m2->ntuples, m->ntuples);
		assert_int_equal(m2->stats.bytes_moved, m->stats.bytes_moved);
		assert_memory_equal(&m2->tuples[m->ntuples - 1],
				    &m->tuples[m->ntuples - 1],
				    offsetof(struct migrate_tuple, round));
		migrate_free(m2);
	}
	migrate_free(m);
	migrate_layout_free(l);
	migrate_topo_free(t);
	costmodel_plan_free(old_plan);
	costmodel_plan_free(new_plan);
	costmodel_cluster_free(cl);
	costmodel_destroy(cm);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(layout_dense),
		cmocka_unit_test(layout_moe),
		cmocka_unit_test(topo_bandwidths),
		cmocka_unit_test(diff_of_parsed_plans),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
