/*
 * weights.c - policy weights in the safetensors format: an 8-byte
 * little-endian header length, a JSON header naming every tensor's dtype,
 * shape and byte range (plus a "__metadata__" map of strings), then the
 * raw little-endian data.  The file is written atomically; loading checks
 * every field and names what is wrong rather than trusting the file.
 */
#define AR_INTERNAL 1
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ar.h"
#include "arachne_private.h"

#define WEIGHTS_FORMAT		"arachne-policy"
#define WEIGHTS_MAX_HEADER	(1u << 20)	/* far above what we write */

static void put_le64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static void put_le_float(unsigned char *p, float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(u >> (8 * i));
}

static float get_le_float(const unsigned char *p)
{
	uint32_t u = 0;
	float f;

	for (int i = 0; i < 4; i++)
		u |= (uint32_t)p[i] << (8 * i);
	memcpy(&f, &u, sizeof(f));
	return f;
}

static size_t tensor_count(enum policy_tensor t)
{
	const struct policy_tensor_info *ti = policy_tensor_info(t);

	return (size_t)ti->rows * ti->cols;
}

static json_t *header_build(const struct policy_net *net,
			    const struct policy_meta *meta)
{
	json_t *root = json_object(), *md = json_object();
	char buf[64];
	size_t off = 0;

	if (!root || !md)
		goto err;
	json_object_set_new(md, "format", json_string(WEIGHTS_FORMAT));
	json_object_set_new(md, "model", json_string(meta->model));
	snprintf(buf, sizeof(buf), "%d", POLICY_FEATURE_VERSION);
	json_object_set_new(md, "feature_version", json_string(buf));
	snprintf(buf, sizeof(buf), "%lu", meta->seed);
	json_object_set_new(md, "seed", json_string(buf));
	snprintf(buf, sizeof(buf), "%ld", meta->episodes);
	json_object_set_new(md, "episodes", json_string(buf));
	json_object_set_new(md, "command", json_string(meta->command));
	json_object_set_new(root, "__metadata__", md);
	md = NULL;

	for (int t = 0; t < POLICY_NUM_TENSORS; t++) {
		const struct policy_tensor_info *ti = policy_tensor_info(t);
		size_t bytes = tensor_count(t) * 4;
		json_t *shape = ti->cols == 1 ?
			json_pack("[i]", ti->rows) :
			json_pack("[i,i]", ti->rows, ti->cols);
		json_t *e = json_pack("{s:s,s:o,s:[I,I]}", "dtype", "F32",
				      "shape", shape, "data_offsets",
				      (json_int_t)off, (json_int_t)(off + bytes));

		if (!e)
			goto err;
		json_object_set_new(root, ti->name, e);
		off += bytes;
	}
	return root;
err:
	json_decref(md);
	json_decref(root);
	return NULL;
}

int policy_weights_save(const struct policy_net *net,
			const struct policy_meta *meta, const char *path)
{
	json_t *hdr = header_build(net, meta);
	char *text = NULL;
	unsigned char *buf = NULL;
	size_t tlen, hlen, total;
	int rc;

	if (!hdr)
		return -ENOMEM;
	text = json_dumps(hdr, JSON_COMPACT);
	json_decref(hdr);
	if (!text)
		return -ENOMEM;
	tlen = strlen(text);
	hlen = (tlen + 7) & ~(size_t)7;	/* pad with spaces: data 8-aligned */
	total = 8 + hlen + net->num_params * 4;
	buf = malloc(total);
	if (!buf) {
		rc = -ENOMEM;
		goto out;
	}
	put_le64(buf, hlen);
	memcpy(buf + 8, text, tlen);
	memset(buf + 8 + tlen, ' ', hlen - tlen);
	for (size_t i = 0; i < net->num_params; i++)
		put_le_float(buf + 8 + hlen + 4 * i, net->params[i]);
	rc = ar_file_write_atomic(path, buf, total, 0644);
	if (rc < 0)
		ar_seterr(rc, "%s: cannot write policy weights: %s", path,
			  ar_strerror(rc));
out:
	free(buf);
	free(text);
	return rc;
}

/* Copy metadata string @key into @dst, or fail naming it. */
static int meta_string(const json_t *md, const char *key, char *dst,
		       size_t len, const char *what)
{
	const json_t *v = json_object_get(md, key);

	if (!json_is_string(v))
		return ar_seterr(-AR_EINVAL,
				 "%s: __metadata__.%s is missing or not a string",
				 what, key);
	if (dst)
		snprintf(dst, len, "%s", json_string_value(v));
	return 0;
}

static int meta_parse(const json_t *root, struct policy_meta *meta,
		      const char *what)
{
	const json_t *md = json_object_get(root, "__metadata__");
	char buf[64], *end;
	long v;
	int rc;

	if (!json_is_object(md))
		return ar_seterr(-AR_EINVAL, "%s: no __metadata__ map: not an Arachne policy",
				 what);
	rc = meta_string(md, "format", buf, sizeof(buf), what);
	if (rc < 0)
		return rc;
	if (strcmp(buf, WEIGHTS_FORMAT) != 0)
		return ar_seterr(-AR_EINVAL, "%s: format \"%s\", expected \"%s\"",
				 what, buf, WEIGHTS_FORMAT);
	rc = meta_string(md, "feature_version", buf, sizeof(buf), what);
	if (rc < 0)
		return rc;
	errno = 0;
	v = strtol(buf, &end, 10);
	if (errno || *end || end == buf)
		return ar_seterr(-AR_EINVAL, "%s: feature_version \"%s\" is not a number",
				 what, buf);
	if (v != POLICY_FEATURE_VERSION)
		return ar_seterr(-AR_EINVAL,
				 "%s: written for feature version %ld, this build uses %d; "
				 "install this build's policies (make install) or train one "
				 "(arachne-train)", what, v, POLICY_FEATURE_VERSION);
	meta->feature_version = (int)v;
	rc = meta_string(md, "model", meta->model, sizeof(meta->model), what);
	if (rc < 0)
		return rc;
	rc = meta_string(md, "seed", buf, sizeof(buf), what);
	if (rc < 0)
		return rc;
	meta->seed = strtoul(buf, NULL, 10);
	rc = meta_string(md, "episodes", buf, sizeof(buf), what);
	if (rc < 0)
		return rc;
	meta->episodes = strtol(buf, NULL, 10);
	return meta_string(md, "command", meta->command, sizeof(meta->command),
			   what);
}

/* Check tensor @t's entry and copy its data from @data (@dlen bytes). */
static int tensor_parse(const json_t *root, enum policy_tensor t,
			const unsigned char *data, size_t dlen, float *dst,
			const char *what)
{
	const struct policy_tensor_info *ti = policy_tensor_info(t);
	const json_t *e = json_object_get(root, ti->name), *shape, *offs;
	size_t want_dims = ti->cols == 1 ? 1 : 2;
	json_int_t b, end;
	size_t count = tensor_count(t);

	if (!json_is_object(e))
		return ar_seterr(-AR_EINVAL, "%s: tensor %s is missing", what,
				 ti->name);
	if (!json_is_string(json_object_get(e, "dtype")) ||
	    strcmp(json_string_value(json_object_get(e, "dtype")), "F32") != 0)
		return ar_seterr(-AR_EINVAL, "%s: tensor %s: dtype is not F32",
				 what, ti->name);
	shape = json_object_get(e, "shape");
	if (!json_is_array(shape) || json_array_size(shape) != want_dims ||
	    json_integer_value(json_array_get(shape, 0)) != ti->rows ||
	    (want_dims == 2 &&
	     json_integer_value(json_array_get(shape, 1)) != ti->cols)) {
		if (want_dims == 2)
			return ar_seterr(-AR_EINVAL,
					 "%s: tensor %s: shape mismatch, this build expects [%d, %d]",
					 what, ti->name, ti->rows, ti->cols);
		return ar_seterr(-AR_EINVAL,
				 "%s: tensor %s: shape mismatch, this build expects [%d]",
				 what, ti->name, ti->rows);
	}
	offs = json_object_get(e, "data_offsets");
	if (!json_is_array(offs) || json_array_size(offs) != 2 ||
	    !json_is_integer(json_array_get(offs, 0)) ||
	    !json_is_integer(json_array_get(offs, 1)))
		return ar_seterr(-AR_EINVAL, "%s: tensor %s: bad data_offsets",
				 what, ti->name);
	b = json_integer_value(json_array_get(offs, 0));
	end = json_integer_value(json_array_get(offs, 1));
	if (b < 0 || end < b || (uint64_t)(end - b) != count * 4)
		return ar_seterr(-AR_EINVAL,
				 "%s: tensor %s: data_offsets [%" JSON_INTEGER_FORMAT
				 ", %" JSON_INTEGER_FORMAT "] do not span %zu floats",
				 what, ti->name, b, end, count);
	if ((uint64_t)end > dlen)
		return ar_seterr(-AR_EINVAL,
				 "%s: truncated: tensor %s ends at byte %" JSON_INTEGER_FORMAT
				 " of a %zu-byte data section",
				 what, ti->name, end, dlen);
	for (size_t i = 0; i < count; i++) {
		float f = get_le_float(data + b + 4 * i);

		if (!isfinite(f))
			return ar_seterr(-AR_EINVAL,
					 "%s: tensor %s: element %zu is not finite",
					 what, ti->name, i);
		dst[i] = f;
	}
	return 0;
}

int policy_weights_parse(struct policy_net *net, struct policy_meta *meta,
			 const unsigned char *buf, size_t len, const char *what)
{
	struct policy_meta scratch;
	json_error_t jerr;
	json_t *root = NULL;
	const char *key;
	json_t *value;
	uint64_t hlen;
	size_t dlen, used = 0;
	float *params = NULL;
	int rc;

	if (!meta)
		meta = &scratch;
	memset(meta, 0, sizeof(*meta));
	if (len < 8)
		return ar_seterr(-AR_EINVAL,
				 "%s: truncated: %zu bytes, not even a header length",
				 what, len);
	hlen = get_le64(buf);
	if (hlen == 0 || hlen > WEIGHTS_MAX_HEADER)
		return ar_seterr(-AR_EINVAL,
				 "%s: header length %" PRIu64 " is implausible: not a safetensors file",
				 what, hlen);
	if (hlen > len - 8)
		return ar_seterr(-AR_EINVAL,
				 "%s: truncated: header of %" PRIu64 " bytes, file holds %zu",
				 what, hlen, len - 8);
	root = json_loadb((const char *)buf + 8, hlen, 0, &jerr);
	if (!root)
		return ar_seterr(-AR_EINVAL, "%s: header is not JSON: %s (column %d)",
				 what, jerr.text, jerr.column);
	if (!json_is_object(root)) {
		rc = ar_seterr(-AR_EINVAL, "%s: header is not a JSON object", what);
		goto out;
	}
	rc = meta_parse(root, meta, what);
	if (rc < 0)
		goto out;

	/* Every key is a tensor this build knows, and nothing is left over. */
	json_object_foreach(root, key, value) {
		bool known = strcmp(key, "__metadata__") == 0;

		for (int t = 0; t < POLICY_NUM_TENSORS && !known; t++)
			known = strcmp(key, policy_tensor_info(t)->name) == 0;
		if (!known) {
			rc = ar_seterr(-AR_EINVAL,
				       "%s: unknown tensor \"%s\": written by another network layout",
				       what, key);
			goto out;
		}
	}

	/* Parse into scratch first, so a bad file leaves @net as it was. */
	params = malloc(net->num_params * sizeof(*params));
	if (!params) {
		rc = -ENOMEM;
		goto out;
	}
	dlen = len - 8 - hlen;
	for (int t = 0; t < POLICY_NUM_TENSORS; t++) {
		rc = tensor_parse(root, t, buf + 8 + hlen, dlen,
				  params + net->offset[t], what);
		if (rc < 0)
			goto out;
		used += tensor_count(t) * 4;
	}
	if (used != dlen) {
		rc = ar_seterr(-AR_EINVAL,
			       "%s: data section holds %zu bytes, the tensors %zu",
			       what, dlen, used);
		goto out;
	}
	memcpy(net->params, params, net->num_params * sizeof(*params));
	rc = 0;
out:
	free(params);
	json_decref(root);
	return rc;
}

int policy_weights_load(struct policy_net *net, struct policy_meta *meta,
			const char *path)
{
	char *buf;
	size_t len;
	int rc;

	/* A regular file of bounded size: --policy /dev/zero is refused. */
	rc = ar_file_read(path, AR_LIMIT_POLICY_BYTES, &buf, &len);
	if (rc < 0) {
		char msg[768];

		snprintf(msg, sizeof(msg), "%s", ar_errmsg());
		return ar_seterr(rc, "cannot open policy weights: %s", msg);
	}
	rc = policy_weights_parse(net, meta, (const unsigned char *)buf, len,
				  path);
	free(buf);
	return rc;
}
