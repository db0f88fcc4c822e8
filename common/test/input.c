/*
 * The input validation layer: bounded reads of regular files only,
 * 64-bit range-checked integers, finite numbers, and -o output files that
 * never replace a link, a FIFO or a device.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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

static char dir[64];

static int make_dir(void **state)
{
	(void)state;
	strcpy(dir, "/tmp/ar-input.XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int remove_dir(void **state)
{
	char cmd[128];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static const char *in_dir(const char *name)
{
	static char path[2][128];
	static int k;

	k ^= 1;
	snprintf(path[k], sizeof(path[k]), "%s/%s", dir, name);
	return path[k];
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static void expect_msg(const char *want)
{
	if (!strstr(ar_errmsg(), want))
		fail_msg("message \"%s\" does not mention \"%s\"", ar_errmsg(), want);
}

static void reads_regular_files_within_the_limit(void **state)
{
	char *buf;
	size_t len;

	(void)state;
	write_text(in_dir("ten"), "0123456789");
	assert_int_equal(ar_file_read(in_dir("ten"), 10, &buf, &len), 0);
	assert_int_equal(len, 10);
	assert_string_equal(buf, "0123456789");
	free(buf);

	assert_int_equal(ar_file_read(in_dir("ten"), 9, &buf, &len), -AR_EINVAL);
	assert_null(buf);
	expect_msg("10 bytes, more than the limit of 9");

	assert_int_equal(ar_file_read(in_dir("none"), 9, &buf, &len), -ENOENT);
	expect_msg("No such file");
}

/* A FIFO with no writer would block a reader forever: refused at once. */
static void refuses_fifos_and_directories(void **state)
{
	char *buf;
	size_t len;

	(void)state;
	assert_int_equal(mkfifo(in_dir("fifo"), 0600), 0);
	assert_int_equal(ar_file_read(in_dir("fifo"), 100, &buf, &len), -AR_EINVAL);
	expect_msg("is a FIFO, not a regular file");
	assert_int_equal(ar_file_read(dir, 100, &buf, &len), -AR_EINVAL);
	expect_msg("is a directory");
	assert_int_equal(ar_file_read("/dev/zero", 100, &buf, &len), -AR_EINVAL);
	expect_msg("is a character device");
}

static void skips_a_bom_in_json(void **state)
{
	json_t *root;

	(void)state;
	write_text(in_dir("bom.json"), "\xef\xbb\xbf{\"a\": 1}");
	root = ar_json_load_file(in_dir("bom.json"));
	assert_non_null(root);
	assert_int_equal(json_integer_value(json_object_get(root, "a")), 1);
	json_decref(root);
	assert_null(ar_json_load_file_max(in_dir("bom.json"), 5));
	expect_msg("more than the limit of 5");
}

static void parses_64_bit_integers_before_narrowing(void **state)
{
	int64_t v = -1;

	(void)state;
	assert_int_equal(ar_parse_int64("42", "x", 0, 100, &v), 0);
	assert_int_equal(v, 42);
	/* 2^32 + 1 would be 1 in 32 bits. */
	assert_int_equal(ar_parse_int64("4294967297", "workers", 0, 1024, &v), -AR_EINVAL);
	expect_msg("workers = 4294967297 is out of range [0, 1024]");
	assert_int_equal(ar_parse_int64("99999999999999999999", "x", 0, 1, &v), -AR_EINVAL);
	expect_msg("out of range");
	assert_int_equal(ar_parse_int64("1.5", "x", 0, 10, &v), -AR_EINVAL);
	expect_msg("x = \"1.5\" is not an integer");
	assert_int_equal(ar_parse_int64("", "x", 0, 10, &v), -AR_EINVAL);
	assert_int_equal(ar_parse_int64("7 ", "x", 0, 10, &v), -AR_EINVAL);
	assert_int_equal(v, 42);
}

static void parses_finite_numbers(void **state)
{
	double v = -1;

	(void)state;
	assert_int_equal(ar_parse_double("2.5", "x", 0, 10, &v), 0);
	assert_true(v == 2.5);
	assert_int_equal(ar_parse_double("1e999", "x", 0, 10, &v), -AR_EINVAL);
	expect_msg("is not a number");
	assert_int_equal(ar_parse_double("nan", "x", 0, 10, &v), -AR_EINVAL);
	assert_int_equal(ar_parse_double("1e-400", "x", 0.1, 10, &v), -AR_EINVAL);
	expect_msg("out of range");
	assert_int_equal(ar_parse_double("1e-400", "x", 0, 10, &v), 0);
	assert_true(v == 0);
}

static void reads_json_members_in_range(void **state)
{
	json_t *o = json_pack("{s:I, s:s, s:f, s:i}", "big", (json_int_t)4294967296LL,
			      "str", "x", "real", 1.5, "ok", 7);
	int64_t v64 = 0;
	int v = -1;
	double d = 0;

	(void)state;
	assert_int_equal(ar_json_int(o, "ok", "obj", 1, 8, true, &v), 0);
	assert_int_equal(v, 7);
	assert_int_equal(ar_json_int(o, "big", "obj", 0, INT_MAX, true, &v), -AR_EINVAL);
	expect_msg("obj: \"big\" must be an integer from 0 to 2147483647, not 4294967296");
	assert_int_equal(v, 7);
	assert_int_equal(ar_json_int64(o, "big", "obj", 0, INT64_MAX, true, &v64), 0);
	assert_true(v64 == 4294967296LL);
	assert_int_equal(ar_json_int(o, "str", "obj", 0, 9, true, &v), -AR_EINVAL);
	assert_int_equal(ar_json_int(o, "real", "obj", 0, 9, true, &v), -AR_EINVAL);
	assert_int_equal(ar_json_int(o, "absent", "obj", 0, 9, false, &v), 0);
	assert_int_equal(v, 7);
	assert_int_equal(ar_json_int(o, "absent", "obj", 0, 9, true, &v), -AR_EINVAL);
	expect_msg("obj: \"absent\" is missing");
	assert_int_equal(ar_json_number(o, "real", "obj", 0, 2, true, &d), 0);
	assert_true(d == 1.5);
	assert_int_equal(ar_json_number(o, "real", "obj", 2, 3, true, &d), -AR_EINVAL);
	expect_msg("must be a number from 2 to 3, not 1.5");
	json_decref(o);
}

static void checks_products_for_overflow(void **state)
{
	int64_t r = 5;

	(void)state;
	assert_true(ar_mul_i64(65536, 65536, &r));
	assert_true(r == 4294967296LL);
	assert_false(ar_mul_i64(INT64_MAX / 2 + 1, 2, &r));
	assert_true(r == 4294967296LL);
	assert_false(ar_add_i64(INT64_MAX, 1, &r));
	assert_true(ar_add_i64(-3, 1, &r));
	assert_true(r == -2);
}

static void output_writes_through_links_and_refuses_devices(void **state)
{
	char target[PATH_MAX], text[16] = { 0 };
	struct stat sb;
	int fd;

	(void)state;
	write_text(in_dir("target"), "old");
	assert_int_equal(symlink("target", in_dir("link")), 0);
	assert_int_equal(ar_file_write_output(in_dir("link"), "new", 3, 0644), 0);
	/* The link is still a link; its target has the new text. */
	assert_int_equal(lstat(in_dir("link"), &sb), 0);
	assert_true(S_ISLNK(sb.st_mode));
	assert_non_null(realpath(in_dir("target"), target));
	fd = open(target, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(read(fd, text, sizeof(text) - 1), 3);
	close(fd);
	assert_string_equal(text, "new");

	assert_int_equal(mkfifo(in_dir("out-fifo"), 0600), 0);
	assert_int_equal(ar_file_write_output(in_dir("out-fifo"), "x", 1, 0644), -AR_EINVAL);
	expect_msg("is a FIFO; an output file must be a regular file");
	assert_int_equal(lstat(in_dir("out-fifo"), &sb), 0);
	assert_true(S_ISFIFO(sb.st_mode));

	assert_int_equal(symlink("/dev/null", in_dir("to-null")), 0);
	assert_int_equal(ar_file_write_output(in_dir("to-null"), "x", 1, 0644), -AR_EINVAL);
	expect_msg("is a character device");
	assert_int_equal(stat("/dev/null", &sb), 0);
	assert_true(S_ISCHR(sb.st_mode));

	assert_int_equal(ar_file_write_output(dir, "x", 1, 0644), -AR_EINVAL);
	expect_msg("is a directory");
	assert_int_equal(ar_file_write_output(in_dir("no/such/dir"), "x", 1, 0644), -ENOENT);
	expect_msg("no/such/dir");

	assert_int_equal(ar_file_write_output(in_dir("plain"), "abc", 3, 0644), 0);
	assert_int_equal(stat(in_dir("plain"), &sb), 0);
	assert_true(S_ISREG(sb.st_mode));
	assert_int_equal(sb.st_size, 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(reads_regular_files_within_the_limit),
		cmocka_unit_test(refuses_fifos_and_directories),
		cmocka_unit_test(skips_a_bom_in_json),
		cmocka_unit_test(parses_64_bit_integers_before_narrowing),
		cmocka_unit_test(parses_finite_numbers),
		cmocka_unit_test(reads_json_members_in_range),
		cmocka_unit_test(checks_products_for_overflow),
		cmocka_unit_test(output_writes_through_links_and_refuses_devices),
	};

	return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
