/*
 * conf-fuzz.c - libFuzzer target for the plannerd.conf parser: whatever
 * bytes the file holds, conf_create() returns a configuration or an
 * error, and a configuration it returns prints, without a crash, a leak
 * or undefined behaviour.
 */
#include "config.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "ar.h"
#include "conf.h"
#include "fuzz.h"

static char fuzz_path[PATH_MAX];
static FILE *fuzz_null;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct conf *conf;

	if (!fuzz_path[0]) {
		snprintf(fuzz_path, sizeof(fuzz_path), "%s/plannerd.conf",
			 fuzz_scratch_dir());
		fuzz_null = fopen("/dev/null", "w");
		if (!fuzz_null)
			abort();
	}
	fuzz_write(fuzz_path, data, size);
	if (conf_create(fuzz_path, &conf) == 0) {
		conf_print(conf, fuzz_null);
		conf_destroy(conf);
	}
	return 0;
}
