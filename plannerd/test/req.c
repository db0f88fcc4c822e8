/* req.c - the request parser and the answer encoder (cmocka, TAP). */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ar.h"
#include "req.h"

static int parse(const char *line, struct req *req)
{
	return req_parse(line, strlen(line), req);
}

/* Parse @line expecting failure @rc with @needle in the message. */
static void expect_error(const char *line, int rc, const char *needle)
{
	struct req req;

	assert_int_equal(parse(line, &req), rc);
	if (!strstr(ar_errmsg(), needle))
		fail_msg("%s: message \"%s\" lacks \"%s\"", line, ar_errmsg(),
			 needle);
	req_fini(&req);
}

static void test_ping_status(void **state)
{
	struct req req;

	assert_int_equal(parse("{\"op\":\"ping\"}", &req), 0);
	assert_int_equal(req.op, REQ_PING);
	assert_null(req.id);
	req_fini(&req);
	assert_int_equal(parse("{\"op\":\"status\",\"id\":7}", &req), 0);
	assert_int_equal(req.op, REQ_STATUS);
	assert_int_equal(json_integer_value(req.id), 7);
	req_fini(&req);
}

static void test_plan_full(void **state)
{
	struct req req;

	assert_int_equal(parse("{\"op\":\"plan\",\"id\":\"a\",\"job\":1234,"
			       "\"user\":\"alice\",\"model\":{\"name\":\"llama3-8b\","
			       "\"global_batch\":512,\"seq_len\":4096,"
			       "\"planner\":\"exhaustive\",\"budget_s\":2.5},"
			       "\"cluster\":{\"nodes\":[]}}", &req), 0);
	assert_int_equal(req.op, REQ_PLAN);
	assert_string_equal(req.job, "1234");
	assert_string_equal(req.user, "alice");
	assert_int_equal(req.uid, -1);
	assert_string_equal(req.model, "llama3-8b");
	assert_int_equal(req.global_batch, 512);
	assert_int_equal(req.seq_len, 4096);
	assert_string_equal(req.planner, "exhaustive");
	assert_true(req.budget_s == 2.5);
	assert_non_null(req.cluster);
	req_fini(&req);
}

static void test_plan_short(void **state)
{
	struct req req;

	assert_int_equal(parse("{\"op\":\"plan\",\"job\":\"77+1\",\"user\":1000,"
			       "\"model\":\"toy\",\"cluster\":{}}", &req), 0);
	assert_string_equal(req.job, "77+1");
	assert_int_equal(req.uid, 1000);
	assert_string_equal(req.user, "");
	assert_string_equal(req.model, "toy");
	assert_int_equal(req.global_batch, 0);
	assert_string_equal(req.planner, "");
	req_fini(&req);
}

static void test_replan_get_forget(void **state)
{
	struct req req;

	assert_int_equal(parse("{\"op\":\"replan\",\"job\":\"9\",\"cluster\":{},"
			       "\"horizon_s\":60}", &req), 0);
	assert_int_equal(req.op, REQ_REPLAN);
	assert_true(req.horizon_s == 60);
	req_fini(&req);
	assert_int_equal(parse("{\"op\":\"replan\",\"job\":\"9\",\"cluster\":{}}",
			       &req), 0);
	assert_true(req.horizon_s < 0);
	req_fini(&req);
	/* A replan a daemon that never saw the job can answer. */
	assert_int_equal(parse("{\"op\":\"replan\",\"job\":\"9\",\"cluster\":{},"
			       "\"user\":\"alice\",\"model\":{\"name\":\"toy\",\"global_batch\":8},"
			       "\"previous\":{\"plan\":{\"arachne_plan\":1},\"cluster\":{\"nodes\":[]}}}",
			       &req), 0);
	assert_string_equal(req.user, "alice");
	assert_string_equal(req.model, "toy");
	assert_int_equal(req.global_batch, 8);
	assert_non_null(req.previous_plan);
	assert_non_null(json_object_get(req.previous_cluster, "nodes"));
	req_fini(&req);
	assert_null(req.previous_plan);
	assert_int_equal(parse("{\"op\":\"get\",\"job\":\"9\"}", &req), 0);
	assert_int_equal(req.op, REQ_GET);
	req_fini(&req);
	assert_int_equal(parse("{\"op\":\"forget\",\"job\":9}", &req), 0);
	assert_int_equal(req.op, REQ_FORGET);
	assert_string_equal(req.job, "9");
	req_fini(&req);
}

static void test_malformed(void **state)
{
	expect_error("", -AR_EPROTO, "malformed JSON");
	expect_error("{\"op\":", -AR_EPROTO, "malformed JSON");
	expect_error("[1,2]", -AR_EPROTO, "JSON object");
	expect_error("\"ping\"", -AR_EPROTO, "JSON object");
	expect_error("{\"op\":\"ping\",\"op\":\"ping\"}", -AR_EPROTO,
		     "duplicate");
	expect_error("{\"op\":\"ping\"} {}", -AR_EPROTO, "malformed JSON");
}

static void test_bad_fields(void **state)
{
	expect_error("{}", -AR_EINVAL, "op: missing");
	expect_error("{\"op\":3}", -AR_EINVAL, "op: missing or not a string");
	expect_error("{\"op\":\"dance\"}", -AR_EINVAL, "unknown operation \"dance\"");
	expect_error("{\"op\":\"ping\",\"x\":1}", -AR_EINVAL, "unknown key \"x\"");
	expect_error("{\"op\":\"ping\",\"id\":[1]}", -AR_EINVAL, "id:");
	expect_error("{\"op\":\"get\"}", -AR_EINVAL, "job: missing");
	expect_error("{\"op\":\"get\",\"job\":\"../etc/passwd\"}", -AR_EINVAL,
		     "is not a job id");
	expect_error("{\"op\":\"get\",\"job\":\".hidden\"}", -AR_EINVAL,
		     "is not a job id");
	expect_error("{\"op\":\"get\",\"job\":\"\"}", -AR_EINVAL, "is not a job id");
	expect_error("{\"op\":\"get\",\"job\":-1}", -AR_EINVAL, "negative");
	expect_error("{\"op\":\"get\",\"job\":1.5}", -AR_EINVAL, "job: expected");
	expect_error("{\"op\":\"get\",\"job\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}",
		     -AR_EINVAL, "is not a job id");
	expect_error("{\"op\":\"plan\",\"job\":1,\"user\":\"a\",\"model\":\"m\"}",
		     -AR_EINVAL, "cluster: missing");
	expect_error("{\"op\":\"plan\",\"job\":1,\"user\":\"a\",\"model\":\"m\",\"cluster\":[]}",
		     -AR_EINVAL, "cluster: expected");
	expect_error("{\"op\":\"plan\",\"job\":1,\"model\":\"m\",\"cluster\":{}}",
		     -AR_EINVAL, "user: missing");
	expect_error("{\"op\":\"plan\",\"job\":1,\"user\":\"a b\",\"model\":\"m\",\"cluster\":{}}",
		     -AR_EINVAL, "user: \"a b\"");
	expect_error("{\"op\":\"plan\",\"job\":1,\"user\":-3,\"model\":\"m\",\"cluster\":{}}",
		     -AR_EINVAL, "not a uid");
	expect_error("{\"op\":\"plan\",\"job\":1,\"user\":\"a\",\"cluster\":{}}",
		     -AR_EINVAL, "model: missing");
	expect_error("{\"op\":\"plan\",\"job\":1,\"user\":\"a\",\"model\":{},\"cluster\":{}}",
		     -AR_EINVAL, "model.name: missing");
	expect_error("{\"op\":\"plan\",\"job\":1,\"user\":\"a\",\"model\":{\"name\":\"m\",\"batch\":1},\"cluster\":{}}",
		     -AR_EINVAL, "unknown key \"batch\"");
	expect_error("{\"op\":\"plan\",\"job\":1,\"user\":\"a\",\"model\":{\"name\":\"m\",\"global_batch\":0},\"cluster\":{}}",
		     -AR_EINVAL, "model.global_batch");
	expect_error("{\"op\":\"plan\",\"job\":1,\"user\":\"a\",\"model\":{\"name\":\"m\",\"budget_s\":-1},\"cluster\":{}}",
		     -AR_EINVAL, "model.budget_s");
	expect_error("{\"op\":\"plan\",\"job\":1,\"user\":\"a\",\"model\":{\"name\":\"../m\"},\"cluster\":{}}",
		     -AR_EINVAL, "not a valid name");
	expect_error("{\"op\":\"replan\",\"job\":1,\"cluster\":{},\"horizon_s\":\"1\"}",
		     -AR_EINVAL, "horizon_s");
	expect_error("{\"op\":\"replan\",\"job\":1,\"cluster\":{},\"owner\":\"a\"}",
		     -AR_EINVAL, "unknown key \"owner\"");
	expect_error("{\"op\":\"replan\",\"job\":1,\"cluster\":{},\"previous\":{\"plan\":{}}}",
		     -AR_EINVAL, "previous.cluster");
	expect_error("{\"op\":\"replan\",\"job\":1,\"cluster\":{},\"previous\":{\"plan\":[],\"cluster\":{}}}",
		     -AR_EINVAL, "previous.plan");
	expect_error("{\"op\":\"replan\",\"job\":1,\"cluster\":{},\"previous\":{\"plan\":{},\"cluster\":{},\"x\":1}}",
		     -AR_EINVAL, "unknown key \"x\"");
	expect_error("{\"op\":\"replan\",\"job\":1,\"cluster\":{},\"model\":{\"global_batch\":2}}",
		     -AR_EINVAL, "model.name: missing");
}

static void test_reply_error(void **state)
{
	json_t *id = json_string("q1"), *a;
	char *line = req_reply_error(id, -AR_EPERM, "no");

	assert_non_null(line);
	assert_int_equal(line[strlen(line) - 1], '\n');
	assert_ptr_equal(strchr(line, '\n'), line + strlen(line) - 1);
	a = json_loads(line, 0, NULL);
	assert_non_null(a);
	assert_true(json_is_false(json_object_get(a, "ok")));
	assert_string_equal(json_string_value(json_object_get(a, "id")), "q1");
	assert_string_equal(json_string_value(json_object_get(
					 json_object_get(a, "error"), "code")),
			    "permission");
	json_decref(a);
	free(line);
	json_decref(id);
}

static void test_err_codes(void **state)
{
	assert_string_equal(req_err_code(-EMSGSIZE), "too_large");
	assert_string_equal(req_err_code(-EBUSY), "busy");
	assert_string_equal(req_err_code(-ESHUTDOWN), "shutting_down");
	assert_string_equal(req_err_code(-AR_EINVAL), "invalid");
	assert_string_equal(req_err_code(-AR_EPROTO), "protocol");
	assert_string_equal(req_err_code(-AR_ENOTFOUND), "not_found");
	assert_string_equal(req_err_code(-AR_EINFEASIBLE), "infeasible");
	assert_string_equal(req_err_code(-ENOMEM), "system");
}

static void test_reply_ok_and_bad_utf8(void **state)
{
	json_t *a;
	char *line = req_reply_ok(NULL, json_pack("{s:s}", "op", "ping"));

	assert_non_null(line);
	assert_int_equal(strncmp(line, "{\"ok\":true", 10), 0);
	free(line);
	/* a message cut inside a UTF-8 sequence still gives an answer */
	line = req_reply_error(NULL, -AR_EINVAL, "bad \xc3");
	assert_non_null(line);
	a = json_loads(line, 0, NULL);
	assert_non_null(a);
	assert_string_equal(json_string_value(json_object_get(
		json_object_get(a, "error"), "message")), "invalid input");
	json_decref(a);
	free(line);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ping_status),
		cmocka_unit_test(test_plan_full),
		cmocka_unit_test(test_plan_short),
		cmocka_unit_test(test_replan_get_forget),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_bad_fields),
		cmocka_unit_test(test_reply_error),
		cmocka_unit_test(test_err_codes),
		cmocka_unit_test(test_reply_ok_and_bad_utf8),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
