/*
 * arachne-profile - write layer profiles: `synth` derives them from FLOPs
 * and bytes (synth.c), `measure` times them on this machine's GPUs
 * (measure.c, built with CUDA).  Both write profiles/layers/MODEL/GPU.ini
 * (GPU.measured.ini for measure) atomically.  See arachne-profile(1).
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define AR_INTERNAL
#include "ar.h"
#include "costmodel.h"
#include "measure.h"
#include "synth.h"

#define EXIT_BAD_INPUT	2

struct profile_args {
	const char *model;
	const char *gpu;
	const char *profiles_dir;
	const char *out_dir;
	bool all_gpus;
	bool all_models;
	bool quiet;
	struct measure_opts measure;
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: arachne-profile synth --model M [--gpu G | --all-gpus] [OPTIONS]\n"
		"       arachne-profile synth --all [OPTIONS]\n"
		"       arachne-profile measure --model M --gpu G [--tp LIST] [--mbs LIST]\n"
		"                               [--iters N] [OPTIONS]\n"
		"Write the layer profiles of a model: synth from FLOPs and bytes,\n"
		"measure by timing cuBLAS GEMMs and NCCL all-reduces on this machine.\n"
		"\n"
		"  -m, --model NAME      a model of PROFILES/models/\n"
		"  -g, --gpu NAME        a GPU type of PROFILES/gpus/\n"
		"      --all-gpus        synth: every GPU type\n"
		"      --all             synth: every model on every GPU type\n"
		"  -p, --profiles DIR    profile data (default $AR_PROFILES, else %s)\n"
		"  -o, --out DIR         write DIR/layers/MODEL/GPU.ini (default: the profiles dir)\n"
		"      --tp LIST         measure: TP degrees, e.g. 1,2,4 (default all that fit)\n"
		"      --mbs LIST        measure: micro-batch sizes (default 1,2,4,8,16)\n"
		"      --iters N         measure: timed repetitions per operation (default 10)\n"
		"  -q, --quiet           print nothing on success\n"
		"  -v, --verbose         measure: one line per timed operation\n"
		"  -h, --help            this text\n"
		"  -V, --version         the version\n"
		"Exit status: 0 success, 1 failure, 2 bad input.\n",
		AR_PROFILES_DIR);
}

/* Parse "1,2,4" into a bit mask of log2 values; -1 on a bad list. */
static int parse_pow2_list(const char *s, int max, unsigned *mask)
{
	char *end;

	*mask = 0;
	while (*s) {
		long v = strtol(s, &end, 10);
		int bit = 0;

		if (end == s || v < 1 || v > max || (v & (v - 1)))
			return -1;
		while ((1L << bit) < v)
			bit++;
		*mask |= 1u << bit;
		if (*end == ',')
			end++;
		else if (*end)
			return -1;
		s = end;
	}
	return *mask ? 0 : -1;
}

static int mkdir_one(const char *path)
{
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		return ar_seterr(-errno, "mkdir %s: %s", path, strerror(errno));
	return 0;
}

/* Write @model's profile on GPU type @gpu to OUT/layers/MODEL/GPU@suffix. */
static int write_profile(const struct profile_args *a,
			 const struct costmodel *cm, int gpu, bool measure)
{
	const char *out_dir = a->out_dir ? a->out_dir :
			      costmodel_profiles_dir(cm);
	const char *model = costmodel_model(cm)->name;
	const char *gname = costmodel_gpu(cm, gpu)->name;
	char path[PATH_MAX];
	char *buf = NULL;
	size_t len = 0;
	FILE *mem;
	int rc;

	if ((rc = mkdir_one(out_dir)) < 0)
		return rc;
	snprintf(path, sizeof(path), "%s/layers", out_dir);
	if ((rc = mkdir_one(path)) < 0)
		return rc;
	snprintf(path, sizeof(path), "%s/layers/%s", out_dir, model);
	if ((rc = mkdir_one(path)) < 0)
		return rc;
	if (snprintf(path, sizeof(path), "%s/layers/%s/%s%s", out_dir, model,
		     gname, measure ? ".measured.ini" : ".ini") >=
	    (int)sizeof(path))
		return ar_seterr(-ENAMETOOLONG, "%s: output path too long",
				 out_dir);

	mem = open_memstream(&buf, &len);
	if (!mem)
		return -errno;
	if (measure)
		rc = measure_run(cm, gpu, &a->measure, mem);
	else
		rc = costmodel_synth_profile(cm, gpu, mem);
	if (fclose(mem) != 0 && rc == 0)
		rc = ar_seterr(-EIO, "%s: %s", path, strerror(errno));
	if (rc == 0) {
		rc = ar_file_write_output(path, buf, len, 0644);
		if (rc < 0 && !*ar_errmsg())
			ar_seterr(rc, "%s: %s", path, ar_strerror(rc));
	}
	free(buf);
	if (rc == 0 && !a->quiet)
		printf("%s\n", path);
	return rc;
}

static int load_model(const struct profile_args *a, const char *model,
		      struct costmodel **cmp)
{
	struct costmodel_opts opts = {
		.profiles_dir = a->profiles_dir,
		.no_layer_profiles = true,
	};

	return costmodel_load(model, &opts, cmp);
}

/* synth or measure of one model on the GPUs the arguments name. */
static int run_model(const struct profile_args *a, const char *model,
		     bool measure)
{
	struct costmodel *cm = NULL;
	int rc, g;

	rc = load_model(a, model, &cm);
	if (rc < 0)
		return rc;
	if (a->all_gpus) {
		for (g = 0; g < costmodel_num_gpus(cm) && rc == 0; g++)
			rc = write_profile(a, cm, g, measure);
	} else {
		g = costmodel_gpu_find(cm, a->gpu);
		if (g < 0)
			rc = ar_seterr(-AR_ENOTFOUND,
				       "unknown GPU \"%s\" (no %s/gpus/%s.ini)",
				       a->gpu, costmodel_profiles_dir(cm),
				       a->gpu);
		else
			rc = write_profile(a, cm, g, measure);
	}
	costmodel_destroy(cm);
	return rc;
}

static int name_cmp(const void *x, const void *y)
{
	return strcmp(*(char *const *)x, *(char *const *)y);
}

/* synth --all: every PROFILES/models/NAME.ini, in name order. */
static int run_all_models(struct profile_args *a)
{
	const char *dir = a->profiles_dir;
	char path[PATH_MAX];
	char **names = NULL;
	size_t n = 0, cap = 0, i;
	struct dirent *de;
	DIR *dp;
	int rc = 0;

	snprintf(path, sizeof(path), "%s/models", dir);
	dp = opendir(path);
	if (!dp)
		return ar_seterr(-errno, "%s: %s", path, strerror(errno));
	while ((de = readdir(dp))) {
		size_t len = strlen(de->d_name);

		if (len <= 4 || strcmp(de->d_name + len - 4, ".ini") != 0 ||
		    de->d_name[0] == '.')
			continue;
		if (AR_GROW(names, cap, n + 1, 16) < 0) {
			rc = -ENOMEM;
			goto out;
		}
		names[n] = strndup(de->d_name, len - 4);
		if (!names[n]) {
			rc = -ENOMEM;
			goto out;
		}
		n++;
	}
	if (n == 0) {
		rc = ar_seterr(-AR_ENOTFOUND, "%s: no model profiles", path);
		goto out;
	}
	qsort(names, n, sizeof(*names), name_cmp);
	a->all_gpus = true;
	for (i = 0; i < n && rc == 0; i++)
		rc = run_model(a, names[i], false);
out:
	closedir(dp);
	for (i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return rc;
}

static int exit_status(int rc)
{
	switch (rc) {
	case -AR_EINVAL:
	case -AR_ENOTFOUND:
		return EXIT_BAD_INPUT;
	default:
		return EXIT_FAILURE;
	}
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "gpu", required_argument, NULL, 'g' },
		{ "all-gpus", no_argument, NULL, 'G' },
		{ "all", no_argument, NULL, 'A' },
		{ "profiles", required_argument, NULL, 'p' },
		{ "out", required_argument, NULL, 'o' },
		{ "tp", required_argument, NULL, 'T' },
		{ "mbs", required_argument, NULL, 'B' },
		{ "iters", required_argument, NULL, 'I' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct profile_args a = {
		.measure = { .iters = 10, .warmup = 3, .tp_mask = 0xf,
			     .mbs_mask = 0x1f },
	};
	const char *cmd;
	bool measure;
	char *end;
	int c, rc;

	ar_log_open("arachne-profile", false, LOG_INFO);
	while ((c = getopt_long(argc, argv, "m:g:p:o:qvhV", longopts,
				NULL)) != -1) {
		switch (c) {
		case 'm':
			a.model = optarg;
			break;
		case 'g':
			a.gpu = optarg;
			break;
		case 'G':
			a.all_gpus = true;
			break;
		case 'A':
			a.all_models = true;
			break;
		case 'p':
			a.profiles_dir = optarg;
			break;
		case 'o':
			a.out_dir = optarg;
			break;
		case 'T':
			if (parse_pow2_list(optarg, COSTMODEL_MAX_TP,
					    &a.measure.tp_mask) < 0) {
				fprintf(stderr, "arachne-profile: --tp %s: expected a list of 1, 2, 4, 8\n",
					optarg);
				return EXIT_BAD_INPUT;
			}
			break;
		case 'B':
			if (parse_pow2_list(optarg, COSTMODEL_MAX_MBS,
					    &a.measure.mbs_mask) < 0) {
				fprintf(stderr, "arachne-profile: --mbs %s: expected a list of 1, 2, 4, 8, 16\n",
					optarg);
				return EXIT_BAD_INPUT;
			}
			break;
		case 'I':
			a.measure.iters = (int)strtol(optarg, &end, 10);
			if (*end || a.measure.iters < 1 ||
			    a.measure.iters > 100000) {
				fprintf(stderr, "arachne-profile: --iters %s: expected 1 to 100000\n",
					optarg);
				return EXIT_BAD_INPUT;
			}
			break;
		case 'q':
			a.quiet = true;
			break;
		case 'v':
			a.measure.verbose = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("arachne-profile %s\n", PACKAGE_VERSION);
			return 0;
		default:
			usage(stderr);
			return EXIT_BAD_INPUT;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "arachne-profile: expected one command, synth or measure\n");
		usage(stderr);
		return EXIT_BAD_INPUT;
	}
	cmd = argv[optind];
	if (strcmp(cmd, "synth") == 0) {
		measure = false;
	} else if (strcmp(cmd, "measure") == 0) {
		measure = true;
	} else {
		fprintf(stderr, "arachne-profile: unknown command \"%s\" (synth or measure)\n",
			cmd);
		return EXIT_BAD_INPUT;
	}
	if (!a.profiles_dir)
		a.profiles_dir = getenv("AR_PROFILES");
	if (!a.profiles_dir || !*a.profiles_dir)
		a.profiles_dir = AR_PROFILES_DIR;

	if (a.all_models) {
		if (measure || a.model || a.gpu) {
			fprintf(stderr, "arachne-profile: --all is for synth alone, without --model or --gpu\n");
			return EXIT_BAD_INPUT;
		}
		rc = run_all_models(&a);
	} else {
		if (!a.model) {
			fprintf(stderr, "arachne-profile: %s needs --model (or synth --all)\n",
				cmd);
			return EXIT_BAD_INPUT;
		}
		if (!a.gpu == !a.all_gpus || (measure && a.all_gpus)) {
			fprintf(stderr, measure ?
				"arachne-profile: measure needs --gpu, the type of this machine's GPUs\n" :
				"arachne-profile: synth needs --gpu or --all-gpus\n");
			return EXIT_BAD_INPUT;
		}
		rc = run_model(&a, a.model, measure);
	}
	if (rc < 0) {
		fprintf(stderr, "arachne-profile: %s: %s\n", cmd,
			*ar_errmsg() ? ar_errmsg() : ar_strerror(rc));
		return exit_status(rc);
	}
	return 0;
}
