/*
 * test/weights.c - policy weights in safetensors format: a save and load
 * round-trips exactly with its metadata, and a truncated, corrupted or
 * mismatched file is refused with a message that names the problem.
 */
#define AR_INTERNAL 1
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ar.h"
#include "arachne_private.h"

struct fixture {
	char dir[64];
	char path[128];
	struct policy_net net;
	unsigned char *buf;
	size_t len;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct policy_meta meta = { .model = "llama3-8b", .seed = 7,
				    .episodes = 123 };
	FILE *fp;

	snprintf(f->dir, sizeof(f->dir), "/tmp/arachne-weights-XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->path, sizeof(f->path), "%s/p.safetensors", f->dir);
	snprintf(meta.command, sizeof(meta.command), "arachne-train --model llama3-8b");
	if (policy_net_init(&f->net, 5) < 0 ||
	    policy_weights_save(&f->net, &meta, f->path) < 0)
		return -1;
	fp = fopen(f->path, "rb");
	if (!fp)
		return -1;
	fseek(fp, 0, SEEK_END);
	f->len = ftell(fp);
	rewind(fp);
	f->buf = malloc(f->len);
	if (fread(f->buf, 1, f->len, fp) != f->len)
		return -1;
	fclose(fp);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	unlink(f->path);
	rmdir(f->dir);
	free(f->buf);
	policy_net_fini(&f->net);
	free(f);
	return 0;
}

/* Parse @buf into a fresh net; expect failure with @needle in the message. */
static void expect_refused(const unsigned char *buf, size_t len,
			   const char *needle)
{
	struct policy_net net;
	int rc;

	assert_int_equal(policy_net_init(&net, 1), 0);
	rc = policy_weights_parse(&net, NULL, buf, len, "bad.safetensors");
	print_message("# %s\n", ar_errmsg());
	assert_int_equal(rc, -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "bad.safetensors"));
	assert_non_null(strstr(ar_errmsg(), needle));
	policy_net_fini(&net);
}

static void test_roundtrip(void **state)
{
	struct fixture *f = *state;
	struct policy_meta meta;
	struct policy_net net;

	assert_int_equal(policy_net_init(&net, 99), 0);	/* other weights */
	assert_int_equal(policy_weights_load(&net, &meta, f->path), 0);
	assert_int_equal(net.num_params, f->net.num_params);
	assert_memory_equal(net.params, f->net.params,
			    net.num_params * sizeof(float));
	assert_string_equal(meta.model, "llama3-8b");
	assert_int_equal(meta.seed, 7);
	assert_int_equal(meta.episodes, 123);
	assert_int_equal(meta.feature_version, POLICY_FEATURE_VERSION);
	assert_string_equal(meta.command, "arachne-train --model llama3-8b");
	/* The header length is 8-aligned, as safetensors readers like it. */
	assert_int_equal(f->buf[0] % 8, 0);
	policy_net_fini(&net);
}

static void test_missing_file(void **state)
{
	struct policy_net net;

	assert_int_equal(policy_net_init(&net, 1), 0);
	assert_int_equal(policy_weights_load(&net, NULL, "/nonexistent/x.safetensors"),
			 -ENOENT);
	assert_non_null(strstr(ar_errmsg(), "/nonexistent/x.safetensors"));
	policy_net_fini(&net);
}

static void test_truncated(void **state)
{
	struct fixture *f = *state;

	expect_refused(f->buf, 5, "truncated");
	expect_refused(f->buf, 40, "truncated");
	expect_refused(f->buf, f->len - 4, "truncated");
	expect_refused(f->buf, f->len / 2, "truncated");
}

static void test_corrupted(void **state)
{
	struct fixture *f = *state;
	unsigned char *b = malloc(f->len);
	char *hdr;

	/* A wild header length. */
	memcpy(b, f->buf, f->len);
	b[7] = 0x7f;
	expect_refused(b, f->len, "header length");

	/* Garbage in the JSON. */
	memcpy(b, f->buf, f->len);
	b[8] = '#';
	expect_refused(b, f->len, "not JSON");

	/* A NaN in the data. */
	memcpy(b, f->buf, f->len);
	memset(b + f->len - 4, 0xff, 4);
	expect_refused(b, f->len, "not finite");

	/* Extra bytes after the last tensor. */
	b = realloc(b, f->len + 16);
	memcpy(b, f->buf, f->len);
	memset(b + f->len, 0, 16);
	expect_refused(b, f->len + 16, "data section");

	/* Not our format at all: a header without __metadata__. */
	hdr = (char *)b + 8;
	memcpy(b, f->buf, f->len);
	memcpy(strstr(hdr, "__metadata__"), "__metadata_X", 12);
	expect_refused(b, f->len, "__metadata__");
	free(b);
}

/* Replace the first @from in the header by @to (same length). */
static void expect_header_edit_refused(struct fixture *f, const char *from,
				       const char *to, const char *needle)
{
	unsigned char *b = malloc(f->len);
	char *at;

	assert_int_equal(strlen(from), strlen(to));
	memcpy(b, f->buf, f->len);
	at = strstr((char *)b + 8, from);
	assert_non_null(at);
	memcpy(at, to, strlen(to));
	expect_refused(b, f->len, needle);
	free(b);
}

static void test_mismatched(void **state)
{
	struct fixture *f = *state;
	char from[64], to[64];

	snprintf(from, sizeof(from), "\"feature_version\":\"%d\"",
		 POLICY_FEATURE_VERSION);
	snprintf(to, sizeof(to), "\"feature_version\":\"%d\"",
		 POLICY_FEATURE_VERSION + 1);
	expect_header_edit_refused(f, from, to, "feature version");
	snprintf(from, sizeof(from), "[%d,%d]", POLICY_HIDDEN,
		 POLICY_STATE_DIM);
	snprintf(to, sizeof(to), "[%d,%d]", POLICY_HIDDEN,
		 POLICY_STATE_DIM - 10);
	expect_header_edit_refused(f, from, to, "shape mismatch");
	expect_header_edit_refused(f, "\"F32\"", "\"F16\"", "dtype");
	expect_header_edit_refused(f, "backbone.1.bias", "backbone.9.bias",
				   "unknown tensor");
	expect_header_edit_refused(f, "arachne-policy", "arachne-pilicy",
				   "format");
}

/* Loading a bad file leaves the network as it was. */
static void test_failed_load_keeps_weights(void **state)
{
	struct fixture *f = *state;
	struct policy_net net;
	float *before;

	assert_int_equal(policy_net_init(&net, 77), 0);
	before = malloc(net.num_params * sizeof(float));
	memcpy(before, net.params, net.num_params * sizeof(float));
	assert_int_equal(policy_weights_parse(&net, NULL, f->buf, f->len - 4,
					      "t"), -AR_EINVAL);
	assert_memory_equal(before, net.params, net.num_params * sizeof(float));
	free(before);
	policy_net_fini(&net);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_missing_file),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_corrupted),
		cmocka_unit_test(test_mismatched),
		cmocka_unit_test(test_failed_load_keeps_weights),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
