/* Hostlist expansion: Slurm syntax, zero padding, and refusals. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "ar.h"

static void expands_ranges_with_padding(void **state)
{
	char **h;
	size_t n;

	assert_int_equal(ar_hostlist_expand("gpu[008-010,012],login", &h, &n), 0);
	assert_int_equal(n, 5);
	assert_string_equal(h[0], "gpu008");
	assert_string_equal(h[2], "gpu010");
	assert_string_equal(h[3], "gpu012");
	assert_string_equal(h[4], "login");
	assert_null(h[5]);
	ar_hostlist_free(h);
}

static void keeps_suffix(void **state)
{
	char **h;
	size_t n;

	assert_int_equal(ar_hostlist_expand("n[1-2]-ib", &h, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(h[1], "n2-ib");
	ar_hostlist_free(h);
}

static void refuses_malformed(void **state)
{
	static const char *const bad[] = {
		"", "gpu[1-", "gpu[3-1]", "gpu]", "a,,b", "a,", "gpu[a-b]",
		"gpu[1-2][3]", "gp u1", "gpu[1-2000000]",
		/* found by plannerd's fuzzer: strtoul saturated, the loop wrapped */
		"n[1,30000000000000000000001]", "n[18446744073709551615]",
		"n[1-99999999999]",
	};
	char **h;
	size_t n;

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		assert_int_equal(ar_hostlist_expand(bad[i], &h, &n), -AR_EINVAL);
		assert_null(h);
		assert_non_null(strstr(ar_errmsg(), "hostlist"));
	}
}

/* The bound is counted before names are made: 65536 hosts, not one more. */
static void bounds_the_host_count(void **state)
{
	char **h;
	size_t n;

	(void)state;
	assert_int_equal(ar_hostlist_expand("n[00001-65536]", &h, &n), 0);
	assert_int_equal(n, AR_LIMIT_HOSTS);
	assert_string_equal(h[n - 1], "n65536");
	ar_hostlist_free(h);
	assert_int_equal(ar_hostlist_expand("n[00001-65536],x", &h, &n), -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "more than 65536 hosts"));
	assert_int_equal(ar_hostlist_expand("n[1-65536],m[1-2]", &h, &n), -AR_EINVAL);
	assert_int_equal(ar_hostlist_expand("n[0000000-0999999]", &h, &n), -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "names more than 65536 hosts"));
	assert_null(h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(expands_ranges_with_padding),
		cmocka_unit_test(keeps_suffix),
		cmocka_unit_test(refuses_malformed),
		cmocka_unit_test(bounds_the_host_count),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
