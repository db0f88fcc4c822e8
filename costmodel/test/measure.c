/*
 * measure.c - arachne-profile measure on this machine's GPU: the measured
 * entries of GPT-Neo-2.7B at TP 1 must exist, be positive, and land
 * within a factor of four of the analytic model.  Without CUDA in the
 * build, or without a device, the test skips and says why.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define AR_INTERNAL
#include "ar.h"
#include "costmodel.h"
#include "measure.h"
#include "synth.h"

static void test_measure_gpt_neo(void **state)
{
	struct measure_opts opts = {
		.iters = 5, .warmup = 2, .tp_mask = 1, .mbs_mask = 0x3,
	};
	struct costmodel_opts copts = { .no_layer_profiles = true };
	struct costmodel_layer_profile s;
	struct costmodel *cm = NULL;
	char *buf = NULL, *at;
	size_t len = 0;
	FILE *f;
	int rc, g;

	(void)state;
	copts.profiles_dir = getenv("AR_PROFILES");
	if (costmodel_load("gpt-neo-2.7b", &copts, &cm) < 0)
		fail_msg("%s", ar_errmsg());
	g = costmodel_gpu_find(cm, "h100");
	assert_true(g >= 0);
	f = open_memstream(&buf, &len);
	assert_non_null(f);
	rc = measure_run(cm, g, &opts, f);
	fclose(f);
	if (rc == -ENODEV || rc == -AR_ENOTBUILT) {
		free(buf);
		costmodel_destroy(cm);
		skip();
	}
	if (rc < 0)
		fail_msg("measure: %s", ar_errmsg());
	assert_non_null(strstr(buf, "source = measured\n"));
	at = strstr(buf, "[tp1.mbs2.block]\nfwd_ms = ");
	assert_non_null(at);
	assert_int_equal(costmodel_synth_layer(costmodel_model(cm),
					       costmodel_gpu(cm, g), 1, 2,
					       COSTMODEL_LAYER_BLOCK, &s), 0);
	{
		double fwd = strtod(at + strlen("[tp1.mbs2.block]\nfwd_ms = "),
				    NULL);

		print_message("# measured block fwd %.4f ms, analytic %.4f ms\n",
			      fwd, s.fwd_ms);
		assert_true(fwd > s.fwd_ms / 4 && fwd < s.fwd_ms * 4);
	}
	free(buf);
	costmodel_destroy(cm);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_measure_gpt_neo),
	};
	int ndev = 0;

	if (measure_probe(&ndev) < 0) {
		printf("1..0 # SKIP %s\n", ar_errmsg());
		return 0;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
