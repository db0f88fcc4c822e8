/*
 * test/client.c - the plannerd client against small servers on a private
 * socket: one that answers, one that refuses, one that sends garbage, one
 * that never answers, and none at all.  What is checked is the outcome
 * and its message, and that a silent server costs no more than the
 * deadline (with a wide margin: this is a bound, not a speed target).
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "ar.h"
#include "arachne.h"

static char sock_path[108];

struct server {
	int fd;			/* listening socket */
	const char *answer;	/* sent after the request line; NULL: none */
	char request[4096];	/* what the client sent */
};

static void *server_run(void *arg)
{
	struct server *s = arg;
	size_t len = 0;
	char byte;
	int c = accept(s->fd, NULL, NULL);

	if (c < 0)
		return NULL;
	while (len < sizeof(s->request) - 1) {
		ssize_t n = read(c, s->request + len, 1);

		if (n <= 0 || s->request[len] == '\n')
			break;
		len += (size_t)n;
	}
	s->request[len] = '\0';
	if (s->answer && write(c, s->answer, strlen(s->answer)) < 0)
		s->answer = NULL;
	/* Silent: hold the connection open until the client gives up. */
	while (!s->answer && read(c, &byte, 1) > 0)
		;
	close(c);
	return NULL;
}

static int server_listen(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	strcpy(sa.sun_path, sock_path);
	unlink(sock_path);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 4), 0);
	return fd;
}

static int call(const char *answer, unsigned long timeout_ms,
		struct server *s, json_t **respp, char *why, size_t len)
{
	json_t *req = json_pack("{s:s, s:I}", "op", "get", "job",
				(json_int_t)42);
	pthread_t t;
	int rc;

	memset(s, 0, sizeof(*s));
	s->fd = server_listen();
	s->answer = answer;
	assert_int_equal(pthread_create(&t, NULL, server_run, s), 0);
	rc = client_call(sock_path, timeout_ms, req, respp, why, len);
	/* A silent server's read() ends when the client hangs up. */
	pthread_join(t, NULL);
	close(s->fd);
	json_decref(req);
	return rc;
}

static void client_ok(void **state)
{
	struct server s;
	json_t *resp;
	char why[256];

	assert_int_equal(call("{\"ok\":true,\"op\":\"get\",\"plan\":{\"x\":1}}\n",
			      2000, &s, &resp, why, sizeof(why)), 0);
	assert_string_equal(s.request, "{\"op\":\"get\",\"job\":42}");
	assert_int_equal(json_integer_value(json_object_get(
		json_object_get(resp, "plan"), "x")), 1);
	assert_string_equal(why, "");
	json_decref(resp);
}

static void client_refused(void **state)
{
	struct server s;
	json_t *resp;
	char why[256];

	assert_int_equal(call("{\"ok\":false,\"error\":{\"code\":\"permission\",\"message\":\"job 42 is not yours\"}}\n",
			      2000, &s, &resp, why, sizeof(why)), -AR_EPERM);
	assert_null(resp);
	assert_string_equal(why, "plannerd refused the request (permission): job 42 is not yours");

	assert_int_equal(call("{\"ok\":false,\"error\":{\"code\":\"infeasible\",\"message\":\"no template fits\"}}\n",
			      2000, &s, &resp, why, sizeof(why)), -AR_EINVAL);
	assert_string_equal(why, "plannerd refused the request (infeasible): no template fits");
}

static void client_garbage(void **state)
{
	struct server s;
	json_t *resp;
	char why[256];

	assert_int_equal(call("this is not json\n", 2000, &s, &resp, why,
			      sizeof(why)), -AR_EPROTO);
	assert_non_null(strstr(why, "not a JSON object"));
	assert_int_equal(call("{\"ok\":true", 2000, &s, &resp, why,
			      sizeof(why)), -AR_EPROTO);
	assert_non_null(strstr(why, "closed the connection without an answer"));
}

static void client_silent_server_times_out(void **state)
{
	struct server s;
	json_t *resp;
	char why[256];
	double t0 = ar_now(), spent;

	assert_int_equal(call(NULL, 200, &s, &resp, why, sizeof(why)),
			 -AR_ETIMEOUT);
	spent = ar_now() - t0;
	assert_true(spent >= 0.19);
	assert_true(spent < 2.0);
	assert_non_null(strstr(why, "did not answer within 200 ms"));
}

static void client_no_server(void **state)
{
	json_t *req = json_object(), *resp;
	char why[256], longpath[200];

	unlink(sock_path);
	assert_int_equal(client_call(sock_path, 500, req, &resp, why,
				     sizeof(why)), -ENOENT);
	assert_non_null(strstr(why, "cannot reach plannerd at"));
	assert_non_null(strstr(why, "No such file or directory"));

	memset(longpath, 'a', sizeof(longpath) - 1);
	longpath[0] = '/';
	longpath[sizeof(longpath) - 1] = '\0';
	assert_int_equal(client_call(longpath, 500, req, &resp, why,
				     sizeof(why)), -ENAMETOOLONG);
	json_decref(req);
}

/* The socket lives in a short private directory, whatever the build path. */
static char sock_dir[] = "/tmp/ar.XXXXXX";

static int setup(void **state)
{
	if (!mkdtemp(sock_dir))
		return -1;
	snprintf(sock_path, sizeof(sock_path), "%s/plannerd.sock", sock_dir);
	return 0;
}

static int teardown(void **state)
{
	unlink(sock_path);
	rmdir(sock_dir);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(client_ok),
		cmocka_unit_test(client_refused),
		cmocka_unit_test(client_garbage),
		cmocka_unit_test(client_silent_server_times_out),
		cmocka_unit_test(client_no_server),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
