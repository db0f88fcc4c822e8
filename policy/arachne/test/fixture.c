/* fixture.c - see fixture.h. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "ar.h"
#include "fixture.h"


static const struct {
	const char *name;
	int memory_gib;
	int tflops;
	int per_node;
	double slow;			/* time factor against "big" */
} gpus[] = {
	{ "big", 80, 1000, 8, 1.0 },
	{ "mid", 48, 400, 8, 2.2 },
	{ "small", 24, 150, 4, 5.0 },
};

static void entry(FILE *f, int tp, int mbs, const char *type, double fwd,
		  double bwd, double comm, double act, double param)
{
	fprintf(f, "[tp%d.mbs%d.%s]\nfwd_ms = %.17g\nbwd_ms = %.17g\ncomm_ms = %.17g\n"
		"act_bytes = %.17g\nparam_bytes = %.17g\n\n",
		tp, mbs, type, fwd, bwd, comm, act, param);
}

static void write_layers(const char *dir, const char *model, int g,
			 double block_param_bytes, int moe)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/layers", dir);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/layers/%s", dir, model);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/layers/%s/%s.ini", dir, model,
		 gpus[g].name);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "[profile]\nmodel = %s\ngpu = %s\nsource = analytic\nseq_len = 1024\n\n",
		model, gpus[g].name);
	for (int tp = 1; tp <= gpus[g].per_node; tp *= 2) {
		for (int b = 1; b <= 16; b *= 2) {
			double s = gpus[g].slow;
			/* TP loses efficiency: a TP-t group is 0.85^log2(t) as fast */
			double eff = 1.0;

			for (int t = tp; t > 1; t /= 2)
				eff *= 0.85;
			entry(f, tp, b, "embed", 0.1 * b * s, 0.2 * b * s, 0,
			      16 * MIB * b, 512 * MIB / tp);
			entry(f, tp, b, "head", 2.0 * b / tp / eff * s,
			      4.0 * b / tp / eff * s, 0.05 * b * (tp - 1),
			      128 * MIB * b / tp, 512 * MIB / tp);
			if (!moe) {
				entry(f, tp, b, "block", 4.0 * b / tp / eff * s,
				      8.0 * b / tp / eff * s, 0.2 * b * (tp - 1),
				      256 * MIB * b, block_param_bytes / tp);
				continue;
			}
			entry(f, tp, b, "attn", 2.0 * b / tp / eff * s,
			      4.0 * b / tp / eff * s, 0.2 * b * (tp - 1),
			      128 * MIB * b, 256 * MIB / tp);
			entry(f, tp, b, "expert", 4.0 * b / tp / eff * s,
			      8.0 * b / tp / eff * s, 0.2 * b * (tp - 1),
			      64 * MIB * b / tp, 3 * GIB / tp);
		}
	}
	fclose(f);
}

static const char *model_ini(const char *name, const char *extra)
{
	static char buf[1024];

	snprintf(buf, sizeof(buf),
		 "[model]\nname = %s\nblocks = 12\nhidden = 4096\nffn = 14336\n"
		 "heads = 32\nkv_heads = 8\nhead_dim = 128\nvocab = 32000\n%s\n"
		 "[training]\nseq_len = 1024\nglobal_batch = 256\n"
		 "grad_bytes_per_param = 2\noptimizer_bytes_per_param = 12\n", name, extra);
	return buf;
}

char *pfix_create(void)
{
	char *dir = strdup("/tmp/arachne-policy-fixture.XXXXXX");
	char rel[64], text[512];

	assert_non_null(mkdtemp(dir));
	for (size_t g = 0; g < ARRAY_SIZE(gpus); g++) {
		snprintf(rel, sizeof(rel), "gpus/%s.ini", gpus[g].name);
		snprintf(text, sizeof(text),
			 "[gpu]\nname = %s\nmemory_gib = %d\npeak_tflops = %d\n"
			 "hbm_GBps = 2000\nintra_node_GBps = 300\nnetwork_gbps = 100\n"
			 "max_gpus_per_node = %d\nprice_per_hour = 1\n",
			 gpus[g].name, gpus[g].memory_gib, gpus[g].tflops,
			 gpus[g].per_node);
		fixture_write(dir, rel, text);
	}
	fixture_write(dir, "models/dense.ini", model_ini("dense", ""));
	fixture_write(dir, "models/huge.ini", model_ini("huge", ""));
	fixture_write(dir, "models/moe.ini",
		   model_ini("moe", "experts = 8\ntop_k = 2\nexpert_ffn = 4096\n"));
	for (size_t g = 0; g < ARRAY_SIZE(gpus); g++) {
		write_layers(dir, "dense", g, 1 * GIB, 0);
		write_layers(dir, "huge", g, 64 * GIB, 0);
		write_layers(dir, "moe", g, 0, 1);
	}
	return dir;
}
