/*
 * cluster-fuzz.c - libFuzzer target for the cluster JSON parser: whatever
 * bytes a cluster file holds, costmodel_cluster_from_json() returns a
 * cluster or an error, and a cluster it returns encodes again, without a
 * crash, a leak or undefined behaviour (ASan and UBSan).
 */
#include "config.h"

#include <stdlib.h>

#include "ar.h"
#include "costmodel.h"
#include "fuzz.h"

static struct costmodel *fuzz_cm;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct costmodel_opts opts = { .no_layer_profiles = true };
	struct costmodel_cluster *cl;
	json_error_t jerr;
	json_t *root, *out;
	size_t skip;

	opts.profiles_dir = fuzz_profiles_dir();
	if (!fuzz_cm && costmodel_load("llama3-8b", &opts, &fuzz_cm) < 0)
		abort();
	skip = ar_skip_bom((const char *)data, size);
	root = json_loadb((const char *)data + skip, size - skip,
			  JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return 0;
	if (costmodel_cluster_from_json(fuzz_cm, root, &cl) == 0) {
		out = costmodel_cluster_to_json(fuzz_cm, cl);
		if (!out)
			abort();
		json_decref(out);
		costmodel_cluster_free(cl);
	}
	json_decref(root);
	return 0;
}
