/* The small helpers of ar.h: AR_GROW(), ARRAY_SIZE(), GIB. */
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

struct pair {
	int a, b;
};

static void grows_by_doubling_from_first(void **state)
{
	struct pair *v = NULL;
	size_t cap = 0, n = 0;

	for (int i = 0; i < 100; i++) {
		assert_int_equal(AR_GROW(v, cap, n + 1, 16), 0);
		v[n++] = (struct pair){ i, -i };
		/* 16, then 32, 64, 128: never more than twice what is used */
		assert_true(cap == 16 || cap < 2 * n);
	}
	assert_int_equal(cap, 128);
	for (int i = 0; i < 100; i++) {
		assert_int_equal(v[i].a, i);
		assert_int_equal(v[i].b, -i);
	}
	free(v);
}

static void grows_past_need_in_one_call(void **state)
{
	char *v = NULL;
	size_t cap = 0;

	assert_int_equal(AR_GROW(v, cap, 1000, 64), 0);
	assert_int_equal(cap, 1024);
	memset(v, 1, 1000);
	/* enough room already: nothing changes */
	assert_int_equal(AR_GROW(v, cap, 1024, 64), 0);
	assert_int_equal(cap, 1024);
	free(v);
}

static void refuses_overflow_unchanged(void **state)
{
	double *v = NULL;
	size_t cap = 0;

	assert_int_equal(AR_GROW(v, cap, 4, 4), 0);
	assert_int_equal(AR_GROW(v, cap, SIZE_MAX / 4, 4), -ENOMEM);
	assert_int_equal(AR_GROW(v, cap, SIZE_MAX, 4), -ENOMEM);
	assert_int_equal(cap, 4);
	assert_non_null(v);
	free(v);
}

static void counts_elements(void **state)
{
	static const char *const names[] = { "a", "b", "c" };
	struct pair pairs[7];
	double d[2][5];

	assert_int_equal(ARRAY_SIZE(names), 3);
	assert_int_equal(ARRAY_SIZE(pairs), 7);
	assert_int_equal(ARRAY_SIZE(d), 2);
	assert_int_equal(ARRAY_SIZE(d[0]), 5);
	assert_true(GIB == 1073741824.0);
	assert_true(MIB * 1024 == GIB);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(grows_by_doubling_from_first),
		cmocka_unit_test(grows_past_need_in_one_call),
		cmocka_unit_test(refuses_overflow_unchanged),
		cmocka_unit_test(counts_elements),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
