/* fixture.c - see fixture.h. */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "ar.h"
#include "fixture.h"

static void mkdirs(const char *path)
{
	char buf[4096];

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		mkdir(buf, 0755);
		*p = '/';
	}
}

void fixture_write(const char *dir, const char *rel, const char *text)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	mkdirs(path);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/*
 * One entry.  Its parts, in round shares (golden.c computes with them):
 * blocks and attn spend a quarter of their compute in the attention core;
 * half the collectives are the forward's; selective recomputation re-runs
 * 30 % of the forward (10 % for experts) and keeps 3/4 of the activations
 * (1/2); full re-runs the forward with its collectives and keeps the
 * block's input, 2 MiB a sample (nothing for experts).  The embedding
 * and head are never recomputed.
 */
static void entry(FILE *f, int tp, int mbs, const char *type, double fwd,
		  double bwd, double comm, double act, double param)
{
	bool attn = !strcmp(type, "block") || !strcmp(type, "attn");
	bool expert = !strcmp(type, "expert");
	bool recomputed = attn || expert;

	fprintf(f, "[tp%d.mbs%d.%s]\nfwd_ms = %.17g\nbwd_ms = %.17g\ncomm_ms = %.17g\nact_bytes = %.17g\nparam_bytes = %.17g\n",
		tp, mbs, type, fwd, bwd, comm, act, param);
	fprintf(f, "fwd_attn_ms = %.17g\nbwd_attn_ms = %.17g\nfwd_comm_ms = %.17g\n",
		attn ? fwd / 4 : 0, attn ? bwd / 4 : 0, comm / 2);
	fprintf(f, "recompute_selective_ms = %.17g\nact_bytes_selective = %.17g\n",
		!recomputed ? 0 : expert ? fwd / 10 : fwd * 0.3,
		!recomputed ? act : expert ? act / 2 : act * 0.75);
	fprintf(f, "recompute_full_ms = %.17g\nact_bytes_full = %.17g\n\n",
		recomputed ? fwd + comm / 2 : 0,
		!recomputed ? act : expert ? 0 : 2 * MIB * mbs);
}

static void write_layers(const char *dir, const char *model, const char *gpu,
			 double slow, bool moe, double block_params)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/layers/%s/%s.ini", dir, model, gpu);
	mkdirs(path);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "[profile]\nmodel = %s\ngpu = %s\nsource = analytic\nseq_len = 1024\n\n",
		model, gpu);
	for (int tp = 1; tp <= 4; tp *= 2) {
		for (int b = 1; b <= 16; b *= 2) {
			entry(f, tp, b, "embed", 0.1 * b * slow, 0.2 * b * slow, 0,
			      8 * MIB * b, 64 * MIB / tp);
			entry(f, tp, b, "head", 0.5 * b / tp * slow,
			      1.0 * b / tp * slow, 0, 128 * MIB * b / tp,
			      64 * MIB / tp);
			if (!moe) {
				entry(f, tp, b, "block", 1.0 * b / tp * slow,
				      2.0 * b / tp * slow, 0.1 * b * (tp - 1),
				      64 * MIB * b, block_params / tp);
				continue;
			}
			entry(f, tp, b, "attn", 0.5 * b / tp * slow,
			      1.0 * b / tp * slow, 0.1 * b * (tp - 1),
			      64 * MIB * b, 128 * MIB / tp);
			entry(f, tp, b, "expert", 2.0 * b / tp * slow,
			      4.0 * b / tp * slow, 0.1 * b * (tp - 1),
			      32 * MIB * b / tp, 1024 * MIB / tp);
		}
	}
	fclose(f);
}

static const char *model_ini(const char *name, const char *extra)
{
	static char buf[1024];

	snprintf(buf, sizeof(buf),
		 "[model]\nname = %s\nblocks = 8\nhidden = 1024\nffn = 4096\n"
		 "heads = 8\nkv_heads = 8\nhead_dim = 128\nvocab = 32000\n%s\n"
		 "[training]\nseq_len = 1024\nglobal_batch = 64\n"
		 "grad_bytes_per_param = 2\noptimizer_bytes_per_param = 12\n", name, extra);
	return buf;
}

const char *fixture_create(void)
{
	char *dir = strdup("/tmp/arachne-fixture.XXXXXX");

	assert_non_null(mkdtemp(dir));
	fixture_write(dir, "gpus/fast.ini",
		      "[gpu]\nname = fast\nmemory_gib = 80\npeak_tflops = 1000\n"
		      "hbm_GBps = 3000\nintra_node_GBps = 400\nnetwork_gbps = 100\n"
		      "max_gpus_per_node = 4\nprice_per_hour = 2\n");
	fixture_write(dir, "gpus/slow.ini",
		      "[gpu]\nname = slow\nmemory_gib = 40\npeak_tflops = 300\n"
		      "hbm_GBps = 1500\nintra_node_GBps = 200\nnetwork_gbps = 100\n"
		      "max_gpus_per_node = 4\nprice_per_hour = 1\n");
	fixture_write(dir, "models/toy.ini", model_ini("toy", ""));
	fixture_write(dir, "models/huge.ini", model_ini("huge", ""));
	fixture_write(dir, "models/toymoe.ini",
		      model_ini("toymoe", "experts = 8\ntop_k = 2\nexpert_ffn = 4096\n"));
	write_layers(dir, "toy", "fast", 1, false, 256 * MIB);
	write_layers(dir, "toy", "slow", 3, false, 256 * MIB);
	write_layers(dir, "huge", "fast", 1, false, 65536 * MIB);
	write_layers(dir, "huge", "slow", 3, false, 65536 * MIB);
	write_layers(dir, "toymoe", "fast", 1, true, 0);
	write_layers(dir, "toymoe", "slow", 3, true, 0);
	return dir;
}

void fixture_destroy(const char *dir)
{
	char cmd[4200];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
	free((char *)dir);
}

struct costmodel *fixture_load(const char *dir, const char *model)
{
	struct costmodel_opts opts = { .profiles_dir = dir };
	struct costmodel *cm;
	int rc = costmodel_load(model, &opts, &cm);

	if (rc < 0)
		fail_msg("costmodel_load(%s): %s", model, ar_errmsg());
	return cm;
}

struct costmodel_cluster *fixture_cluster(const struct costmodel *cm,
					  const char *json)
{
	struct costmodel_cluster *cl;
	json_error_t jerr;
	json_t *root = json_loads(json, 0, &jerr);

	if (!root)
		fail_msg("fixture cluster JSON: %s", jerr.text);
	if (costmodel_cluster_from_json(cm, root, &cl) < 0)
		fail_msg("fixture cluster: %s", ar_errmsg());
	json_decref(root);
	return cl;
}

struct costmodel_plan *fixture_plan(const struct costmodel *cm,
				    const struct costmodel_cluster *cl,
				    const char *json)
{
	struct costmodel_plan *plan;
	json_error_t jerr;
	json_t *root = json_loads(json, 0, &jerr);

	if (!root)
		fail_msg("fixture plan JSON: %s", jerr.text);
	if (costmodel_plan_from_json(cm, cl, root, &plan) < 0)
		fail_msg("fixture plan: %s", ar_errmsg());
	json_decref(root);
	return plan;
}
