/*
 * profile-fuzz.c - libFuzzer target for the INI profiles: the first byte
 * of an input picks the GPU, the model or the layer profile of a private
 * copy of gpt-tiny on h100, the rest replaces that file, and
 * costmodel_load() must load the set or refuse it, without a crash, a
 * leak or undefined behaviour.  The file is put back after each input, so
 * the other two stay valid and the loader gets past them.
 */
#include "config.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "ar.h"
#include "costmodel.h"
#include "fuzz.h"

#define FUZZ_NFILES 3

static const char *const fuzz_files[FUZZ_NFILES] = {
	"gpus/h100.ini",
	"models/gpt-tiny.ini",
	"layers/gpt-tiny/h100.ini",
};

static struct {
	char path[PATH_MAX];
	char *text;
	size_t len;
} fuzz_orig[FUZZ_NFILES];

static void fuzz_mkdir(const char *dir, const char *sub)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", dir, sub);
	if (mkdir(path, 0700) < 0)
		abort();
}

static void fuzz_init(void)
{
	const char *dir = fuzz_scratch_dir();

	fuzz_mkdir(dir, "gpus");
	fuzz_mkdir(dir, "models");
	fuzz_mkdir(dir, "layers");
	fuzz_mkdir(dir, "layers/gpt-tiny");
	for (int i = 0; i < FUZZ_NFILES; i++) {
		char src[PATH_MAX];

		snprintf(src, sizeof(src), "%s/%s", fuzz_profiles_dir(),
			 fuzz_files[i]);
		if (ar_file_read(src, AR_LIMIT_INI_BYTES, &fuzz_orig[i].text,
				 &fuzz_orig[i].len) < 0)
			abort();
		snprintf(fuzz_orig[i].path, sizeof(fuzz_orig[i].path), "%s/%s",
			 dir, fuzz_files[i]);
		fuzz_write(fuzz_orig[i].path, fuzz_orig[i].text,
			   fuzz_orig[i].len);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct costmodel_opts opts = { 0 };
	struct costmodel *cm;
	int i;

	if (!fuzz_orig[0].text)
		fuzz_init();
	if (size < 1)
		return 0;
	i = data[0] % FUZZ_NFILES;
	fuzz_write(fuzz_orig[i].path, data + 1, size - 1);
	opts.profiles_dir = fuzz_scratch_dir();
	if (costmodel_load("gpt-tiny", &opts, &cm) == 0)
		costmodel_destroy(cm);
	fuzz_write(fuzz_orig[i].path, fuzz_orig[i].text, fuzz_orig[i].len);
	return 0;
}
