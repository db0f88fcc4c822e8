/*
 * req-fuzz.c - libFuzzer target for plannerd's request parser: whatever
 * bytes arrive as a request line, req_parse() must return 0 or an error,
 * the error answer must encode, and a parsed composition must go through
 * the site-map normalization, all without a crash, a leak or undefined
 * behaviour (built with ASan and UBSan).
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "ar.h"
#include "compose.h"
#include "conf.h"
#include "fuzz.h"
#include "req.h"

static struct conf *fuzz_conf;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct req req;
	json_t *cluster = NULL;
	char *reply;
	int rc;

	if (!fuzz_conf && conf_create(NULL, &fuzz_conf) < 0)
		abort();
	rc = req_parse((const char *)data, size, &req);
	if (rc < 0) {
		reply = req_reply_error(req.id, rc, ar_errmsg());
		if (!reply)
			abort();
		free(reply);
	} else if (req.cluster) {
		compose_normalize(fuzz_conf, NULL, req.cluster, &cluster);
		json_decref(cluster);
	}
	req_fini(&req);
	return 0;
}
