/*
 * profile.c - load GPU, model and layer profiles (INI, iniparser).
 *
 * Layout under the profiles directory (docs/profiles.md):
 *   gpus/NAME.ini             one GPU type each
 *   models/NAME.ini           one model architecture each
 *   layers/MODEL/GPU.ini      analytic layer profiles (arachne-profile synth)
 *   layers/MODEL/GPU.measured.ini  measured entries; override the analytic
 *
 * Parsing is strict: every number is checked for syntax and range, and an
 * unknown key in a [gpu] or [model] section is an error, so that a typo in
 * a site's profile never silently falls back to a default.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <iniparser.h>

#define AR_INTERNAL
#include "costmodel_private.h"

static const char *const layer_type_names[COSTMODEL_NUM_LAYER_TYPES] = {
	[COSTMODEL_LAYER_EMBED] = "embed",
	[COSTMODEL_LAYER_BLOCK] = "block",
	[COSTMODEL_LAYER_ATTN] = "attn",
	[COSTMODEL_LAYER_EXPERT] = "expert",
	[COSTMODEL_LAYER_HEAD] = "head",
};

/* iniparser reports syntax errors through a callback; keep the first. */
static _Thread_local char ini_syntax_error[512];

static int ini_error_cb(const char *fmt, ...)
{
	va_list ap;

	if (ini_syntax_error[0])
		return 0;
	va_start(ap, fmt);
	vsnprintf(ini_syntax_error, sizeof(ini_syntax_error), fmt, ap);
	va_end(ap);
	ini_syntax_error[strcspn(ini_syntax_error, "\n")] = '\0';
	return 0;
}

/*
 * A profile is a regular file of at most AR_LIMIT_INI_BYTES: a FIFO or a
 * device in the profiles directory is refused, not waited on.
 */
static dictionary *ini_open(const char *path, int *rc)
{
	char bom[3];
	dictionary *d;
	ssize_t n;
	int fd;

	fd = ar_file_open_regular(path, AR_LIMIT_INI_BYTES);
	if (fd < 0) {
		*rc = fd == -ENOENT ? -AR_ENOTFOUND : fd;
		return NULL;
	}
	n = read(fd, bom, sizeof(bom));
	close(fd);
	if (n > 0 && ar_skip_bom(bom, (size_t)n)) {
		*rc = ar_seterr(-AR_EINVAL, "%s: starts with a UTF-8 byte-order mark (the invisible bytes EF BB BF); save it without one",
				path);
		return NULL;
	}
	ini_syntax_error[0] = '\0';
	iniparser_set_error_callback(ini_error_cb);
	d = iniparser_load(path);
	if (!d || ini_syntax_error[0]) {
		*rc = ar_seterr(-AR_EINVAL, "%s: %s", path,
				ini_syntax_error[0] ? ini_syntax_error :
				"cannot parse");
		iniparser_freedict(d);
		return NULL;
	}
	*rc = 0;
	return d;
}

/* The value of @key in @sec as text, or NULL (an error when @required). */
static const char *ini_value(dictionary *d, const char *path, const char *sec,
			     const char *key, bool required, char *what,
			     size_t what_size, int *rc)
{
	char full[128];
	const char *s;

	snprintf(full, sizeof(full), "%s:%s", sec, key);
	snprintf(what, what_size, "%s: [%s] %s", path, sec, key);
	s = iniparser_getstring(d, full, NULL);
	*rc = 0;
	if (!s && required)
		*rc = ar_seterr(-AR_EINVAL, "%s is missing", what);
	return s;
}

static int ini_double(dictionary *d, const char *path, const char *sec,
		      const char *key, double min, double max, bool required,
		      double *out)
{
	char what[PATH_MAX + 128];
	int rc;
	const char *s = ini_value(d, path, sec, key, required, what,
				  sizeof(what), &rc);

	return s ? ar_parse_double(s, what, min, max, out) : rc;
}

static int ini_int(dictionary *d, const char *path, const char *sec,
		   const char *key, int min, int max, bool required, int *out)
{
	char what[PATH_MAX + 128];
	int64_t v;
	int rc;
	const char *s = ini_value(d, path, sec, key, required, what,
				  sizeof(what), &rc);

	if (!s)
		return rc;
	rc = ar_parse_int64(s, what, min, max, &v);
	if (rc == 0)
		*out = (int)v;
	return rc;
}

static int ini_bool(dictionary *d, const char *path, const char *sec,
		    const char *key, bool *out)
{
	char full[128];
	const char *s;

	snprintf(full, sizeof(full), "%s:%s", sec, key);
	s = iniparser_getstring(d, full, NULL);
	if (!s)
		return 0;
	if (!strcasecmp(s, "true") || !strcasecmp(s, "yes") || !strcmp(s, "1"))
		*out = true;
	else if (!strcasecmp(s, "false") || !strcasecmp(s, "no") || !strcmp(s, "0"))
		*out = false;
	else
		return ar_seterr(-AR_EINVAL, "%s: [%s] %s = \"%s\" is not true or false",
				 path, sec, key, s);
	return 0;
}

static int ini_name(dictionary *d, const char *path, const char *sec,
		    const char *expect, char *out)
{
	char full[128];
	const char *s;

	snprintf(full, sizeof(full), "%s:name", sec);
	s = iniparser_getstring(d, full, NULL);
	if (!s || !*s)
		return ar_seterr(-AR_EINVAL, "%s: [%s] name is missing", path, sec);
	if (strlen(s) >= COSTMODEL_NAME_MAX)
		return ar_seterr(-AR_EINVAL, "%s: [%s] name \"%s\" is too long",
				 path, sec, s);
	if (expect && strcmp(s, expect) != 0)
		return ar_seterr(-AR_EINVAL, "%s: [%s] name \"%s\" does not match the file name",
				 path, sec, s);
	strcpy(out, s);
	return 0;
}

/* An unknown key in @sec is an error: it is most likely a typo. */
static int ini_check_keys(dictionary *d, const char *path, const char *sec,
			  const char *const *known)
{
	int n = iniparser_getsecnkeys(d, sec);
	const char **keys;
	int rc = 0;

	if (n <= 0)
		return 0;
	keys = calloc((size_t)n, sizeof(*keys));
	if (!keys)
		return -ENOMEM;
	iniparser_getseckeys(d, sec, keys);
	for (int i = 0; i < n && rc == 0; i++) {
		const char *key = strchr(keys[i], ':');
		const char *const *k;

		key = key ? key + 1 : keys[i];
		for (k = known; *k; k++)
			if (strcmp(*k, key) == 0)
				break;
		if (!*k)
			rc = ar_seterr(-AR_EINVAL, "%s: [%s] unknown key \"%s\"",
				       path, sec, key);
	}
	free(keys);
	return rc;
}

static int load_gpu(const char *path, const char *expect,
		    struct costmodel_gpu *g)
{
	static const char *const known[] = {
		"name", "memory_gib", "peak_tflops", "hbm_gbps",
		"intra_node_gbps", "network_gbps", "max_gpus_per_node",
		"price_per_hour", NULL
	};
	dictionary *d;
	int rc;

	d = ini_open(path, &rc);
	if (!d)
		return rc;
	if (iniparser_find_entry(d, "gpu") == 0) {
		rc = ar_seterr(-AR_EINVAL, "%s: no [gpu] section", path);
		goto out;
	}
	if ((rc = ini_check_keys(d, path, "gpu", known)) < 0 ||
	    (rc = ini_name(d, path, "gpu", expect, g->name)) < 0 ||
	    (rc = ini_double(d, path, "gpu", "memory_gib", 1, 4096, true,
			     &g->memory_gib)) < 0 ||
	    (rc = ini_double(d, path, "gpu", "peak_tflops", 1, 1e6, true,
			     &g->peak_tflops)) < 0 ||
	    (rc = ini_double(d, path, "gpu", "hbm_GBps", 1, 1e6, true,
			     &g->hbm_GBps)) < 0 ||
	    (rc = ini_double(d, path, "gpu", "intra_node_GBps", 0.1, 1e5, true,
			     &g->intra_node_GBps)) < 0 ||
	    (rc = ini_double(d, path, "gpu", "network_gbps", 0.1, 1e5, true,
			     &g->network_gbps)) < 0 ||
	    (rc = ini_int(d, path, "gpu", "max_gpus_per_node", 1,
			  COSTMODEL_MAX_NODE_GPUS, true,
			  &g->max_gpus_per_node)) < 0 ||
	    (rc = ini_double(d, path, "gpu", "price_per_hour", 0, 1e4, false,
			     &g->price_per_hour)) < 0)
		goto out;
out:
	iniparser_freedict(d);
	return rc;
}

static int load_model(const char *path, const char *expect,
		      struct costmodel_model *m)
{
	static const char *const known_model[] = {
		"name", "blocks", "hidden", "ffn", "heads", "kv_heads",
		"head_dim", "vocab", "experts", "top_k", "expert_ffn",
		"shared_experts", "dense_layers", "q_lora_rank",
		"kv_lora_rank", "gated", "tied_embeddings", NULL
	};
	static const char *const known_training[] = {
		"seq_len", "global_batch", "precision", "optimizer",
		"grad_bytes_per_param", "optimizer_bytes_per_param",
		"bucket_params", NULL
	};
	/* Settings that moved: a clear word instead of "unknown key". */
	static const struct {
		const char *key, *why;
	} moved[] = {
		{ "training:state_bytes_per_param",
		  "is now grad_bytes_per_param and optimizer_bytes_per_param (with the BF16 weight's 2)" },
		{ "training:activation_checkpointing",
		  "is no longer a model setting: recomputation is a plan option the fill chooses" },
	};
	dictionary *d;
	int rc;

	d = ini_open(path, &rc);
	if (!d)
		return rc;
	memset(m, 0, sizeof(*m));
	m->gated = true;
	m->seq_len = 2048;
	m->global_batch = 2048;
	m->grad_bytes_per_param = DEFAULT_GRAD_BYTES;
	m->optimizer_bytes_per_param = DEFAULT_OPTIMIZER_BYTES;
	if (iniparser_find_entry(d, "model") == 0) {
		rc = ar_seterr(-AR_EINVAL, "%s: no [model] section", path);
		goto out;
	}
	for (size_t i = 0; i < ARRAY_SIZE(moved); i++)
		if (iniparser_find_entry(d, moved[i].key)) {
			rc = ar_seterr(-AR_EINVAL, "%s: [training] %s %s (docs/profiles.md)",
				       path, strchr(moved[i].key, ':') + 1, moved[i].why);
			goto out;
		}
	if ((rc = ini_check_keys(d, path, "model", known_model)) < 0 ||
	    (rc = ini_check_keys(d, path, "training", known_training)) < 0 ||
	    (rc = ini_name(d, path, "model", expect, m->name)) < 0 ||
	    (rc = ini_int(d, path, "model", "blocks", 1, 1024, true, &m->blocks)) < 0 ||
	    (rc = ini_int(d, path, "model", "hidden", 64, 1 << 17, true, &m->hidden)) < 0 ||
	    (rc = ini_int(d, path, "model", "ffn", 0, 1 << 20, true, &m->ffn)) < 0 ||
	    (rc = ini_int(d, path, "model", "heads", 1, 4096, true, &m->heads)) < 0 ||
	    (rc = ini_int(d, path, "model", "kv_heads", 1, 4096, true, &m->kv_heads)) < 0 ||
	    (rc = ini_int(d, path, "model", "head_dim", 1, 4096, true, &m->head_dim)) < 0 ||
	    (rc = ini_int(d, path, "model", "vocab", 1, 1 << 24, true, &m->vocab)) < 0 ||
	    (rc = ini_int(d, path, "model", "experts", 0, 4096, false, &m->experts)) < 0 ||
	    (rc = ini_int(d, path, "model", "top_k", 0, 4096, false, &m->top_k)) < 0 ||
	    (rc = ini_int(d, path, "model", "expert_ffn", 0, 1 << 20, false, &m->expert_ffn)) < 0 ||
	    (rc = ini_int(d, path, "model", "shared_experts", 0, 64, false, &m->shared_experts)) < 0 ||
	    (rc = ini_int(d, path, "model", "dense_layers", 0, 1024, false, &m->dense_layers)) < 0 ||
	    (rc = ini_int(d, path, "model", "q_lora_rank", 0, 1 << 16, false, &m->q_lora_rank)) < 0 ||
	    (rc = ini_int(d, path, "model", "kv_lora_rank", 0, 1 << 16, false, &m->kv_lora_rank)) < 0 ||
	    (rc = ini_bool(d, path, "model", "gated", &m->gated)) < 0 ||
	    (rc = ini_bool(d, path, "model", "tied_embeddings", &m->tied_embeddings)) < 0 ||
	    (rc = ini_int(d, path, "training", "seq_len", 1, 1 << 20, false, &m->seq_len)) < 0 ||
	    (rc = ini_int(d, path, "training", "global_batch", 1, 1 << 24, false, &m->global_batch)) < 0 ||
	    (rc = ini_double(d, path, "training", "grad_bytes_per_param", 0, 16, false,
			     &m->grad_bytes_per_param)) < 0 ||
	    (rc = ini_double(d, path, "training", "optimizer_bytes_per_param", 0, 64, false,
			     &m->optimizer_bytes_per_param)) < 0 ||
	    (rc = ini_double(d, path, "training", "bucket_params", 0, 1e12, false,
			     &m->bucket_params)) < 0)
		goto out;
	m->state_bytes_per_param = 2 + m->grad_bytes_per_param +
				   m->optimizer_bytes_per_param;
	if (m->experts > 0 && (m->top_k < 1 || m->top_k > m->experts ||
			       m->expert_ffn < 1 || m->dense_layers >= m->blocks)) {
		rc = ar_seterr(-AR_EINVAL, "%s: an MoE model needs 1 <= top_k <= experts, expert_ffn > 0 and dense_layers < blocks",
			       path);
		goto out;
	}
	if (m->experts == 0 && m->ffn < 1) {
		rc = ar_seterr(-AR_EINVAL, "%s: [model] ffn must be positive for a dense model",
			       path);
		goto out;
	}
out:
	iniparser_freedict(d);
	return rc;
}

/*
 * Every layer computes something: a zero forward or backward time is a
 * broken profile (it would price a plan at no time), not a fast GPU.
 */
#define LAYER_MIN_MS 1e-6

/* One file's entries as written: [tp index][mbs index][type]. */
typedef struct costmodel_layer_profile
	raw_table[COSTMODEL_NUM_TP][COSTMODEL_NUM_MBS][COSTMODEL_NUM_LAYER_TYPES];

/*
 * The optional parts of an entry (fwd_attn_ms, ...): -1 when the file
 * lacks one.  A file written before they existed then prices at its own
 * sequence length with no recomputation only.
 */
static int load_parts(dictionary *d, const char *path, const char *sec,
		      struct costmodel_layer_profile *p)
{
	static const struct {
		const char *key;
		size_t off;
	} parts[] = {
		{ "fwd_attn_ms", offsetof(struct costmodel_layer_profile, fwd_attn_ms) },
		{ "bwd_attn_ms", offsetof(struct costmodel_layer_profile, bwd_attn_ms) },
		{ "fwd_comm_ms", offsetof(struct costmodel_layer_profile, fwd_comm_ms) },
		{ "recompute_selective_ms", offsetof(struct costmodel_layer_profile,
			recompute_ms[COSTMODEL_RECOMPUTE_SELECTIVE]) },
		{ "recompute_full_ms", offsetof(struct costmodel_layer_profile,
			recompute_ms[COSTMODEL_RECOMPUTE_FULL]) },
		{ "act_bytes_selective", offsetof(struct costmodel_layer_profile,
			recompute_act_bytes[COSTMODEL_RECOMPUTE_SELECTIVE]) },
		{ "act_bytes_full", offsetof(struct costmodel_layer_profile,
			recompute_act_bytes[COSTMODEL_RECOMPUTE_FULL]) },
	};
	int rc;

	for (size_t i = 0; i < ARRAY_SIZE(parts); i++) {
		double *v = (double *)((char *)p + parts[i].off);

		*v = -1;
		rc = ini_double(d, path, sec, parts[i].key, 0,
				strstr(parts[i].key, "bytes") ? 1e15 : 1e7,
				false, v);
		if (rc < 0)
			return rc;
	}
	if (p->fwd_attn_ms > p->fwd_ms || p->bwd_attn_ms > p->bwd_ms ||
	    p->fwd_comm_ms > p->comm_ms)
		return ar_seterr(-AR_EINVAL, "%s: [%s] a part (fwd_attn_ms, bwd_attn_ms, fwd_comm_ms) exceeds its whole",
				 path, sec);
	p->recompute_ms[COSTMODEL_RECOMPUTE_NONE] = 0;
	p->recompute_act_bytes[COSTMODEL_RECOMPUTE_NONE] = p->act_bytes;
	return 0;
}

/* Read the entries of one layer file into @raw, and its sequence length. */
static int read_layer_file(const char *path, bool measured, raw_table raw,
			   int *seq_len)
{
	static const char *const known[] = {
		"fwd_ms", "bwd_ms", "comm_ms", "act_bytes", "param_bytes",
		"fwd_attn_ms", "bwd_attn_ms", "fwd_comm_ms",
		"recompute_selective_ms", "act_bytes_selective",
		"recompute_full_ms", "act_bytes_full", NULL
	};
	dictionary *d;
	int rc, nsec;

	d = ini_open(path, &rc);
	if (!d)
		return rc;
	*seq_len = 0;
	if ((rc = ini_int(d, path, "profile", "seq_len", 1, 1 << 20, false,
			  seq_len)) < 0)
		goto out;
	nsec = iniparser_getnsec(d);
	for (int i = 0; i < nsec; i++) {
		const char *sec = iniparser_getsecname(d, i);
		char type_name[32];
		int tp, mbs, ti, mi, type, n = 0;
		struct costmodel_layer_profile p = { 0 };

		if (strcmp(sec, "profile") == 0)
			continue;
		if (sscanf(sec, "tp%d.mbs%d.%31[a-z]%n", &tp, &mbs, type_name,
			   &n) != 3 || sec[n] != '\0') {
			rc = ar_seterr(-AR_EINVAL, "%s: section [%s] is not tpK.mbsB.TYPE",
				       path, sec);
			goto out;
		}
		ti = cm_log2(tp);
		mi = cm_log2(mbs);
		for (type = 0; type < COSTMODEL_NUM_LAYER_TYPES; type++)
			if (strcmp(type_name, layer_type_names[type]) == 0)
				break;
		if (ti < 0 || ti >= COSTMODEL_NUM_TP || mi < 0 ||
		    mi >= COSTMODEL_NUM_MBS || type == COSTMODEL_NUM_LAYER_TYPES) {
			rc = ar_seterr(-AR_EINVAL, "%s: section [%s]: TP must be 1, 2, 4 or 8, micro-batch 1 to 16 (powers of two), type embed, block, attn, expert or head",
				       path, sec);
			goto out;
		}
		if ((rc = ini_check_keys(d, path, sec, known)) < 0 ||
		    (rc = ini_double(d, path, sec, "fwd_ms", LAYER_MIN_MS, 1e7, true, &p.fwd_ms)) < 0 ||
		    (rc = ini_double(d, path, sec, "bwd_ms", LAYER_MIN_MS, 1e7, true, &p.bwd_ms)) < 0 ||
		    (rc = ini_double(d, path, sec, "comm_ms", 0, 1e7, true, &p.comm_ms)) < 0 ||
		    (rc = ini_double(d, path, sec, "act_bytes", 0, 1e15, true, &p.act_bytes)) < 0 ||
		    (rc = ini_double(d, path, sec, "param_bytes", 0, 1e15, true, &p.param_bytes)) < 0 ||
		    (rc = load_parts(d, path, sec, &p)) < 0)
			goto out;
		p.present = true;
		p.measured = measured;
		raw[ti][mi][type] = p;
	}
out:
	iniparser_freedict(d);
	return rc;
}

/* Scale the optional part @v by @k, keeping "absent" (< 0) absent. */
static double part_scaled(double v, double k)
{
	return v < 0 ? v : v * k;
}

/*
 * The entry of a layer of @type at micro-batch mbs (index @mi) and
 * sequence length @seq, from entries made at @seq0.  Everything but the
 * attention core scales with the tokens, mbs * seq: the entry whose
 * micro-batch holds as many tokens at @seq0 is that work exactly, and
 * beyond the profiled sizes the nearest entry is scaled in proportion.
 * The attention core's FLOPs grow with the square of the sequence, so it
 * takes a further seq / seq0.  Weights do not change.
 */
static int scale_entry(const raw_table raw, int ti, int mi, int type,
		       int seq0, int seq, const char *path,
		       struct costmodel_layer_profile *out)
{
	double tokens = (double)(1 << mi) * seq / seq0;	/* micro-batch at seq0 */
	double k, q = (double)seq / seq0;
	const struct costmodel_layer_profile *b = NULL;
	double attn_f, attn_b;
	int bi = -1;

	/* The largest profiled micro-batch with at most as many tokens, else
	 * the smallest one. */
	for (int i = 0; i < COSTMODEL_NUM_MBS; i++)
		if (raw[ti][i][type].present && (1 << i) <= tokens * (1 + 1e-12))
			bi = i;
	for (int i = 0; bi < 0 && i < COSTMODEL_NUM_MBS; i++)
		if (raw[ti][i][type].present)
			bi = i;
	if (bi < 0)
		return 0;	/* nothing at this TP: the entry stays absent */
	b = &raw[ti][bi][type];
	k = tokens / (1 << bi);
	if (b->fwd_attn_ms < 0 || b->bwd_attn_ms < 0) {
		if (type == COSTMODEL_LAYER_BLOCK || type == COSTMODEL_LAYER_ATTN)
			return ar_seterr(-AR_EINVAL, "%s: [tp%d.mbs%d.%s] has no fwd_attn_ms and bwd_attn_ms, so it cannot be priced at sequence length %d (it was made for %d); write it again with arachne-profile",
					 path, 1 << ti, 1 << bi,
					 layer_type_names[type], seq, seq0);
		attn_f = attn_b = 0;	/* no attention in this layer */
	} else {
		attn_f = b->fwd_attn_ms;
		attn_b = b->bwd_attn_ms;
	}
	*out = *b;
	out->fwd_ms = (b->fwd_ms - attn_f) * k + attn_f * k * q;
	out->bwd_ms = (b->bwd_ms - attn_b) * k + attn_b * k * q;
	out->comm_ms = b->comm_ms * k;
	out->act_bytes = b->act_bytes * k;
	out->fwd_attn_ms = part_scaled(b->fwd_attn_ms, k * q);
	out->bwd_attn_ms = part_scaled(b->bwd_attn_ms, k * q);
	out->fwd_comm_ms = part_scaled(b->fwd_comm_ms, k);
	for (int r = 0; r < COSTMODEL_NUM_RECOMPUTE; r++)
		out->recompute_act_bytes[r] = part_scaled(b->recompute_act_bytes[r], k);
	/* Selective re-runs the attention core (and norms); full the whole
	 * forward with its collectives. */
	if (b->recompute_ms[COSTMODEL_RECOMPUTE_SELECTIVE] >= 0)
		out->recompute_ms[COSTMODEL_RECOMPUTE_SELECTIVE] =
			(b->recompute_ms[COSTMODEL_RECOMPUTE_SELECTIVE] - attn_f) * k +
			attn_f * k * q;
	if (b->recompute_ms[COSTMODEL_RECOMPUTE_FULL] > 0)
		out->recompute_ms[COSTMODEL_RECOMPUTE_FULL] = out->fwd_ms +
			(b->fwd_comm_ms >= 0 ? out->fwd_comm_ms :
			 (b->recompute_ms[COSTMODEL_RECOMPUTE_FULL] - b->fwd_ms) * k);
	return 0;
}

/*
 * Read one layer file of @gpu and put its entries, at the model's sequence
 * length, into cm->prof[gpu] (over what an earlier file put there).
 */
static int load_layers(struct costmodel *cm, int gpu, const char *path,
		       bool measured)
{
	raw_table *raw = calloc(1, sizeof(*raw));
	int seq0, seq = cm->model.seq_len, rc;

	if (!raw)
		return -ENOMEM;
	rc = read_layer_file(path, measured, *raw, &seq0);
	if (rc < 0)
		goto out;
	if (!seq0) {
		if (seq != cm->model_seq_len) {
			rc = ar_seterr(-AR_EINVAL, "%s: [profile] seq_len is missing, so its entries cannot be priced at sequence length %d",
				       path, seq);
			goto out;
		}
		seq0 = seq;
	}
	for (int ti = 0; ti < COSTMODEL_NUM_TP; ti++)
		for (int mi = 0; mi < COSTMODEL_NUM_MBS; mi++)
			for (int type = 0; type < COSTMODEL_NUM_LAYER_TYPES; type++) {
				struct costmodel_layer_profile p;

				if (seq == seq0) {
					if ((*raw)[ti][mi][type].present)
						cm->prof[gpu][ti][mi][type] = (*raw)[ti][mi][type];
					continue;
				}
				/* The file's entries, each at the new length. */
				if (!(*raw)[ti][mi][type].present)
					continue;
				rc = scale_entry(*raw, ti, mi, type, seq0, seq,
						 path, &p);
				if (rc < 0)
					goto out;
				cm->prof[gpu][ti][mi][type] = p;
			}
out:
	free(raw);
	return rc;
}

static int name_ok(const char *name)
{
	if (!*name || strlen(name) >= COSTMODEL_NAME_MAX)
		return 0;
	for (const char *p = name; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
		      *p == '-' || *p == '_' || *p == '.'))
			return 0;
	return name[0] != '.';
}

static int gpu_name_cmp(const void *a, const void *b)
{
	return strcmp(((const struct costmodel_gpu *)a)->name,
		      ((const struct costmodel_gpu *)b)->name);
}

static int load_gpus(struct costmodel *cm)
{
	char dir[PATH_MAX + 8], path[PATH_MAX * 2];
	struct dirent *de;
	DIR *dp;
	int rc = 0;

	snprintf(dir, sizeof(dir), "%s/gpus", cm->profiles_dir);
	dp = opendir(dir);
	if (!dp)
		return ar_seterr(-errno, "%s: %s", dir, strerror(errno));
	while ((de = readdir(dp))) {
		size_t len = strlen(de->d_name);
		char name[COSTMODEL_NAME_MAX];

		if (len < 5 || strcmp(de->d_name + len - 4, ".ini") != 0)
			continue;
		if (len - 4 >= sizeof(name))
			continue;
		memcpy(name, de->d_name, len - 4);
		name[len - 4] = '\0';
		if (!name_ok(name))
			continue;
		if (cm->ngpus == COSTMODEL_MAX_GPU_TYPES) {
			rc = ar_seterr(-AR_EINVAL, "%s: more than %d GPU profiles",
				       dir, COSTMODEL_MAX_GPU_TYPES);
			break;
		}
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		rc = load_gpu(path, name, &cm->gpus[cm->ngpus]);
		if (rc < 0)
			break;
		cm->ngpus++;
	}
	closedir(dp);
	if (rc == 0 && cm->ngpus == 0)
		rc = ar_seterr(-AR_ENOTFOUND, "%s: no GPU profiles", dir);
	/* Sorted by name, so type indices do not depend on readdir order. */
	qsort(cm->gpus, (size_t)cm->ngpus, sizeof(cm->gpus[0]), gpu_name_cmp);
	return rc;
}

static const char *default_profiles_dir(void)
{
	const char *env = getenv("AR_PROFILES");
	struct stat sb;

	if (env && *env)
		return env;
	if (stat(AR_PROFILES_DIR, &sb) == 0)
		return AR_PROFILES_DIR;
	return AR_SRC_PROFILES_DIR;	/* running from the build tree */
}

int costmodel_load(const char *model_name, const struct costmodel_opts *opts,
		   struct costmodel **cmp)
{
	static const struct costmodel_opts no_opts;
	struct costmodel *cm;
	const char *dir;
	char path[PATH_MAX * 2];
	int rc;

	*cmp = NULL;
	ar_clearerr();
	if (!opts)
		opts = &no_opts;
	if (!model_name || !name_ok(model_name))
		return ar_seterr(-AR_EINVAL, "model name \"%s\" is not valid",
				 model_name ? model_name : "");
	cm = calloc(1, sizeof(*cm));
	if (!cm)
		return -ENOMEM;
	dir = opts->profiles_dir ? opts->profiles_dir : default_profiles_dir();
	if (strlen(dir) >= sizeof(cm->profiles_dir)) {
		rc = ar_seterr(-AR_EINVAL, "profiles directory path is too long");
		goto err;
	}
	strcpy(cm->profiles_dir, dir);

	snprintf(path, sizeof(path), "%s/models/%s.ini", dir, model_name);
	rc = load_model(path, model_name, &cm->model);
	if (rc == -AR_ENOTFOUND) {
		ar_seterr(rc, "unknown model \"%s\" (no %s)", model_name, path);
		goto err;
	}
	if (rc < 0)
		goto err;
	if (opts->global_batch > 0)
		cm->model.global_batch = opts->global_batch;
	cm->model_seq_len = cm->model.seq_len;
	if (opts->seq_len > 0)
		cm->model.seq_len = opts->seq_len;
	cm->no_overlap = opts->no_overlap;
	cm->nlayers = cm->model.blocks + 2;
	cm->overhead_bytes = (opts->runtime_overhead_gib > 0 ?
			      opts->runtime_overhead_gib : DEFAULT_OVERHEAD_GIB) * GIB;

	rc = load_gpus(cm);
	if (rc < 0)
		goto err;
	if (opts->no_layer_profiles)
		goto done;

	for (int g = 0; g < cm->ngpus; g++) {
		struct stat sb;

		snprintf(path, sizeof(path), "%s/layers/%s/%s.ini", dir,
			 model_name, cm->gpus[g].name);
		rc = load_layers(cm, g, path, false);
		if (rc == -AR_ENOTFOUND)
			rc = 0;		/* this model is not profiled on this GPU */
		if (rc < 0)
			goto err;
		snprintf(path, sizeof(path), "%s/layers/%s/%s.measured.ini",
			 dir, model_name, cm->gpus[g].name);
		if (stat(path, &sb) == 0 && (rc = load_layers(cm, g, path, true)) < 0)
			goto err;
	}
done:
	*cmp = cm;
	return 0;
err:
	free(cm);
	return rc;
}

void costmodel_destroy(struct costmodel *cm)
{
	free(cm);
}

const struct costmodel_model *costmodel_model(const struct costmodel *cm)
{
	return &cm->model;
}

int costmodel_num_gpus(const struct costmodel *cm)
{
	return cm->ngpus;
}

const struct costmodel_gpu *costmodel_gpu(const struct costmodel *cm, int type)
{
	return type >= 0 && type < cm->ngpus ? &cm->gpus[type] : NULL;
}

int costmodel_gpu_find(const struct costmodel *cm, const char *name)
{
	for (int g = 0; g < cm->ngpus; g++)
		if (strcmp(cm->gpus[g].name, name) == 0)
			return g;
	return -1;
}

const char *costmodel_profiles_dir(const struct costmodel *cm)
{
	return cm->profiles_dir;
}

int costmodel_num_layers(const struct costmodel *cm)
{
	return cm->nlayers;
}

bool costmodel_layer_is_moe(const struct costmodel *cm, int layer)
{
	return cm_layer_type(cm, layer) == COSTMODEL_LAYER_ATTN;
}

const struct costmodel_layer_profile *
costmodel_profile(const struct costmodel *cm, int gpu, int tp, int mbs,
		  enum costmodel_layer_type type)
{
	if ((int)type < 0 || type >= COSTMODEL_NUM_LAYER_TYPES)
		return NULL;
	return cm_prof(cm, gpu, tp, mbs, type);
}
