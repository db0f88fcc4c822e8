/*
 * shipped.c - the profile data in profiles/ ($AR_PROFILES): every GPU and
 * model file loads and gives each number a source comment, every layer
 * file parses and is exactly what `arachne-profile synth` writes now (a
 * stale file fails: rerun `arachne-profile synth --all --profiles
 * profiles`), and every model has a layer file for every GPU type.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ar.h"
#include "costmodel.h"
#include "synth.h"

static const char *profiles_dir(void)
{
	const char *d = getenv("AR_PROFILES");

	return d && *d ? d : AR_SRC_PROFILES_DIR;
}

/* The names (without .ini) in @sub, sorted; NULL-terminated. */
static char **list_ini(const char *sub, size_t *np)
{
	char path[PATH_MAX];
	char **names = NULL;
	struct dirent *de;
	size_t n = 0;
	DIR *dp;

	snprintf(path, sizeof(path), "%s/%s", profiles_dir(), sub);
	dp = opendir(path);
	if (!dp)
		fail_msg("%s: %s", path, strerror(errno));
	while ((de = readdir(dp))) {
		size_t len = strlen(de->d_name);

		if (len <= 4 || strcmp(de->d_name + len - 4, ".ini") ||
		    strstr(de->d_name, ".measured."))
			continue;
		names = realloc(names, (n + 2) * sizeof(*names));
		assert_non_null(names);
		names[n++] = strndup(de->d_name, len - 4);
		names[n] = NULL;
	}
	closedir(dp);
	for (size_t i = 0; i + 1 < n; i++)
		for (size_t j = i + 1; j < n; j++)
			if (strcmp(names[i], names[j]) > 0) {
				char *t = names[i];

				names[i] = names[j];
				names[j] = t;
			}
	*np = n;
	return names;
}

static void free_names(char **names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long len;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)len + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
	buf[len] = '\0';
	fclose(f);
	return buf;
}

/* Every "key = value" line but the name carries a "; source" comment. */
static void check_sources(const char *sub, const char *name)
{
	char path[PATH_MAX], line[1024];
	FILE *f;
	int lineno = 0;

	snprintf(path, sizeof(path), "%s/%s/%s.ini", profiles_dir(), sub,
		 name);
	f = fopen(path, "r");
	if (!f)
		fail_msg("%s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		if (line[0] == ';' || line[0] == '[' || !strchr(line, '=') ||
		    strncmp(line, "name ", 5) == 0)
			continue;
		if (!strchr(line, ';'))
			fail_msg("%s:%d: a value without its source comment",
				 path, lineno);
	}
	fclose(f);
}

static void test_gpu_and_model_files(void **state)
{
	size_t nm, ng;
	char **models = list_ini("models", &nm);
	char **gpus = list_ini("gpus", &ng);
	static const char *const required_gpus[] = {
		"a100-40", "a100-80", "h100", "h200", "a6000", "a5000",
		"rtx-pro-6000", "l40s", NULL,
	};
	static const char *const required_models[] = {
		"llama3-8b", "qwen3-32b", "qwen3-64b", "gpt-neo-2.7b",
		"mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3-like", NULL,
	};
	struct costmodel_opts opts = {
		.profiles_dir = profiles_dir(), .no_layer_profiles = true,
	};

	(void)state;
	for (size_t i = 0; i < nm; i++)
		check_sources("models", models[i]);
	for (size_t i = 0; i < ng; i++)
		check_sources("gpus", gpus[i]);
	for (int i = 0; required_models[i]; i++) {
		struct costmodel *cm = NULL;

		if (costmodel_load(required_models[i], &opts, &cm) < 0)
			fail_msg("%s: %s", required_models[i], ar_errmsg());
		for (int j = 0; required_gpus[j]; j++)
			if (costmodel_gpu_find(cm, required_gpus[j]) < 0)
				fail_msg("GPU profile %s is missing",
					 required_gpus[j]);
		costmodel_destroy(cm);
	}
	free_names(models, nm);
	free_names(gpus, ng);
}

/* The paper's DeepSeek-V3-like model: 168 GB of expert state per layer. */
static void test_deepseek_expert_state(void **state)
{
	struct costmodel_opts opts = { .profiles_dir = profiles_dir() };
	const struct costmodel_layer_profile *p;
	struct costmodel *cm = NULL;
	int g;

	(void)state;
	if (costmodel_load("deepseek-v3-like", &opts, &cm) < 0)
		fail_msg("%s", ar_errmsg());
	g = costmodel_gpu_find(cm, "h100");
	assert_true(g >= 0);
	p = costmodel_profile(cm, g, 1, 1, COSTMODEL_LAYER_EXPERT);
	assert_non_null(p);
	/* The paper's 168 GB counts 16 bytes a parameter (BF16 gradients);
	 * the model's FP32 gradients make it 18, 189 GiB. */
	assert_true(fabs(p->param_bytes / 2 * 16 / GIB - 168.0) < 0.5);
	assert_true(fabs(p->param_bytes / 2 *
			 costmodel_model(cm)->state_bytes_per_param /
			 GIB - 189.0) < 0.5);
	costmodel_destroy(cm);
}

static bool near(double a, double b)
{
	return fabs(a - b) <= 1e-5 * fabs(b);
}

/* The loaded entry (@tp, @mbs, @type) of GPU @g is synth's, or both lack it. */
static void check_entry(const struct costmodel *cm, int g, const char *path,
			int tp, int mbs, int type)
{
	const struct costmodel_layer_profile *p;
	struct costmodel_layer_profile s;
	const char *name = costmodel_synth_type_name(type);
	int rc;

	p = costmodel_profile(cm, g, tp, mbs, type);
	rc = costmodel_synth_layer(costmodel_model(cm), costmodel_gpu(cm, g),
				   tp, mbs, type, &s);
	if (rc < 0) {
		if (p && !p->measured)
			fail_msg("%s: tp%d.mbs%d.%s should not exist", path,
				 tp, mbs, name);
		return;
	}
	if (!p)
		fail_msg("%s: tp%d.mbs%d.%s missing", path, tp, mbs, name);
	if (p->measured)
		return;
	if (!near(p->fwd_ms, s.fwd_ms) || !near(p->bwd_ms, s.bwd_ms) ||
	    !near(p->comm_ms, s.comm_ms) ||
	    fabs(p->act_bytes - s.act_bytes) > 0.5 ||
	    fabs(p->param_bytes - s.param_bytes) > 0.5)
		fail_msg("%s: tp%d.mbs%d.%s loads as different numbers", path,
			 tp, mbs, name);
}

/* One model: each GPU's file is what synth writes, and it loads. */
static void check_model_layers(const char *model)
{
	struct costmodel_opts opts = { .profiles_dir = profiles_dir() };
	struct costmodel *cm = NULL;
	int g;

	if (costmodel_load(model, &opts, &cm) < 0)
		fail_msg("%s: %s", model, ar_errmsg());
	for (g = 0; g < costmodel_num_gpus(cm); g++) {
		const struct costmodel_gpu *gpu = costmodel_gpu(cm, g);
		char path[PATH_MAX];
		char *want = NULL, *have;
		size_t len = 0;
		FILE *f;

		snprintf(path, sizeof(path), "%s/layers/%s/%s.ini",
			 profiles_dir(), model, gpu->name);
		have = slurp(path);
		if (!have)
			fail_msg("%s: %s (run arachne-profile synth --all)",
				 path, strerror(errno));
		f = open_memstream(&want, &len);
		assert_non_null(f);
		assert_int_equal(costmodel_synth_profile(cm, g, f), 0);
		fclose(f);
		if (strcmp(want, have) != 0)
			fail_msg("%s is stale: it is not what arachne-profile synth writes now (run arachne-profile synth --all --profiles profiles)",
				 path);
		free(want);
		free(have);

		/* What the loader read matches synth, entry by entry. */
		for (int tp = 1; tp <= 8; tp *= 2)
			for (int mbs = 1; mbs <= 16; mbs *= 2)
				for (int t = 0; t < COSTMODEL_NUM_LAYER_TYPES;
				     t++)
					check_entry(cm, g, path, tp, mbs, t);
	}
	costmodel_destroy(cm);
}

static void test_layer_files(void **state)
{
	size_t nm;
	char **models = list_ini("models", &nm);

	(void)state;
	assert_true(nm >= 7);
	for (size_t i = 0; i < nm; i++)
		check_model_layers(models[i]);
	free_names(models, nm);
}

/* Every cluster file loads; the number in its name is its GPU count. */
static void test_cluster_files(void **state)
{
	static const int ls_total[] = { 52, 104, 208, 312, 416 };
	struct costmodel_opts opts = {
		.profiles_dir = profiles_dir(), .no_layer_profiles = true,
	};
	struct costmodel *cm = NULL;
	char dir[PATH_MAX], path[PATH_MAX * 2];
	struct dirent *de;
	DIR *dp;
	int nfiles = 0;

	(void)state;
	if (costmodel_load("llama3-8b", &opts, &cm) < 0)
		fail_msg("%s", ar_errmsg());
	snprintf(dir, sizeof(dir), "%s/clusters", profiles_dir());
	dp = opendir(dir);
	assert_non_null(dp);
	while ((de = readdir(dp))) {
		struct costmodel_cluster *cl = NULL;
		size_t len = strlen(de->d_name);
		const char *dash;
		int total, ls;

		if (len <= 5 || strcmp(de->d_name + len - 5, ".json"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (costmodel_cluster_load(cm, path, &cl) < 0)
			fail_msg("%s: %s", path, ar_errmsg());
		total = costmodel_cluster_total_gpus(cl);
		dash = strrchr(de->d_name, '-');
		if (sscanf(de->d_name, "ls%d.json", &ls) == 1) {
			assert_true(ls >= 1 && ls <= 5);
			if (total != ls_total[ls - 1])
				fail_msg("%s: %d GPUs, expected %d", path,
					 total, ls_total[ls - 1]);
		} else if (dash && atoi(dash + 1) > 0 &&
			   total != atoi(dash + 1)) {
			fail_msg("%s: %d GPUs, its name says %d", path, total,
				 atoi(dash + 1));
		}
		costmodel_cluster_free(cl);
		nfiles++;
	}
	closedir(dp);
	assert_true(nfiles >= 29);
	costmodel_destroy(cm);
}

/* profiles/Makefile.am lists every data file, so that dist ships it. */
static void test_makefile_lists_everything(void **state)
{
	static const char *const subs[] = {
		"gpus", "models", "clusters", NULL,
	};
	char path[PATH_MAX * 2], want[PATH_MAX * 2];
	char *am, **models;
	size_t nm;

	(void)state;
	snprintf(path, sizeof(path), "%s/Makefile.am", profiles_dir());
	am = slurp(path);
	if (!am)
		fail_msg("%s: %s", path, strerror(errno));
	for (int i = 0; subs[i]; i++) {
		struct dirent *de;
		DIR *dp;

		snprintf(path, sizeof(path), "%s/%s", profiles_dir(), subs[i]);
		dp = opendir(path);
		assert_non_null(dp);
		while ((de = readdir(dp))) {
			if (de->d_name[0] == '.')
				continue;
			snprintf(want, sizeof(want), "\t%s/%s \\\n", subs[i],
				 de->d_name);
			if (!strstr(am, want))
				fail_msg("profiles/Makefile.am does not list %s/%s",
					 subs[i], de->d_name);
		}
		closedir(dp);
	}
	models = list_ini("models", &nm);
	for (size_t i = 0; i < nm; i++) {
		size_t ng;
		char **gpus;

		snprintf(path, sizeof(path), "layers/%s", models[i]);
		gpus = list_ini(path, &ng);
		for (size_t j = 0; j < ng; j++) {
			snprintf(want, sizeof(want), "\tlayers/%s/%s.ini \\\n",
				 models[i], gpus[j]);
			if (!strstr(am, want))
				fail_msg("profiles/Makefile.am does not list layers/%s/%s.ini",
					 models[i], gpus[j]);
		}
		free_names(gpus, ng);
	}
	free_names(models, nm);
	free(am);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gpu_and_model_files),
		cmocka_unit_test(test_deepseek_expert_state),
		cmocka_unit_test(test_layer_files),
		cmocka_unit_test(test_cluster_files),
		cmocka_unit_test(test_makefile_lists_everything),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
