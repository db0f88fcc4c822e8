/* store.c - the plan store and the answer cache (cmocka, TAP). */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "ar.h"
#include "cache.h"
#include "store.h"

static char dir[] = "/tmp/plannerd-store-test.XXXXXX";

static int setup(void **state)
{
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd);
}

static json_t *doc_make(const char *job, int uid, int batch)
{
	return json_pack("{s:i, s:s, s:i, s:{s:{s:s, s:i}, s:{}}, s:{s:i}, s:i}",
			 "arachne_job", 1, "job", job, "uid", uid,
			 "request", "model", "name", "toy", "global_batch",
			 batch, "cluster", "plan", "micro_batch", batch,
			 "updated", 0);
}

static void write_file(const char *name, const char *text)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/jobs/%s", dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void test_put_get_reopen(void **state)
{
	struct store *s;
	json_t *doc, *got;
	char *key, *key2;
	uid_t uid;
	struct stat st;
	char path[256];

	assert_int_equal(store_open(dir, &s), 0);
	assert_int_equal(store_count(s), 0);
	assert_int_equal(store_get(s, "1", &uid, NULL, NULL), -AR_ENOTFOUND);
	doc = doc_make("1", 1000, 64);
	assert_int_equal(store_put(s, "1", 1000, doc), 0);
	assert_int_equal(store_get(s, "1", &uid, &key, &got), 0);
	assert_int_equal(uid, 1000);
	assert_true(json_equal(doc, got));
	key2 = store_request_key(json_object_get(doc, "request"));
	assert_string_equal(key, key2);
	free(key2);
	free(key);
	json_decref(got);
	/* the file is private and complete */
	snprintf(path, sizeof(path), "%s/jobs/1.json", dir);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	store_close(s);

	/* a crash's leftovers: a temporary file and a broken document */
	write_file("2.json.tmp.abcdef", "{\"arachne_job\":1,\"jo");
	write_file("3.json", "{\"arachne_job\":1,");
	write_file("4.json", "{\"job\":\"5\",\"uid\":1,\"request\":{},\"plan\":{}}");
	/* a uid of -5 was read as 4294967291: a stranger's job */
	write_file("6.json", "{\"job\":\"6\",\"uid\":-5,\"request\":{},\"plan\":{}}");
	assert_int_equal(store_open(dir, &s), 0);
	assert_int_equal(store_count(s), 1);
	assert_int_equal(store_get(s, "6", &uid, NULL, NULL), -AR_ENOTFOUND);
	assert_int_equal(store_get(s, "1", &uid, NULL, &got), 0);
	assert_true(json_equal(doc, got));
	json_decref(got);
	snprintf(path, sizeof(path), "%s/jobs/2.json.tmp.abcdef", dir);
	assert_int_not_equal(access(path, F_OK), 0);

	/* A file that cannot be removed: forget fails and keeps the job
	 * (it answered ok, and the job came back at the next start). */
	snprintf(path, sizeof(path), "%s/jobs/1.json", dir);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/jobs/1.json/x", dir);
	assert_int_equal(mkdir(path, 0700), 0);
	assert_true(store_forget(s, "1") < 0);
	assert_non_null(strstr(ar_errmsg(), "cannot remove"));
	assert_int_equal(store_get(s, "1", &uid, NULL, NULL), 0);
	assert_int_equal(rmdir(path), 0);
	snprintf(path, sizeof(path), "%s/jobs/1.json", dir);
	assert_int_equal(rmdir(path), 0);

	assert_int_equal(store_forget(s, "1"), 0);
	assert_int_equal(store_forget(s, "1"), -AR_ENOTFOUND);
	assert_int_equal(store_count(s), 0);
	snprintf(path, sizeof(path), "%s/jobs/1.json", dir);
	assert_int_not_equal(access(path, F_OK), 0);
	store_close(s);
	json_decref(doc);
}

static void test_key_is_canonical(void **state)
{
	json_t *a = json_loads("{\"b\":1,\"a\":{\"y\":2,\"x\":3}}", 0, NULL);
	json_t *b = json_loads("{\"a\":{\"x\":3,\"y\":2},\"b\":1}", 0, NULL);
	char *ka = store_request_key(a), *kb = store_request_key(b);

	assert_string_equal(ka, kb);
	free(ka);
	free(kb);
	json_decref(a);
	json_decref(b);
	/* The composition's name is a label: it does not make a request new. */
	a = json_loads("{\"cluster\":{\"name\":\"slurm-job-1\",\"nodes\":[]},\"m\":1}", 0, NULL);
	b = json_loads("{\"m\":1,\"cluster\":{\"nodes\":[],\"name\":\"slurm-job-2\"}}", 0, NULL);
	ka = store_request_key(a);
	kb = store_request_key(b);
	assert_string_equal(ka, kb);
	assert_null(strstr(ka, "slurm-job"));
	/* ... and the request itself keeps it. */
	assert_string_equal(json_string_value(json_object_get(json_object_get(a, "cluster"), "name")),
			    "slurm-job-1");
	free(ka);
	free(kb);
	json_decref(a);
	json_decref(b);
}

static void test_cache_lru(void **state)
{
	struct cache *c = cache_create(2);
	json_t *p1 = json_integer(1), *p2 = json_integer(2), *p3 = json_integer(3);
	json_t *got;

	cache_put(c, "a", p1);
	cache_put(c, "b", p2);
	got = cache_get(c, "a");	/* a is now the most recent */
	assert_ptr_equal(got, p1);
	json_decref(got);
	cache_put(c, "c", p3);		/* evicts b */
	assert_null(cache_get(c, "b"));
	got = cache_get(c, "a");
	assert_ptr_equal(got, p1);
	json_decref(got);
	assert_int_equal(cache_count(c), 2);
	cache_put(c, "a", p2);		/* replaces */
	got = cache_get(c, "a");
	assert_ptr_equal(got, p2);
	json_decref(got);
	cache_clear(c);
	assert_int_equal(cache_count(c), 0);
	cache_destroy(c);

	c = cache_create(0);
	cache_put(c, "a", p1);
	assert_null(cache_get(c, "a"));
	cache_destroy(c);
	json_decref(p1);
	json_decref(p2);
	json_decref(p3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_put_get_reopen),
		cmocka_unit_test(test_key_is_canonical),
		cmocka_unit_test(test_cache_lru),
	};

	ar_log_open("store.t", false, LOG_EMERG);
	return cmocka_run_group_tests(tests, setup, teardown);
}
