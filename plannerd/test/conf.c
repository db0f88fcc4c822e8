/* conf.c - the directive table and its libconfig parser (cmocka, TAP). */
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
#include "conf.h"

static char conf_path[] = "/tmp/plannerd-conf-test.XXXXXX";

static void write_conf(const char *text)
{
	FILE *f = fopen(conf_path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static int setup(void **state)
{
	int fd = mkstemp(conf_path);

	if (fd < 0)
		return -1;
	close(fd);
	return 0;
}

static int teardown(void **state)
{
	unlink(conf_path);
	return 0;
}

/* @text must fail with "PATH:@line: " followed by @needle. */
static void expect_conf_error(const char *text, int line, const char *needle)
{
	struct conf *conf;
	char prefix[256];

	write_conf(text);
	assert_int_equal(conf_create(conf_path, &conf), -AR_EINVAL);
	assert_null(conf);
	snprintf(prefix, sizeof(prefix), "%s:%d: ", conf_path, line);
	if (strncmp(ar_errmsg(), prefix, strlen(prefix)) != 0 ||
	    !strstr(ar_errmsg(), needle))
		fail_msg("\"%s\": expected \"%s...%s\"", ar_errmsg(), prefix,
			 needle);
}

static void test_defaults(void **state)
{
	struct conf *conf;

	assert_int_equal(conf_create(NULL, &conf), 0);
	assert_string_equal(conf->socket_path, AR_PLANNERD_SOCKET);
	assert_int_equal(conf->socket_mode, 0666);
	assert_string_equal(conf->planner, "arachne");
	assert_true(conf->budget_s == 10);
	assert_int_equal(conf->log_level, LOG_INFO);
	assert_int_equal(conf->max_request_bytes, 1048576);
	assert_int_equal(conf->ngres_map, 0);
	assert_int_equal(conf->socket_gid, (gid_t)-1);
	conf_destroy(conf);
}

static void test_full(void **state)
{
	struct conf *conf;

	write_conf("# a comment\n"
		   "socket_path = \"/tmp/x.sock\";\n"
		   "socket_mode = \"0600\";\n"
		   "slurm_user = \"root\";\n"
		   "budget_s = 2;\n"
		   "replan_horizon_s = 90.5;\n"
		   "workers = 3;\n"
		   "log_level = \"debug\";\n"
		   "gres_map = ( { gres = \"a100_40g\"; gpu = \"a100-40\"; },\n"
		   "             { gres = \"h100\"; gpu = \"h100\"; } );\n"
		   "node_map = ( { nodes = \"gpu0*\"; gpu = \"h100\"; } );\n");
	assert_int_equal(conf_create(conf_path, &conf), 0);
	assert_string_equal(conf->socket_path, "/tmp/x.sock");
	assert_int_equal(conf->socket_mode, 0600);
	assert_int_equal(conf->slurm_uid, 0);
	assert_true(conf->budget_s == 2.0);
	assert_true(conf->replan_horizon_s == 90.5);
	assert_int_equal(conf->workers, 3);
	assert_int_equal(conf->log_level, LOG_DEBUG);
	assert_int_equal(conf->ngres_map, 2);
	assert_string_equal(conf_map_gres(conf, "a100_40g"), "a100-40");
	assert_null(conf_map_gres(conf, "a100"));
	assert_string_equal(conf_map_node(conf, "gpu017"), "h100");
	assert_null(conf_map_node(conf, "cpu017"));
	conf_destroy(conf);
}

/*
 * The site check at start: a node_map rule that gives only the network
 * (slurm-examples/plannerd.conf has one) names no GPU profile to look for.
 */
static void test_site_check_network_rule(void **state)
{
	struct conf *conf;

	write_conf("profiles_dir = \"" AR_SRC_PROFILES_DIR "\";\n"
		   "slurm_user = \"root\";\n"
		   "gres_map = ( { gres = \"a100_40g\"; gpu = \"a100-40\"; } );\n"
		   "node_map = ( { nodes = \"ws*\"; gpu = \"a6000\"; },\n"
		   "             { nodes = \"hgx*\"; nics = 4; nic_gbps = 200.0; } );\n");
	assert_int_equal(conf_create(conf_path, &conf), 0);
	assert_int_equal(conf_check_site(conf), 0);
	conf_destroy(conf);
	write_conf("profiles_dir = \"" AR_SRC_PROFILES_DIR "\";\n"
		   "slurm_user = \"root\";\n"
		   "node_map = ( { nodes = \"hgx*\"; nic_gbps = 200.0; },\n"
		   "             { nodes = \"ws*\"; gpu = \"tpu\"; } );\n");
	assert_int_equal(conf_create(conf_path, &conf), 0);
	assert_int_equal(conf_check_site(conf), -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "unknown GPU \"tpu\""));
	conf_destroy(conf);
}

static void test_errors(void **state)
{
	expect_conf_error("budget_s = 1;\nsocket_pth = \"/x\";\n", 2,
			  "socket_pth: unknown directive");
	expect_conf_error("\n\nbudget_s = \"fast\";\n", 3,
			  "budget_s: expected a number");
	expect_conf_error("budget_s = -1.0;\n", 1, "outside");
	expect_conf_error("workers = 1.5;\n", 1, "workers: expected an integer");
	expect_conf_error("workers = 100000;\n", 1, "outside [0, 1024]");
	expect_conf_error("socket_mode = \"rw\";\n", 1, "not an octal mode");
	expect_conf_error("socket_mode = 0660;\n", 1, "expected a quoted string");
	expect_conf_error("state_dir = \"relative/dir\";\n", 1,
			  "not an absolute path");
	expect_conf_error("log_level = \"loud\";\n", 1, "not one of");
	expect_conf_error("gres_map = \"a100\";\n", 1, "expected a list");
	expect_conf_error("gres_map = ( { gres = \"a\"; } );\n", 1,
			  "needs a non-empty string \"gpu\"");
	expect_conf_error("node_map = (\n { nodes = \"a\"; gpu = \"b\"; colour = \"c\"; } );\n",
			  2, "unknown member \"colour\"");
	expect_conf_error("budget_s = 1;\nplanner = = \"x\";\n", 2, "syntax error");
	/* libconfig 1.5 reads an integer without L into 32 bits: these were
	 * 1 and 0.  Strings and comments that hold big numbers are fine. */
	expect_conf_error("# 99999999999\nplanner = \"4294967297\";\nworkers = 4294967297;\n",
			  3, "4294967297 is out of range");
	expect_conf_error("cache_entries = 0x100000000;\n", 1, "0x100000000 is out of range");
	expect_conf_error("cache_entries = 4294967296L;\n", 1, "outside [0, 16777216]");
	expect_conf_error("/* 1\n2 */ @include \"/etc/passwd\"\n", 2,
			  "@include is not supported");
}

/* Bounded reads: no FIFO, no device, no file beyond 1 MiB. */
static void test_bounded_reads(void **state)
{
	char fifo[] = "/tmp/plannerd-conf-fifo.XXXXXX";
	struct conf *conf;
	FILE *f;
	int fd;

	assert_int_equal(conf_create("/dev/zero", &conf), -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "is a character device"));
	fd = mkstemp(fifo);
	assert_true(fd >= 0);
	close(fd);
	unlink(fifo);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	assert_int_equal(conf_create(fifo, &conf), -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "is a FIFO"));
	unlink(fifo);

	/* A 10 MB comment line took libconfig 32 s. */
	f = fopen(conf_path, "w");
	assert_non_null(f);
	fputc('#', f);
	for (int i = 0; i < 10 << 20; i++)
		fputc('x', f);
	fputs("\nworkers = 2;\n", f);
	fclose(f);
	assert_int_equal(conf_create(conf_path, &conf), -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "more than the limit of 1048576"));

	/* A byte-order mark is skipped, not reported as a stray character. */
	write_conf("\xef\xbb\xbfworkers = 3;\n");
	assert_int_equal(conf_create(conf_path, &conf), 0);
	assert_int_equal(conf->workers, 3);
	conf_destroy(conf);
}

static void test_unknown_user(void **state)
{
	struct conf *conf;

	write_conf("slurm_user = \"no-such-user-here\";\n");
	assert_int_equal(conf_create(conf_path, &conf), -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "no user \"no-such-user-here\""));
	write_conf("socket_group = \"no-such-group-here\";\n");
	assert_int_equal(conf_create(conf_path, &conf), -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "no group"));
}

static void test_missing_file(void **state)
{
	struct conf *conf;

	assert_int_equal(conf_create("/nonexistent/plannerd.conf", &conf),
			 -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "/nonexistent/plannerd.conf: cannot read"));
}

/* What --show-config prints reads back as the same configuration. */
static void test_show_config_round_trip(void **state)
{
	struct conf *a, *b;
	char *text = NULL;
	size_t len = 0;
	FILE *f;

	write_conf("budget_s = 0.25;\nsocket_mode = \"0640\";\nslurm_user = \"root\";\n"
		   "gres_map = ( { gres = \"x\\\"y\"; gpu = \"z\"; } );\n");
	assert_int_equal(conf_create(conf_path, &a), 0);
	f = open_memstream(&text, &len);
	conf_print(a, f);
	fclose(f);
	write_conf(text);
	free(text);
	assert_int_equal(conf_create(conf_path, &b), 0);
	assert_true(a->budget_s == b->budget_s);
	assert_int_equal(a->socket_mode, b->socket_mode);
	assert_string_equal(a->socket_path, b->socket_path);
	assert_string_equal(a->gres_map[0].match, "x\"y");
	assert_string_equal(b->gres_map[0].match, "x\"y");
	assert_int_equal(a->log_level, b->log_level);
	conf_destroy(a);
	conf_destroy(b);
}

/* The man page list has one paragraph per directive of the table. */
static void test_directives(void **state)
{
	char *text = NULL;
	size_t len = 0, n = 0;
	FILE *f = open_memstream(&text, &len);

	conf_print_directives(f);
	fclose(f);
	for (char *p = text; (p = strstr(p, ".TP\n")); p++)
		n++;
	assert_int_equal(n, 22);
	assert_non_null(strstr(text, "\\fBbudget_s\\fR = \\fInumber\\fR (default: \\fB10\\fR)"));
	assert_non_null(strstr(text, "\\fBnode_map\\fR = \\fIlist\\fR\n"));
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_full),
		cmocka_unit_test(test_site_check_network_rule),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_unknown_user),
		cmocka_unit_test(test_missing_file),
		cmocka_unit_test(test_bounded_reads),
		cmocka_unit_test(test_show_config_round_trip),
		cmocka_unit_test(test_directives),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
