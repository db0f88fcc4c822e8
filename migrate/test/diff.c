/*
 * diff.c - unit tests of the plan diff, the schedule and the JSON form:
 * every byte of the new state has exactly one source, state that stays
 * is not sent, senders are the nearest holders, rounds pair peers.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

#define AR_INTERNAL
#include "migrate_private.h"
#include "scenario.h"

/* cmocka 1.1 has no assert_double_equal: relative tolerance @tol. */
#define assert_double_equal(a, b, tol) \
	assert_true(fabs((double)(a) - (double)(b)) <= \
		    (tol) * fmax(1e-30, fabs((double)(b))))

/* Small chunks and rounds, so that even KB-sized tests get many rounds. */
static const struct migrate_opts small_rounds = {
	.round_s = 1e-8,
	.min_chunk_bytes = 64,
};

static struct migrate *diff_of(const char *name, struct scenario *sc)
{
	struct migrate *m = NULL;
	int rc;

	assert_int_equal(scenario_build(name, sc), 0);
	rc = migrate_diff(sc->layout, sc->topo, sc->old_plan, sc->new_plan,
			  &small_rounds, &m);
	if (rc < 0)
		fail_msg("%s: %s", name, ar_errmsg());
	rc = migrate_check(m);
	if (rc < 0)
		fail_msg("%s: %s", name, ar_errmsg());
	return m;
}

static uint64_t new_bytes(const struct migrate *m)
{
	uint64_t sum = 0;

	for (int r = 0; r < m->nranks; r++)
		sum += migrate_rank_new_bytes(m, r);
	return sum;
}

/* Bytes @to receives from @from (over links or, if equal, kept). */
static uint64_t bytes_between(const struct migrate *m, int from, int to)
{
	uint64_t sum = 0;

	for (long i = 0; i < m->ntuples; i++)
		if (m->tuples[i].from == from && m->tuples[i].to == to)
			sum += migrate_tuple_bytes(&m->tuples[i]);
	return sum;
}

/* The accounting every migration satisfies. */
static void check_accounting(const struct migrate *m)
{
	assert_int_equal(m->stats.bytes_moved, m->stats.bytes_min);
	assert_int_equal(m->stats.bytes_local + m->stats.bytes_moved,
			 migrate_is_fresh(m) ? 0 : new_bytes(m));
	assert_true(m->stats.time_s >= m->stats.lower_bound_s * (1 - 1e-12));
}

/*
 * Runs @m in memory, apart from migrate_check(): the old buffers hold
 * every old shard's bytes (scenario_byte()), every block of every tuple is
 * copied from its sender's old buffer to its receiver's new buffer, and
 * then every byte of every new shard must have been written exactly once,
 * with its own value.
 */
static void check_by_copy(const struct migrate *m)
{
	unsigned char **old = calloc(m->nranks, sizeof(*old));
	unsigned char **now = calloc(m->nranks, sizeof(*now));
	unsigned char **seen = calloc(m->nranks, sizeof(*seen));

	assert_non_null(old);
	assert_non_null(now);
	assert_non_null(seen);
	for (int r = 0; r < m->nranks; r++) {
		old[r] = malloc(migrate_rank_old_bytes(m, r) + 1);
		now[r] = calloc(migrate_rank_new_bytes(m, r) + 1, 1);
		seen[r] = calloc(migrate_rank_new_bytes(m, r) + 1, 1);
		assert_true(old[r] && now[r] && seen[r]);
		for (int i = 0; i < m->n_old[r]; i++) {
			const struct migrate_shard *sh = &m->old_shards[r][i];

			for (uint64_t x = sh->lo; x < sh->hi; x++)
				old[r][sh->offset + (x - sh->lo)] =
					scenario_byte(sh->layer, sh->tensor, x);
		}
	}
	for (long i = 0; i < m->ntuples; i++) {
		const struct migrate_tuple *t = &m->tuples[i];
		uint64_t len = t->hi - t->lo;

		for (uint64_t k = 0; k < (uint64_t)t->count; k++) {
			uint64_t src = t->src_offset + k * t->src_stride;
			uint64_t dst = t->dst_offset + k * t->dst_stride;

			assert_true(src + len <= migrate_rank_old_bytes(m, t->from));
			assert_true(dst + len <= migrate_rank_new_bytes(m, t->to));
			for (uint64_t x = 0; x < len; x++) {
				now[t->to][dst + x] = old[t->from][src + x];
				seen[t->to][dst + x]++;
			}
		}
	}
	for (int r = 0; r < m->nranks; r++) {
		for (int i = 0; i < m->n_new[r] && !migrate_is_fresh(m); i++) {
			const struct migrate_shard *sh = &m->new_shards[r][i];

			for (uint64_t x = sh->lo; x < sh->hi; x++) {
				uint64_t at = sh->offset + (x - sh->lo);

				assert_int_equal(seen[r][at], 1);
				assert_int_equal(now[r][at],
						 scenario_byte(sh->layer,
							       sh->tensor, x));
			}
		}
		free(old[r]);
		free(now[r]);
		free(seen[r]);
	}
	free(old);
	free(now);
	free(seen);
}

static void test_every_scenario(void **state)
{
	for (int i = 0; scenario_names[i]; i++) {
		struct scenario sc;
		struct migrate *m = diff_of(scenario_names[i], &sc);

		check_accounting(m);
		check_by_copy(m);
		migrate_free(m);
		/* Default rounds cut tuples elsewhere; the bytes still match. */
		assert_int_equal(migrate_diff(sc.layout, sc.topo, sc.old_plan,
					      sc.new_plan, NULL, &m), 0);
		assert_int_equal(migrate_check(m), 0);
		check_by_copy(m);
		migrate_free(m);
		scenario_fini(&sc);
	}
}

static void test_tp2to4(void **state)
{
	struct scenario sc;
	struct migrate *m = diff_of("tp2to4", &sc);

	assert_int_equal(m->nranks, 4);
	/* TP rank 0 of 4 is the first half of TP rank 0 of 2: all kept. */
	assert_int_equal(bytes_between(m, 0, 0), migrate_rank_new_bytes(m, 0));
	/* Rank 1's quarter lay with old rank 0; ranks 2-3 with old rank 1. */
	assert_int_equal(bytes_between(m, 0, 1), migrate_rank_new_bytes(m, 1));
	assert_int_equal(bytes_between(m, 1, 2), migrate_rank_new_bytes(m, 2));
	assert_int_equal(bytes_between(m, 1, 3), migrate_rank_new_bytes(m, 3));
	/* Old rank 1 is TP rank 1 of 4 now, a quarter that lay with old 0. */
	assert_int_equal(bytes_between(m, 1, 1), 0);
	assert_int_equal(m->stats.bytes_local, migrate_rank_new_bytes(m, 0));
	/* One pipeline: everything is stage 1. */
	assert_int_equal(m->stats.nrounds, 0);
	migrate_free(m);
	scenario_fini(&sc);
}

static void test_tp4to2(void **state)
{
	struct scenario sc;
	struct migrate *m = diff_of("tp4to2", &sc);
	uint64_t half3 = migrate_rank_new_bytes(m, 3);

	assert_int_equal(m->nranks, 4);
	/* GPUs 0-1 hold nothing new; GPU 2 takes TP 0 of 2 from old 0 and 1. */
	assert_int_equal(migrate_rank_new_bytes(m, 0), 0);
	assert_int_equal(migrate_rank_new_bytes(m, 1), 0);
	assert_int_equal(bytes_between(m, 0, 2) + bytes_between(m, 1, 2),
			 migrate_rank_new_bytes(m, 2));
	assert_true(bytes_between(m, 0, 2) > 0 && bytes_between(m, 1, 2) > 0);
	/* GPU 3 (TP 1 of 2) takes old rank 2's quarter and keeps its own. */
	assert_int_equal(bytes_between(m, 2, 3) + bytes_between(m, 3, 3),
			 half3);
	assert_true(bytes_between(m, 3, 3) > 0);
	assert_int_equal(m->stats.bytes_local, bytes_between(m, 3, 3));
	migrate_free(m);
	scenario_fini(&sc);
}

static void test_stage_boundary(void **state)
{
	struct scenario sc;
	struct migrate *m = diff_of("stages", &sc);
	uint64_t layer3 = 0, low_half = 0;

	/* Only layer 3 moves: from node 1 (ranks 2, 3) to node 0 (0, 1). */
	for (int t = 0; t < MIGRATE_NUM_TENSORS; t++) {
		layer3 += sc.layout->layers[3].bytes[t];
		low_half += sc.layout->layers[3].bytes[t] / 2;
	}
	assert_int_equal(m->stats.bytes_moved, layer3);
	assert_int_equal(bytes_between(m, 2, 0), low_half);
	assert_int_equal(bytes_between(m, 3, 1), layer3 - low_half);
	for (long i = 0; i < m->ntuples; i++) {
		const struct migrate_tuple *t = &m->tuples[i];

		if (t->from != t->to) {
			assert_int_equal(t->layer, 3);
			assert_true(t->from >= 2 && t->to <= 1);
			/* The same TP rank sends: the slices line up. */
			assert_int_equal(t->from - 2, t->to);
		}
	}
	migrate_free(m);
	scenario_fini(&sc);
}

static void test_replica_add_remove(void **state)
{
	struct scenario sc;
	struct migrate *m = diff_of("replica-add", &sc);
	uint64_t total = migrate_layout_total_bytes(sc.layout);
	double nic = sc.topo->nodes[0].nic_GBps * 1e9;

	/* The new replica gets one full copy, over node 0's NIC. */
	assert_int_equal(m->stats.bytes_moved, total);
	assert_int_equal(bytes_between(m, 0, 2) + bytes_between(m, 1, 3),
			 total);
	assert_double_equal(m->stats.lower_bound_s, (double)total / nic,
			    1e-12);
	/* Cross-pipeline: stage 2, in rounds. */
	assert_true(m->stats.nrounds > 1);
	migrate_free(m);
	scenario_fini(&sc);

	/* Removing a replica moves nothing. */
	m = diff_of("replica-remove", &sc);
	assert_int_equal(m->stats.bytes_moved, 0);
	assert_int_equal(m->stats.bytes_local, total);
	assert_int_equal(migrate_rank_new_bytes(m, 2), 0);
	assert_double_equal(m->stats.time_s, 0.0, 0.0);
	migrate_free(m);
	scenario_fini(&sc);
}

static void test_gpu_type_change(void **state)
{
	struct scenario sc;
	struct migrate *m = diff_of("gpu-type", &sc);
	uint64_t total = migrate_layout_total_bytes(sc.layout);
	double nic_slow = sc.topo->nodes[1].nic_GBps * 1e9;

	/* Everything crosses to the slower node; its NIC bounds the time. */
	assert_int_equal(m->nranks, 6);
	assert_int_equal(m->stats.bytes_moved, total);
	assert_double_equal(m->stats.lower_bound_s, (double)total / nic_slow,
			    1e-12);
	for (long i = 0; i < m->ntuples; i++)
		assert_true(m->ranks[m->tuples[i].from].node == 0 &&
			    m->ranks[m->tuples[i].to].node == 1);
	migrate_free(m);
	scenario_fini(&sc);
}

static void test_ep_layout_change(void **state)
{
	struct scenario sc;
	struct migrate *m = diff_of("ep", &sc);
	uint64_t expert_total = 0, expert_new = 0, expert_old = 0;
	int ex = MIGRATE_PART_EXPERT * MIGRATE_NUM_KINDS;

	for (int l = 0; l < sc.layout->nlayers; l++)
		for (int k = 0; k < MIGRATE_NUM_KINDS; k++)
			expert_total += sc.layout->layers[l].bytes[ex + k];
	for (int r = 0; r < m->nranks; r++) {
		for (int i = 0; i < m->n_new[r]; i++)
			if (m->new_shards[r][i].tensor >= ex)
				expert_new += m->new_shards[r][i].hi -
					      m->new_shards[r][i].lo;
		for (int i = 0; i < m->n_old[r]; i++)
			if (m->old_shards[r][i].tensor >= ex)
				expert_old += m->old_shards[r][i].hi -
					      m->old_shards[r][i].lo;
	}
	/* EDP 1 before: one copy of the experts; EDP 2 after: two. */
	assert_int_equal(expert_old, expert_total);
	assert_int_equal(expert_new, 2 * expert_total);
	/* Rank 0 (EP 0, ETP 0) kept half of experts 0-1 and needs 2-3 too. */
	assert_true(bytes_between(m, 0, 0) > 0);
	assert_true(bytes_between(m, 1, 0) > 0);
	check_accounting(m);
	migrate_free(m);
	scenario_fini(&sc);
}

/*
 * EP 4 x EDP 2 -> EP 4 x ETP 2 on 4 nodes of 2 GPUs: the 4 GPUs of nodes
 * 1 and 2 need experts only 2 GPUs each hold (on nodes 0 and 2, and on 1
 * and 3).  Each of them takes all its experts from one of those, and the
 * two of each pair serve one receiver each: the loads stay even, and
 * stage 2 pairs the same peers round after round, at its lower bound.
 */
static void test_ep_relayout_senders(void **state)
{
	struct scenario sc;
	struct migrate *m = diff_of("ep-relayout", &sc);
	int peer_of[8], served[8] = { 0 }, nrecv = 0;

	assert_int_equal(m->nranks, 8);
	for (int r = 0; r < 8; r++)
		peer_of[r] = -1;
	for (long i = 0; i < m->ntuples; i++) {
		const struct migrate_tuple *t = &m->tuples[i];

		if (m->ranks[t->from].node == m->ranks[t->to].node)
			continue;
		/* Only nodes 1 and 2 lack their experts. */
		assert_true(m->ranks[t->to].node == 1 ||
			    m->ranks[t->to].node == 2);
		if (peer_of[t->to] < 0) {
			peer_of[t->to] = t->from;
			served[t->from]++;
			nrecv++;
		}
		assert_int_equal(t->from, peer_of[t->to]);
	}
	assert_int_equal(nrecv, 4);
	for (int r = 0; r < 8; r++)
		assert_true(served[r] <= 1);
	check_accounting(m);
	migrate_free(m);

	/* Real sizes and default rounds: the schedule meets its bound. */
	for (int l = 0; l < sc.layout->nlayers; l++)
		for (int t = 0; t < MIGRATE_NUM_TENSORS; t++)
			sc.layout->layers[l].bytes[t] *= 100000;
	assert_int_equal(migrate_diff(sc.layout, sc.topo, sc.old_plan,
				      sc.new_plan, NULL, &m), 0);
	assert_int_equal(migrate_check(m), 0);
	assert_true(m->stats.nrounds > 1);
	/* Stage 1 is the copies inside nodes 0 and 3; the network is stage 2. */
	assert_true(m->stats.stage1_s > 0);
	assert_true(m->stats.stage2_s <= 1.01 * m->stats.lower_bound_s);
	migrate_free(m);
	scenario_fini(&sc);
}

/*
 * The same re-layout as one chunk per pair (no cuts): a GPU's slices of
 * one layer's experts, kept or received, from one peer, are one tuple of
 * a block per expert, where one tuple per shard would take twice as many.
 */
static void test_ep_relayout_coalesced(void **state)
{
	const struct migrate_opts whole = { .round_s = 1e9 };
	int ex = MIGRATE_PART_EXPERT * MIGRATE_NUM_KINDS;
	struct scenario sc;
	struct migrate *m = NULL;
	long shards = 0, dense = 0, expert_keys = 0, nexpert = 0;

	assert_int_equal(scenario_build("ep-relayout", &sc), 0);
	assert_int_equal(migrate_diff(sc.layout, sc.topo, sc.old_plan,
				      sc.new_plan, &whole, &m), 0);
	assert_int_equal(migrate_check(m), 0);
	check_by_copy(m);
	for (int r = 0; r < m->nranks; r++) {
		for (int i = 0; i < m->n_new[r]; i++) {
			const struct migrate_shard *sh = &m->new_shards[r][i];

			shards++;
			if (sh->tensor < ex)
				dense++;
			else if (i == 0 || sh[-1].layer != sh->layer ||
				 sh[-1].tensor != sh->tensor)
				expert_keys++;
		}
	}
	/* 2 experts per EP rank, half of each: 2 shards per layer tensor. */
	assert_int_equal(shards, dense + 2 * expert_keys);
	for (long i = 0; i < m->ntuples; i++) {
		const struct migrate_tuple *t = &m->tuples[i];

		if (t->tensor < ex) {
			assert_int_equal(t->count, 1);
			continue;
		}
		/* Each half of 2 experts that lie 2 halves apart. */
		assert_int_equal(t->count, 2);
		assert_int_equal(t->stride, 2 * (t->hi - t->lo));
		nexpert++;
	}
	assert_int_equal(nexpert, expert_keys);
	assert_int_equal(m->ntuples, dense + expert_keys);
	assert_true(m->ntuples < shards);
	check_accounting(m);
	migrate_free(m);
	scenario_fini(&sc);
}

/* migrate_check() holds every block of a tuple, not only the first. */
static void test_check_catches_bad_blocks(void **state)
{
	struct scenario sc;
	struct migrate *m = diff_of("ep-relayout", &sc);
	struct migrate_tuple *t = NULL, saved;

	for (long i = 0; i < m->ntuples && !t; i++)
		if (m->tuples[i].count > 1)
			t = &m->tuples[i];
	assert_non_null(t);
	saved = *t;
	/* One block too many: bytes the receiver has from elsewhere. */
	t->count++;
	assert_int_equal(migrate_check(m), -AR_EINVAL);
	*t = saved;
	/* The second block read from the wrong place. */
	t->src_stride += 1;
	assert_int_equal(migrate_check(m), -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "does not hold"));
	*t = saved;
	/* Blocks that overlap. */
	t->stride = t->hi - t->lo - 1;
	assert_int_equal(migrate_check(m), -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "malformed"));
	*t = saved;
	assert_int_equal(migrate_check(m), 0);
	migrate_free(m);
	scenario_fini(&sc);
}

static void test_rounds_pair_peers(void **state)
{
	struct scenario sc;
	struct migrate *m = diff_of("join", &sc);
	int broken;

	assert_true(m->stats.nrounds > 1);
	/* migrate_check() must catch a round where a rank has two peers. */
	for (long i = 0; i + 1 < m->ntuples; i++) {
		struct migrate_tuple *a = &m->tuples[i], *b = &m->tuples[i + 1];

		if (a->round > 0 && a->round == b->round && a->to != b->to &&
		    a->from != b->from && b->from != b->to) {
			int saved = b->from;

			b->from = a->from;
			broken = migrate_check(m);
			b->from = saved;
			assert_int_equal(broken, -AR_EINVAL);
			break;
		}
	}
	migrate_free(m);
	scenario_fini(&sc);
}

static void test_check_catches_gaps_and_overlaps(void **state)
{
	struct scenario sc;
	struct migrate *m = diff_of("tp2to4", &sc);
	struct migrate_tuple saved;

	/* Drop bytes from one tuple: a gap. */
	saved = m->tuples[m->ntuples - 1];
	m->tuples[m->ntuples - 1].hi--;
	assert_int_equal(migrate_check(m), -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "no source"));
	m->tuples[m->ntuples - 1] = saved;
	/* Duplicate one tuple: an overlap. */
	m->tuples[m->ntuples - 1] = m->tuples[m->ntuples - 2];
	assert_int_equal(migrate_check(m), -AR_EINVAL);
	m->tuples[m->ntuples - 1] = saved;
	assert_int_equal(migrate_check(m), 0);
	migrate_free(m);
	scenario_fini(&sc);
}

static void test_fresh_start_moves_nothing(void **state)
{
	struct scenario sc;
	struct migrate *m = diff_of("fresh", &sc);

	assert_int_equal(m->ntuples, 0);
	assert_int_equal(m->nranks, 4);
	assert_int_equal(m->stats.bytes_moved, 0);
	migrate_free(m);
	scenario_fini(&sc);
}

static void test_json_round_trip(void **state)
{
	for (int i = 0; scenario_names[i]; i++) {
		struct scenario sc;
		struct migrate *back = NULL;
		struct migrate *m = diff_of(scenario_names[i], &sc);
		json_t *j = migrate_to_json(m);
		char *text;
		json_t *parsed;

		assert_non_null(j);
		text = json_dumps(j, JSON_COMPACT);
		parsed = json_loads(text, 0, NULL);
		assert_non_null(parsed);
		if (migrate_from_json(parsed, &back) < 0)
			fail_msg("%s: %s", scenario_names[i], ar_errmsg());
		assert_int_equal(back->nranks, m->nranks);
		assert_int_equal(back->ntuples, m->ntuples);
		for (long k = 0; k < m->ntuples; k++) {
			const struct migrate_tuple *a = &back->tuples[k];
			const struct migrate_tuple *b = &m->tuples[k];

			assert_int_equal(migrate_tuple_cmp(a, b), 0);
			assert_int_equal(a->hi, b->hi);
			assert_int_equal(a->count, b->count);
			assert_int_equal(a->stride, b->stride);
			assert_int_equal(a->src_offset, b->src_offset);
			assert_int_equal(a->src_stride, b->src_stride);
			assert_int_equal(a->dst_offset, b->dst_offset);
			assert_int_equal(a->dst_stride, b->dst_stride);
		}
		for (int r = 0; r < m->nranks; r++)
			assert_int_equal(migrate_rank_new_bytes(back, r),
					 migrate_rank_new_bytes(m, r));
		assert_double_equal(back->stats.time_s, m->stats.time_s, 1e-12);
		migrate_free(back);
		json_decref(parsed);
		json_decref(j);
		free(text);
		migrate_free(m);
		scenario_fini(&sc);
	}
}

static void test_json_rejects_bad_files(void **state)
{
	struct scenario sc;
	struct migrate *m = diff_of("stages", &sc), *back = NULL;
	json_t *j = migrate_to_json(m);
	json_t *t0 = json_array_get(json_object_get(j, "tuples"), 0);

	/* A tuple that leaves its first byte without a source. */
	json_array_set_new(t0, 2, json_integer(json_integer_value(
		json_array_get(t0, 2)) + 1));
	assert_int_equal(migrate_from_json(j, &back), -AR_EINVAL);
	assert_null(back);
	json_decref(j);

	j = migrate_to_json(m);
	json_object_set_new(j, "surprise", json_true());
	assert_int_equal(migrate_from_json(j, &back), -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "surprise"));
	json_decref(j);
	migrate_free(m);
	scenario_fini(&sc);
}

/*
 * Numbers are read as 64 bits and bounded before they are narrowed: a
 * round of 2^31 - 1 made the runner step through two billion empty
 * rounds, 2^32 + 1 read as round 1, layer 2^32 as layer 0, and a count
 * of 2^27 in a 420-byte file asked for 6 GB of blocks.
 */
static void test_json_bounds_numbers(void **state)
{
	static const struct {
		int elem;
		json_int_t value;
		const char *msg;
	} cases[] = {
		{ 6, 2147483647, "round (element 6) must be an integer from 0 to" },
		{ 6, 4294967297LL, "round (element 6) must be an integer from 0 to" },
		{ 0, 4294967296LL, "layer (element 0) must be an integer from 0 to" },
		{ 4, -1, "from (element 4) must be an integer from 0 to" },
		{ 2, 1LL << 60, "lo (element 2) must be an integer from 0 to 1125899906842624" },
	};
	struct scenario sc;
	struct migrate *m = diff_of("stages", &sc), *back = NULL;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		json_t *j = migrate_to_json(m);
		json_t *tuples = json_object_get(j, "tuples");
		json_t *last = json_array_get(tuples, json_array_size(tuples) - 1);

		json_array_set_new(last, cases[i].elem, json_integer(cases[i].value));
		assert_int_equal(migrate_from_json(j, &back), -AR_EINVAL);
		assert_null(back);
		if (!strstr(ar_errmsg(), cases[i].msg))
			fail_msg("case %zu: \"%s\" does not say \"%s\"", i,
				 ar_errmsg(), cases[i].msg);
		json_decref(j);
	}

	/* count 2^27: refused before a block is made. */
	json_t *j = migrate_to_json(m);
	json_t *t0 = json_array_get(json_object_get(j, "tuples"), 0);

	while (json_array_size(t0) < 9)
		json_array_append_new(t0, json_integer(0));
	json_array_set_new(t0, 7, json_integer(1 << 27));
	json_array_set_new(t0, 8, json_integer(1));
	assert_int_equal(migrate_from_json(j, &back), -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "count (element 7) must be an integer from 0 to 4194304"));
	json_decref(j);

	/* A node of 2^32 + 1 GPUs is not a node of one. */
	j = migrate_to_json(m);
	json_object_set_new(json_array_get(json_object_get(j, "nodes"), 0), "gpus",
			    json_integer(4294967297LL));
	assert_int_equal(migrate_from_json(j, &back), -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "\"gpus\" must be an integer from 1 to 16"));
	json_decref(j);
	migrate_free(m);
	scenario_fini(&sc);
}

static void test_bad_plans(void **state)
{
	struct scenario sc;
	struct migrate *m = NULL;

	assert_int_equal(scenario_build("stages", &sc), 0);
	/* The old plan forgets layer 5: nobody holds it. */
	sc.old_plan->templates[0].stages[1].last_layer = 4;
	assert_int_equal(migrate_diff(sc.layout, sc.topo, sc.old_plan,
				      sc.new_plan, NULL, &m),
			 -AR_EINFEASIBLE);
	assert_non_null(strstr(ar_errmsg(), "layer 5"));
	assert_null(m);
	/* A stage beyond the model. */
	sc.new_plan->templates[0].stages[1].last_layer = 9;
	assert_int_equal(migrate_diff(sc.layout, sc.topo, sc.old_plan,
				      sc.new_plan, NULL, &m),
			 -AR_EINVAL);
	/* A GPU the node does not have. */
	sc.new_plan->templates[0].stages[1].last_layer = 5;
	sc.new_plan->templates[0].placement[1].gpu[1] = 7;
	assert_int_equal(migrate_diff(sc.layout, sc.topo, NULL, sc.new_plan,
				      NULL, &m),
			 -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "GPU 7"));
	scenario_fini(&sc);
}

/* Default options: rounds sized from the lower bound stay near it. */
static void test_default_schedule_near_bound(void **state)
{
	struct scenario sc;
	struct migrate *m = NULL;

	assert_int_equal(scenario_build("join", &sc), 0);
	/* Scale the state up so rounds are longer than their latency. */
	for (int l = 0; l < sc.layout->nlayers; l++)
		for (int t = 0; t < MIGRATE_NUM_TENSORS; t++)
			sc.layout->layers[l].bytes[t] *= 1000000;
	assert_int_equal(migrate_diff(sc.layout, sc.topo, sc.old_plan,
				      sc.new_plan, NULL, &m), 0);
	assert_int_equal(migrate_check(m), 0);
	assert_true(m->stats.time_s <= 1.5 * m->stats.lower_bound_s);
	migrate_free(m);
	scenario_fini(&sc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_scenario),
		cmocka_unit_test(test_tp2to4),
		cmocka_unit_test(test_tp4to2),
		cmocka_unit_test(test_stage_boundary),
		cmocka_unit_test(test_replica_add_remove),
		cmocka_unit_test(test_gpu_type_change),
		cmocka_unit_test(test_ep_layout_change),
		cmocka_unit_test(test_ep_relayout_senders),
		cmocka_unit_test(test_ep_relayout_coalesced),
		cmocka_unit_test(test_check_catches_bad_blocks),
		cmocka_unit_test(test_rounds_pair_peers),
		cmocka_unit_test(test_check_catches_gaps_and_overlaps),
		cmocka_unit_test(test_fresh_start_moves_nothing),
		cmocka_unit_test(test_json_round_trip),
		cmocka_unit_test(test_json_rejects_bad_files),
		cmocka_unit_test(test_json_bounds_numbers),
		cmocka_unit_test(test_bad_plans),
		cmocka_unit_test(test_default_schedule_near_bound),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
