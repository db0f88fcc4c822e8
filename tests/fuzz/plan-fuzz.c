/*
 * plan-fuzz.c - libFuzzer target for the plan JSON parser shared by
 * arachne-plan --evaluate, arachne-migrate --from and plannerd: whatever
 * bytes a plan file holds, costmodel_plan_from_json() returns a plan or
 * an error, and a plan it returns is priced or refused, against a fixed
 * two-type cluster and an MoE model (so the expert layout's divisors are
 * reached), without a crash, a leak or undefined behaviour.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "ar.h"
#include "costmodel.h"
#include "fuzz.h"

static const char fuzz_cluster[] =
	"{\"nodes\":[{\"gpu\":\"h100\",\"gpus_per_node\":8,\"count\":2},"
	"{\"gpu\":\"a100-80\",\"gpus_per_node\":8,\"count\":2}]}";

static struct costmodel *fuzz_cm;
static struct costmodel_cluster *fuzz_cl;

static void fuzz_init(void)
{
	struct costmodel_opts opts = { 0 };
	json_t *root;

	opts.profiles_dir = fuzz_profiles_dir();
	if (costmodel_load("mixtral-8x7b", &opts, &fuzz_cm) < 0)
		abort();
	root = json_loads(fuzz_cluster, 0, NULL);
	if (!root || costmodel_cluster_from_json(fuzz_cm, root, &fuzz_cl) < 0)
		abort();
	json_decref(root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct costmodel_plan *plan;
	json_error_t jerr;
	json_t *root, *out;
	size_t skip;

	if (!fuzz_cm)
		fuzz_init();
	skip = ar_skip_bom((const char *)data, size);
	root = json_loadb((const char *)data + skip, size - skip,
			  JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return 0;
	if (costmodel_plan_from_json(fuzz_cm, fuzz_cl, root, &plan) == 0) {
		if (costmodel_plan_price(fuzz_cm, fuzz_cl, plan) == 0) {
			out = costmodel_plan_to_json(fuzz_cm, fuzz_cl, plan);
			if (!out)
				abort();
			json_decref(out);
		}
		costmodel_plan_free(plan);
	}
	json_decref(root);
	return 0;
}
