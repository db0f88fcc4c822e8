/*
 * unseen-set - write the learned planner's unseen evaluation set: cluster
 * compositions no policy trained on, and a plan-grid file naming every
 * (model, composition) cell.
 *
 *   unseen-set --out DIR [--count N] [--seed S] [--models LIST]
 *
 * Each composition draws 16-4096 GPUs (log-uniform, stratified so that
 * every scale is covered), 2-6 of the profiled GPU types (cycling through
 * the counts), shares of one dominant type or balanced, node sizes of the
 * type's servers (8 or 4 GPUs, some types on two sizes, some partly on
 * single-GPU nodes), and partial nodes: servers of which an allocation
 * holds only some GPUs (3 of 8, 3 of 4, ...), as Slurm hands them out.
 * Every composition has a partial node, and training draws nodes of 1, 2,
 * 4 or 8 GPUs only, so none can be a training composition whatever the
 * training seed; the generator is its own (splitmix64 from --seed), not
 * the trainer's.  The same seed writes the same set on any machine.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "ar.h"
#include "costmodel.h"

#define DEFAULT_COUNT	32
#define DEFAULT_SEED	20261201UL	/* no trainer's: see above */
#define MIN_GPUS	16
#define MAX_GPUS	4096
#define MIN_TYPES	2
#define MAX_TYPES	6

static const char *default_models = "llama3-8b,qwen3-32b,mixtral-8x7b,qwen3-30b-a3b";

static uint64_t rng_state;

static uint64_t next(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static double uniform(void)
{
	return (next() >> 11) * (1.0 / 9007199254740992.0);
}

static int below(int n)
{
	return (int)(uniform() * n);
}

struct group {
	int gpus_per_node;
	int count;
};

/* GPUs of a server that an allocation holds only in part: never 1, 2, 4 or 8. */
static int partial_size(int size)
{
	static const int of8[] = { 3, 5, 6, 7 };

	return size == 8 ? of8[below(4)] : 3;
}

static bool training_size(int gpus)
{
	return gpus == 1 || gpus == 2 || gpus == 4 || gpus == 8;
}

/*
 * The nodes of one type: @gpus GPUs on servers of @size, some of them on
 * single-GPU nodes or servers of half the size, some servers partial
 * (always one when @want_partial and the GPUs allow).
 */
static int type_nodes(int gpus, int size, bool want_partial, struct group *g,
		      bool *partial)
{
	int n = 0, left = gpus, k;

	if (size > 1 && left > 8 && uniform() < 0.3) {
		int singles = 1 + below(left / 4);

		g[n++] = (struct group){ 1, singles };
		left -= singles;
	}
	if (size >= 4 && left > 2 * size && uniform() < 0.35) {
		int nodes = 1 + below(left / size);

		g[n++] = (struct group){ size / 2, nodes };
		left -= nodes * (size / 2);
	}
	k = want_partial ? 1 : uniform() < 0.5 ? 1 + below(2) : 0;
	for (int i = 0; i < k; i++) {
		int part = partial_size(size);

		if (part >= left)
			break;
		g[n++] = (struct group){ part, 1 };
		left -= part;
		*partial = true;
	}
	if (left >= size) {
		g[n++] = (struct group){ size, left / size };
		left %= size;
	}
	if (left > 0) {
		g[n++] = (struct group){ left, 1 };
		*partial |= !training_size(left);
	}
	return n;
}

static json_t *composition(const struct costmodel *cm, int index, int count)
{
	int ngpu = costmodel_num_gpus(cm), types[COSTMODEL_MAX_GPU_TYPES];
	int ntypes = MIN_TYPES + index % (MAX_TYPES - MIN_TYPES + 1);
	double u = (index + uniform()) / count, share[MAX_TYPES], sum = 0.0;
	int total = (int)round(exp(log(MIN_GPUS) + u * (log(MAX_GPUS) - log(MIN_GPUS))));
	json_t *root, *nodes;
	char name[32];
	bool partial = false;

	if (ntypes > ngpu)
		ntypes = ngpu;
	if (total < MIN_GPUS)
		total = MIN_GPUS;
	if (total > MAX_GPUS - 8)
		total = MAX_GPUS - 8;	/* room for rounding and a partial server */
	for (int i = 0; i < ngpu; i++)
		types[i] = i;
	for (int i = 0; i < ntypes; i++) {	/* partial Fisher-Yates */
		int j = i + below(ngpu - i), t = types[j];

		types[j] = types[i];
		types[i] = t;
	}
	if (uniform() < 0.3) {
		for (int i = 0; i < ntypes; i++)
			share[i] = 1.0;
	} else {
		int dom = below(ntypes);

		for (int i = 0; i < ntypes; i++)
			share[i] = 0.2 + uniform();
		share[dom] += 1.0 + 2.0 * uniform();
	}
	for (int i = 0; i < ntypes; i++)
		sum += share[i];

	snprintf(name, sizeof(name), "unseen-%02d", index);
	root = json_object();
	nodes = json_array();
	json_object_set_new(root, "name", json_string(name));
	json_object_set_new(root, "nodes", nodes);
	for (int i = 0; i < ntypes; i++) {
		const struct costmodel_gpu *gpu = costmodel_gpu(cm, types[i]);
		int gpus = (int)round(total * share[i] / sum);
		int max = gpu->max_gpus_per_node > 0 ? gpu->max_gpus_per_node : 8;
		int size = max >= 8 && uniform() < 0.5 ? 8 : max >= 4 ? 4 : max;
		struct group g[8];
		int n;

		if (gpus < 2)
			gpus = 2;
		n = type_nodes(gpus, size, i == ntypes - 1 && !partial, g, &partial);
		for (int k = 0; k < n; k++)
			json_array_append_new(nodes, json_pack("{s:s, s:i, s:i}",
				"gpu", gpu->name, "gpus_per_node", g[k].gpus_per_node,
				"count", g[k].count));
	}
	if (!partial) {
		/* the last resort: one server of the first type holds 3 GPUs */
		json_array_append_new(nodes, json_pack("{s:s, s:i, s:i}",
			"gpu", costmodel_gpu(cm, types[0])->name,
			"gpus_per_node", 3, "count", 1));
	}
	return root;
}

static void usage(FILE *f)
{
	fprintf(f,
"Usage: unseen-set --out DIR [--count N] [--seed S] [--models LIST]\n"
"Write N cluster compositions (default %d) of %d-%d GPUs and %d-%d GPU\n"
"types, DIR/unseen-NN.json, and DIR/grid naming each with every model of\n"
"LIST (default %s).\n",
		DEFAULT_COUNT, MIN_GPUS, MAX_GPUS, MIN_TYPES, MAX_TYPES,
		default_models);
}

int main(int argc, char **argv)
{
	const char *out = NULL, *models = default_models;
	unsigned long seed = DEFAULT_SEED;
	struct costmodel_opts o = { .no_layer_profiles = true };
	struct costmodel *cm;
	int count = DEFAULT_COUNT;
	char path[4096];
	FILE *grid;

	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
			usage(stdout);
			return 0;
		}
		if (!val) {
			usage(stderr);
			return 2;
		}
		if (!strcmp(arg, "--out"))
			out = val;
		else if (!strcmp(arg, "--count"))
			count = atoi(val);
		else if (!strcmp(arg, "--seed"))
			seed = strtoul(val, NULL, 10);
		else if (!strcmp(arg, "--models"))
			models = val;
		else {
			fprintf(stderr, "unseen-set: unknown option %s\n", arg);
			usage(stderr);
			return 2;
		}
		i++;
	}
	if (!out || count < 1 || count > 99) {
		fprintf(stderr, "unseen-set: --out DIR is required and --count is 1-99\n");
		return 2;
	}
	if (costmodel_load("llama3-8b", &o, &cm) < 0) {
		fprintf(stderr, "unseen-set: %s\n", ar_errmsg());
		return 2;
	}
	if (mkdir(out, 0755) < 0 && errno != EEXIST) {
		fprintf(stderr, "unseen-set: %s: %s\n", out, strerror(errno));
		return 1;
	}
	rng_state = seed;
	snprintf(path, sizeof(path), "%s/grid", out);
	grid = fopen(path, "w");
	if (!grid) {
		fprintf(stderr, "unseen-set: %s: %s\n", path, strerror(errno));
		return 1;
	}
	fprintf(grid, "# The unseen evaluation set: unseen-set --count %d --seed %lu\n",
		count, seed);
	for (int i = 0; i < count; i++) {
		json_t *c = composition(cm, i, count);
		char *text = json_dumps(c, JSON_INDENT(2));
		const char *m = models;

		snprintf(path, sizeof(path), "%s/unseen-%02d.json", out, i);
		if (!text || ar_file_write_atomic(path, text, strlen(text), 0644) < 0) {
			fprintf(stderr, "unseen-set: cannot write %s\n", path);
			return 1;
		}
		free(text);
		json_decref(c);
		while (*m) {
			size_t len = strcspn(m, ",");

			fprintf(grid, "%.*s unseen-%02d\n", (int)len, m, i);
			m += len + (m[len] == ',');
		}
	}
	fclose(grid);
	costmodel_destroy(cm);
	return 0;
}
