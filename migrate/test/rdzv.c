/*
 * rdzv.c - unit tests of the rendezvous: processes forked apart meet
 * through a private directory, broadcast, exchange messages, connect
 * every pair for a message layer of their own, agree, run a
 * migration over the TCP transport, and fail with the reason when a rank
 * is missing, dies, comes twice or was started for another size.
 *
 * The test process is rank 0 (or a bystander); every other rank is a
 * child that reports through its exit status: 0 when everything it
 * checked held, 10 + n for the n-th check that failed.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define AR_INTERNAL
#include "migrate_private.h"
#include "scenario.h"

static char dir[64];

static int setup(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/ar-rdzv.XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static struct migrate_rdzv_opts opts(const char *name, int rank, int size)
{
	return (struct migrate_rdzv_opts){
		.dir = dir, .name = name, .rank = rank, .size = size,
		.join_timeout_s = 10, .timeout_s = 10, .addr = "127.0.0.1",
	};
}

/* Fork a child that runs @fn(rank, arg) and exits with its result. */
static pid_t spawn(int (*fn)(int, void *), int rank, void *arg)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		/* A crash must end the child, not return into cmocka. */
		signal(SIGSEGV, SIG_DFL);
		signal(SIGABRT, SIG_DFL);
		signal(SIGBUS, SIG_DFL);
		signal(SIGFPE, SIG_DFL);
		signal(SIGILL, SIG_DFL);
		_exit(fn(rank, arg));
	}
	return pid;
}

static int child_status(pid_t pid)
{
	int st = 0;

	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ------------------------------------------------------------ primitives */

/*
 * Every rank: a broadcast from rank 2, a ring of messages (to the next,
 * from the previous), then an agreement.
 */
static int primitives_rank(int rank, void *arg)
{
	int size = *(int *)arg, next = (rank + 1) % size,
	    prev = (rank + size - 1) % size;
	struct migrate_rdzv_opts o = opts("prim", rank, size);
	struct migrate_rdzv *r;
	char buf[32] = "", want[32];
	uint64_t token = 1000 + (uint64_t)rank, got = 0;

	if (migrate_rdzv_join(&o, &r) < 0)
		return 10;
	if (migrate_rdzv_rank(r) != rank || migrate_rdzv_size(r) != size)
		return 11;
	if (rank == 2)
		snprintf(buf, sizeof(buf), "from two");
	if (migrate_rdzv_bcast(r, 2, buf, sizeof(buf)) < 0)
		return 12;
	snprintf(want, sizeof(want), "from two");
	if (strcmp(buf, want))
		return 13;
	/* Even ranks send first, odd ones receive first: no order deadlocks. */
	for (int pass = 0; pass < 2; pass++) {
		bool send = (pass == 0) == (rank % 2 == 0);

		if (send && migrate_rdzv_send(r, next, &token, sizeof(token)) < 0)
			return 14;
		if (!send && migrate_rdzv_recv(r, prev, &got, sizeof(got)) < 0)
			return 15;
	}
	if (got != 1000 + (uint64_t)prev)
		return 16;
	if (migrate_rdzv_agree(r, true) < 0)
		return 17;
	migrate_rdzv_close(r);
	return 0;
}

static void test_primitives(void **state)
{
	int size = 4;
	pid_t kids[3];

	for (int i = 1; i < size; i++)
		kids[i - 1] = spawn(primitives_rank, i, &size);
	assert_int_equal(primitives_rank(0, &size), 0);
	for (int i = 1; i < size; i++)
		assert_int_equal(child_status(kids[i - 1]), 0);
	/* The contact file is gone once everyone came. */
	assert_int_equal(access("prim.rdzv", F_OK), -1);
}

/*
 * Every rank opens every connection at once, then writes one token to each
 * peer on its own descriptor before reading any: the connections exist
 * (the socket buffers take the tokens) and each pair's reaches the peer.
 */
static int connect_all_rank(int rank, void *arg)
{
	int size = *(int *)arg;
	struct migrate_rdzv_opts o = opts("all", rank, size);
	struct migrate_rdzv *r;

	if (migrate_rdzv_join(&o, &r) < 0)
		return 10;
	if (migrate_rdzv_fd(r, (rank + 1) % size) != -1 ||
	    migrate_rdzv_fd(r, rank) != -1 || migrate_rdzv_fd(r, size) != -1)
		return 11;
	if (migrate_rdzv_connect_all(r) < 0)
		return 12;
	for (int peer = 0; peer < size; peer++) {
		uint32_t token = 100u * (uint32_t)rank + (uint32_t)peer;

		if (peer != rank &&
		    rdzv_write_all(migrate_rdzv_fd(r, peer), &token,
				   sizeof(token), ar_now() + 10) < 0)
			return 13;
	}
	for (int peer = 0; peer < size; peer++) {
		uint32_t got = 0;

		if (peer == rank)
			continue;
		if (rdzv_read_all(migrate_rdzv_fd(r, peer), &got, sizeof(got),
				  ar_now() + 10) < 0)
			return 14;
		if (got != 100u * (uint32_t)peer + (uint32_t)rank)
			return 15;
	}
	if (migrate_rdzv_agree(r, true) < 0)
		return 16;
	migrate_rdzv_close(r);
	return 0;
}

static void test_connect_all(void **state)
{
	int size = 4;
	pid_t kids[3];

	for (int i = 1; i < size; i++)
		kids[i - 1] = spawn(connect_all_rank, i, &size);
	assert_int_equal(connect_all_rank(0, &size), 0);
	for (int i = 1; i < size; i++)
		assert_int_equal(child_status(kids[i - 1]), 0);
}

/* ------------------------------------------------------------ agreement */

static int agree_rank(int rank, void *arg)
{
	struct migrate_rdzv_opts o = opts("agree", rank, 3);
	struct migrate_rdzv *r;
	int rc;

	if (migrate_rdzv_join(&o, &r) < 0)
		return 10;
	rc = migrate_rdzv_agree(r, rank != 1);
	migrate_rdzv_close(r);
	return rc == -AR_EABORT && strstr(ar_errmsg(), "rank 1 failed") ? 0 :
	       11;
}

static void test_agreement_names_the_failed_rank(void **state)
{
	pid_t a = spawn(agree_rank, 1, NULL), b = spawn(agree_rank, 2, NULL);

	assert_int_equal(agree_rank(0, NULL), 0);
	assert_int_equal(child_status(a), 0);
	assert_int_equal(child_status(b), 0);
}

/* A rank that dies after the meeting: its peers learn it at once. */
static int die_rank(int rank, void *arg)
{
	struct migrate_rdzv_opts o = opts("die", rank, 3);
	struct migrate_rdzv *r;
	int rc;

	if (migrate_rdzv_join(&o, &r) < 0)
		return 10;
	if (rank == 2)
		raise(SIGKILL);
	rc = migrate_rdzv_agree(r, true) == -AR_EABORT &&
	     strstr(ar_errmsg(), "rank 2") ? 0 : 11;
	migrate_rdzv_close(r);
	return rc;
}

static void test_dead_rank_seen_before_the_timeout(void **state)
{
	pid_t a = spawn(die_rank, 1, NULL), b = spawn(die_rank, 2, NULL);
	double t0 = ar_now();

	assert_int_equal(die_rank(0, NULL), 0);
	assert_int_equal(child_status(a), 0);
	assert_int_equal(child_status(b), 128 + SIGKILL);
	/* EOF on its connection, not the 10 s timeout. */
	assert_true(ar_now() - t0 < 5.0);
}

/* ------------------------------------------------------------ joining */

static void test_missing_rank_is_named(void **state)
{
	struct migrate_rdzv_opts o = opts("missing", 0, 3);
	struct migrate_rdzv *r = NULL;
	int three = 3;
	pid_t a;

	o.join_timeout_s = 1.0;
	a = spawn(primitives_rank, 9, &three);	/* a bad rank: exits at once */
	assert_int_equal(child_status(a), 10);
	assert_int_equal(migrate_rdzv_join(&o, &r), -AR_ETIMEOUT);
	assert_non_null(strstr(ar_errmsg(), "ranks 1, 2 did not arrive within 1 s"));
	assert_null(r);
	assert_int_equal(access("missing.rdzv", F_OK), -1);
}

/*
 * A rank of a meeting that is called off while it waits: rank 0 with
 * rank 1 connected (rank 2 never comes), or a member alone whose rank 0
 * never comes (@arg: "alone").
 */
static int called_off_rank(int rank, void *arg)
{
	struct migrate_rdzv_opts o = opts(arg ? "alone" : "off", rank,
					  arg ? 2 : 3);
	struct migrate_rdzv *r = NULL;
	char path[128];
	int rc;

	snprintf(path, sizeof(path), "%s/off.abandoned", dir);
	o.called_off = path;
	rc = migrate_rdzv_join(&o, &r);
	migrate_rdzv_close(r);
	if (rc != -AR_EABORT)
		return 30;
	return strstr(ar_errmsg(), "called off: job 7: generation 3 (join) abandoned: the trainer did not move the state") &&
	       !strchr(ar_errmsg(), '\n') ? 0 : 31;
}

static void test_called_off_stops_every_waiting_rank(void **state)
{
	static const char why[] = "job 7: generation 3 (join) abandoned: the trainer did not move the state\n";
	char path[128];
	pid_t kids[3];
	double t0 = ar_now();

	kids[0] = spawn(called_off_rank, 0, NULL);
	kids[1] = spawn(called_off_rank, 1, NULL);
	kids[2] = spawn(called_off_rank, 1, "alone");
	usleep(300000);		/* all three are waiting */
	snprintf(path, sizeof(path), "%s/off.abandoned", dir);
	assert_int_equal(ar_file_write_atomic(path, why, strlen(why), 0644), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(child_status(kids[i]), 0);
	/* At the call-off, not at the 10 s deadline. */
	assert_true(ar_now() - t0 < 5.0);
}

static int size_rank(int rank, void *arg)
{
	struct migrate_rdzv_opts o = opts("size", rank, *(int *)arg);
	struct migrate_rdzv *r = NULL;
	int rc = migrate_rdzv_join(&o, &r);

	migrate_rdzv_close(r);
	if (rc == 0)
		return 0;
	return rc == -AR_EABORT && strstr(ar_errmsg(), "was started for 3 ranks, rank 0 for 2") ?
	       20 : 21;
}

static void test_size_mismatch_refused(void **state)
{
	int two = 2, three = 3;
	pid_t host, good, bad;

	host = spawn(size_rank, 0, &two);
	bad = spawn(size_rank, 1, &three);
	assert_int_equal(child_status(bad), 20);	/* told why, at once */
	good = spawn(size_rank, 1, &two);
	assert_int_equal(child_status(good), 0);
	assert_int_equal(child_status(host), 0);
}

/* A member that comes first reads a dead meeting's file, and waits past it. */
static void test_stale_contact_file(void **state)
{
	static const char stale[] =
		"{\"arachne_rendezvous\":1,\"name\":\"prim\",\"session\":\"00000000000000aa\","
		"\"size\":4,\"port\":1,\"addrs\":[\"127.0.0.1\"],\"pid\":1}";
	char path[128];
	int size = 4;
	pid_t kids[3];
	FILE *f;

	snprintf(path, sizeof(path), "%s/prim.rdzv", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(stale, f);
	fclose(f);
	for (int i = 1; i < size; i++)
		kids[i - 1] = spawn(primitives_rank, i, &size);
	usleep(300000);		/* they read the stale file first */
	assert_int_equal(primitives_rank(0, &size), 0);
	for (int i = 1; i < size; i++)
		assert_int_equal(child_status(kids[i - 1]), 0);
}

/* ------------------------------------------------------------ migration */

struct run_arg {
	struct migrate *m;
	uint8_t **old, **want;
};

/* A rank's old (@after false) or new state, filled with the fixture bytes. */
static uint8_t *state_of(const struct migrate *m, int rank, bool after)
{
	const struct migrate_shard *sh = after ? m->new_shards[rank] :
						 m->old_shards[rank];
	int n = after ? m->n_new[rank] : m->n_old[rank];
	uint64_t bytes = after ? migrate_rank_new_bytes(m, rank) :
				 migrate_rank_old_bytes(m, rank);
	uint8_t *buf = malloc(bytes ? bytes : 1);

	assert_non_null(buf);
	for (int i = 0; i < n; i++)
		for (uint64_t x = sh[i].lo; x < sh[i].hi; x++)
			buf[sh[i].offset + (x - sh[i].lo)] =
				scenario_byte(sh[i].layer, sh[i].tensor, x);
	return buf;
}

/* Rank @rank's migration over the TCP transport, checked byte for byte. */
static int migrate_rank(int rank, void *arg)
{
	struct run_arg *ra = arg;
	struct migrate_rdzv_opts o = opts("run", rank, ra->m->nranks);
	struct migrate_transport *tp;
	struct migrate_rdzv *r;
	uint64_t n = migrate_rank_new_bytes(ra->m, rank);
	uint8_t *out = malloc(n ? n : 1);
	int rc;

	if (!out || migrate_rdzv_join(&o, &r) < 0)
		return 10;
	if (migrate_transport_tcp_create(r, &tp) < 0)
		return 11;
	rc = migrate_run(ra->m, tp, ra->old[rank], out, NULL);
	migrate_transport_destroy(tp);
	migrate_rdzv_close(r);
	if (rc < 0)
		return 12;
	if (memcmp(out, ra->want[rank], n))
		return 13;
	free(out);
	return 0;
}

static void test_migration_over_tcp(void **state)
{
	struct scenario sc;
	struct run_arg ra;
	struct migrate *m = NULL;
	pid_t *kids;

	assert_int_equal(scenario_build("mixed-tp", &sc), 0);
	assert_int_equal(migrate_diff(sc.layout, sc.topo, sc.old_plan,
				      sc.new_plan, NULL, &m), 0);
	ra.m = m;
	ra.old = calloc(m->nranks, sizeof(*ra.old));
	ra.want = calloc(m->nranks, sizeof(*ra.want));
	kids = calloc(m->nranks, sizeof(*kids));
	assert_non_null(ra.old);
	assert_non_null(ra.want);
	assert_non_null(kids);
	for (int r = 0; r < m->nranks; r++) {
		ra.old[r] = state_of(m, r, false);
		ra.want[r] = state_of(m, r, true);
	}
	for (int r = 1; r < m->nranks; r++)
		kids[r] = spawn(migrate_rank, r, &ra);
	assert_int_equal(migrate_rank(0, &ra), 0);
	for (int r = 1; r < m->nranks; r++)
		assert_int_equal(child_status(kids[r]), 0);
	for (int r = 0; r < m->nranks; r++) {
		free(ra.old[r]);
		free(ra.want[r]);
	}
	free(ra.old);
	free(ra.want);
	free(kids);
	migrate_free(m);
	scenario_fini(&sc);
}

static void test_bad_options(void **state)
{
	struct migrate_rdzv_opts o = opts("bad/name", 0, 2);
	struct migrate_rdzv *r = NULL;

	assert_int_equal(migrate_rdzv_join(&o, &r), -AR_EINVAL);
	o = opts("ok", 2, 2);
	assert_int_equal(migrate_rdzv_join(&o, &r), -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "rank 2 is not in 0..1"));
	assert_null(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_primitives),
		cmocka_unit_test(test_connect_all),
		cmocka_unit_test(test_agreement_names_the_failed_rank),
		cmocka_unit_test(test_dead_rank_seen_before_the_timeout),
		cmocka_unit_test(test_missing_rank_is_named),
		cmocka_unit_test(test_size_mismatch_refused),
		cmocka_unit_test(test_stale_contact_file),
		cmocka_unit_test(test_called_off_stops_every_waiting_rank),
		cmocka_unit_test(test_migration_over_tcp),
		cmocka_unit_test(test_bad_options),
	};

	/* The relative names above are checked from inside the directory. */
	if (setup(NULL) < 0 || chdir(dir) < 0)
		return 1;
	{
		int rc = cmocka_run_group_tests(tests, NULL, NULL);

		if (chdir("/") < 0 || teardown(NULL) < 0)
			return 1;
		return rc;
	}
}
