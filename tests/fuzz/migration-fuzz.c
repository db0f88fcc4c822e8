/*
 * migration-fuzz.c - libFuzzer target for the migration JSON parser of
 * arachne-migrate --migration and plannerd's replan: whatever bytes a
 * migration file holds, migrate_from_json() returns a migration or an
 * error, and a migration it returns encodes again, without a crash, a
 * leak or undefined behaviour.
 */
#include "config.h"

#include <stdlib.h>

#include "ar.h"
#include "migrate.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct migrate *m;
	json_error_t jerr;
	json_t *root, *out;
	size_t skip;

	skip = ar_skip_bom((const char *)data, size);
	root = json_loadb((const char *)data + skip, size - skip,
			  JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return 0;
	if (migrate_from_json(root, &m) == 0) {
		out = migrate_to_json(m);
		if (!out)
			abort();
		json_decref(out);
		migrate_free(m);
	}
	json_decref(root);
	return 0;
}
