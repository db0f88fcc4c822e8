/* req.c - request parsing and answer encoding (PROTOCOL.md). */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ar.h"
#include "req.h"

static const char *const req_op_names[] = {
	[REQ_PING] = "ping", [REQ_STATUS] = "status", [REQ_PLAN] = "plan",
	[REQ_REPLAN] = "replan", [REQ_GET] = "get", [REQ_FORGET] = "forget",
};

/* The keys each op accepts; anything else is an error. */
static const char *const req_keys_simple[] = { "op", "id", NULL };
static const char *const req_keys_job[] = { "op", "id", "job", NULL };
static const char *const req_keys_plan[] = {
	"op", "id", "job", "user", "model", "cluster", NULL
};
static const char *const req_keys_replan[] = {
	"op", "id", "job", "cluster", "horizon_s", "user", "model", "previous",
	NULL
};
static const char *const req_keys_previous[] = { "plan", "cluster", NULL };
static const char *const req_keys_model[] = {
	"name", "global_batch", "seq_len", "planner", "budget_s", NULL
};

const char *req_op_name(enum req_op op)
{
	return req_op_names[op];
}

/*
 * A job id becomes a file name under the state directory, so it is
 * limited to what Slurm job ids look like (digits, and "1234+1" for a
 * HetJob component, "1234_7" for an array task) plus letters, '.' and '-'
 * for tests and other schedulers; never '/', never a leading '.'.
 */
static bool req_job_is_valid(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n >= REQ_JOB_MAX || s[0] == '.')
		return false;
	for (; *s; s++)
		if (!strchr("abcdefghijklmnopqrstuvwxyz"
			    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.+-", *s))
			return false;
	return true;
}

/* Names of users, models and planners: printable, no spaces or '/'. */
static bool req_name_is_valid(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n >= REQ_NAME_MAX || s[0] == '.')
		return false;
	for (; *s; s++)
		if (*s <= ' ' || *s > '~' || *s == '/' || *s == '"' ||
		    *s == '\\')
			return false;
	return true;
}

static int req_job_parse(const json_t *v, struct req *req)
{
	if (json_is_integer(v)) {
		json_int_t j = json_integer_value(v);

		if (j < 0)
			return ar_seterr(-AR_EINVAL, "job: %lld is negative",
					 (long long)j);
		snprintf(req->job, sizeof(req->job), "%lld", (long long)j);
		return 0;
	}
	if (!json_is_string(v))
		return ar_seterr(-AR_EINVAL, "job: expected a string or a non-negative integer");
	if (!req_job_is_valid(json_string_value(v)))
		return ar_seterr(-AR_EINVAL, "job: \"%.64s\" is not a job id (1 to %d of A-Z a-z 0-9 _ . + -, not starting with .)",
				 json_string_value(v), REQ_JOB_MAX - 1);
	strcpy(req->job, json_string_value(v));
	return 0;
}

/* Copy the valid name string @v into @dst; @what names the field. */
static int req_name_parse(const json_t *v, char *dst, const char *what)
{
	if (!json_is_string(v))
		return ar_seterr(-AR_EINVAL, "%s: expected a string", what);
	if (!req_name_is_valid(json_string_value(v)))
		return ar_seterr(-AR_EINVAL, "%s: \"%.64s\" is not a valid name (1 to %d printable characters, no spaces or /)",
				 what, json_string_value(v), REQ_NAME_MAX - 1);
	strcpy(dst, json_string_value(v));
	return 0;
}

/* A positive integer up to @max, or absent (0). */
static int req_count_parse(const json_t *obj, const char *key, int max,
			   int *out)
{
	json_t *v = json_object_get(obj, key);

	*out = 0;
	if (!v)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 1 ||
	    json_integer_value(v) > max)
		return ar_seterr(-AR_EINVAL, "model.%s: expected an integer in [1, %d]",
				 key, max);
	*out = (int)json_integer_value(v);
	return 0;
}

/* A positive finite number, or absent (@unset). */
static int req_seconds_parse(const json_t *obj, const char *key,
			     const char *what, double unset, double *out)
{
	json_t *v = json_object_get(obj, key);
	double s;

	*out = unset;
	if (!v)
		return 0;
	if (!json_is_number(v))
		return ar_seterr(-AR_EINVAL, "%s: expected a number of seconds",
				 what);
	s = json_number_value(v);
	if (!isfinite(s) || s <= 0 || s > 1e9)
		return ar_seterr(-AR_EINVAL, "%s: %g is not in (0, 1e9]",
				 what, s);
	*out = s;
	return 0;
}

static int req_model_parse(const json_t *v, struct req *req)
{
	json_t *name;
	int rc;

	if (json_is_string(v))
		return req_name_parse(v, req->model, "model");
	if (!json_is_object(v))
		return ar_seterr(-AR_EINVAL, "model: expected a name or an object {\"name\": ...}");
	rc = ar_json_check_keys(v, req_keys_model, "model");
	if (rc < 0)
		return rc;
	name = json_object_get(v, "name");
	if (!name)
		return ar_seterr(-AR_EINVAL, "model.name: missing");
	rc = req_name_parse(name, req->model, "model.name");
	if (rc < 0)
		return rc;
	rc = req_count_parse(v, "global_batch", 1 << 24, &req->global_batch);
	if (rc < 0)
		return rc;
	rc = req_count_parse(v, "seq_len", 1 << 24, &req->seq_len);
	if (rc < 0)
		return rc;
	if (json_object_get(v, "planner")) {
		rc = req_name_parse(json_object_get(v, "planner"),
				    req->planner, "model.planner");
		if (rc < 0)
			return rc;
	}
	return req_seconds_parse(v, "budget_s", "model.budget_s", 0,
				 &req->budget_s);
}

static int req_user_parse(const json_t *v, struct req *req)
{
	if (json_is_integer(v)) {
		json_int_t uid = json_integer_value(v);

		if (uid < 0 || uid >= 0xffffffffLL)
			return ar_seterr(-AR_EINVAL, "user: %lld is not a uid",
					 (long long)uid);
		req->uid = (long)uid;
		return 0;
	}
	return req_name_parse(v, req->user, "user");
}

/*
 * The optional parts of a replan: the previous plan and composition (both
 * or neither), the owner and the model spec.
 */
static int req_replan_parse(const json_t *root, struct req *req)
{
	json_t *prev = json_object_get(root, "previous"), *v;
	int rc;

	rc = req_seconds_parse(root, "horizon_s", "horizon_s", -1,
			       &req->horizon_s);
	if (rc == 0 && (v = json_object_get(root, "user")))
		rc = req_user_parse(v, req);
	if (rc == 0 && (v = json_object_get(root, "model")))
		rc = req_model_parse(v, req);
	if (rc < 0 || !prev)
		return rc;
	if (!json_is_object(prev))
		return ar_seterr(-AR_EINVAL, "previous: expected {\"plan\": {...}, \"cluster\": {...}}");
	rc = ar_json_check_keys(prev, req_keys_previous, "previous");
	if (rc < 0)
		return rc;
	if (!json_is_object(json_object_get(prev, "plan")))
		return ar_seterr(-AR_EINVAL, "previous.plan: expected the plan the job runs now");
	if (!json_is_object(json_object_get(prev, "cluster")))
		return ar_seterr(-AR_EINVAL, "previous.cluster: expected the composition that plan was made for");
	req->previous_plan = json_incref(json_object_get(prev, "plan"));
	req->previous_cluster = json_incref(json_object_get(prev, "cluster"));
	return 0;
}

/* Fetch the required member @key of @root, or fail naming it. */
static int req_require(const json_t *root, const char *key, json_t **vp)
{
	*vp = json_object_get(root, key);
	if (!*vp)
		return ar_seterr(-AR_EINVAL, "%s: missing", key);
	return 0;
}

static int req_fields_parse(const json_t *root, struct req *req)
{
	static const char *const *const keys[] = {
		[REQ_PING] = req_keys_simple, [REQ_STATUS] = req_keys_simple,
		[REQ_PLAN] = req_keys_plan, [REQ_REPLAN] = req_keys_replan,
		[REQ_GET] = req_keys_job, [REQ_FORGET] = req_keys_job,
	};
	json_t *v;
	int rc;

	rc = ar_json_check_keys(root, keys[req->op], "request");
	if (rc < 0)
		return rc;
	if (req->op == REQ_PING || req->op == REQ_STATUS)
		return 0;
	rc = req_require(root, "job", &v);
	if (rc == 0)
		rc = req_job_parse(v, req);
	if (rc < 0 || req->op == REQ_GET || req->op == REQ_FORGET)
		return rc;

	rc = req_require(root, "cluster", &v);
	if (rc < 0)
		return rc;
	if (!json_is_object(v))
		return ar_seterr(-AR_EINVAL, "cluster: expected a composition object {\"nodes\": [...]}");
	req->cluster = json_incref(v);
	if (req->op == REQ_REPLAN)
		return req_replan_parse(root, req);

	rc = req_require(root, "user", &v);
	if (rc == 0)
		rc = req_user_parse(v, req);
	if (rc == 0)
		rc = req_require(root, "model", &v);
	if (rc == 0)
		rc = req_model_parse(v, req);
	return rc;
}

int req_parse(const char *line, size_t len, struct req *req)
{
	json_error_t jerr;
	json_t *root, *op;
	int rc = -AR_EINVAL;
	size_t i;

	memset(req, 0, sizeof(*req));
	req->uid = -1;
	req->horizon_s = -1;
	root = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY,
			  &jerr);
	if (!root)
		return ar_seterr(-AR_EPROTO, "malformed JSON at column %d: %s",
				 jerr.column, jerr.text);
	if (!json_is_object(root)) {
		rc = ar_seterr(-AR_EPROTO, "a request is a JSON object");
		goto out;
	}
	req->id = json_incref(json_object_get(root, "id"));
	if (req->id && !json_is_string(req->id) && !json_is_integer(req->id)) {
		rc = ar_seterr(-AR_EINVAL, "id: expected a string or an integer");
		goto out;
	}
	op = json_object_get(root, "op");
	if (!op || !json_is_string(op)) {
		rc = ar_seterr(-AR_EINVAL, "op: missing or not a string");
		goto out;
	}
	for (i = 0; i < ARRAY_SIZE(req_op_names); i++)
		if (strcmp(json_string_value(op), req_op_names[i]) == 0)
			break;
	if (i == ARRAY_SIZE(req_op_names)) {
		rc = ar_seterr(-AR_EINVAL, "op: unknown operation \"%.32s\" (ping, status, plan, replan, get, forget)",
			       json_string_value(op));
		goto out;
	}
	req->op = (enum req_op)i;
	rc = req_fields_parse(root, req);
out:
	json_decref(root);
	return rc;
}

void req_fini(struct req *req)
{
	json_decref(req->id);
	json_decref(req->cluster);
	json_decref(req->previous_plan);
	json_decref(req->previous_cluster);
	req->id = NULL;
	req->cluster = NULL;
	req->previous_plan = NULL;
	req->previous_cluster = NULL;
}

const char *req_err_code(int rc)
{
	switch (rc < 0 ? -rc : rc) {
	case EMSGSIZE:
		return "too_large";
	case EAGAIN:
	case EBUSY:
		return "busy";
	case ESHUTDOWN:
		return "shutting_down";
	default:
		return ar_err_name(rc);
	}
}

/* Dump @body (taking the reference) as one line with a newline. */
static char *req_line(json_t *body)
{
	char *s = json_dumps(body, JSON_COMPACT);
	char *line = NULL;
	size_t n;

	json_decref(body);
	if (!s)
		return NULL;
	n = strlen(s);
	line = realloc(s, n + 2);
	if (!line) {
		free(s);
		return NULL;
	}
	line[n] = '\n';
	line[n + 1] = '\0';
	return line;
}

char *req_reply_error(const json_t *id, int rc, const char *message)
{
	json_t *body = json_pack("{s:b}", "ok", 0);
	json_t *msg;

	if (!body)
		return NULL;
	if (id)
		json_object_set(body, "id", (json_t *)id);
	/* A message quoting the request may hold a cut UTF-8 sequence,
	 * which json_string() refuses: fall back to the generic text. */
	msg = message && *message ? json_string(message) : NULL;
	if (!msg)
		msg = json_string(ar_strerror(rc));
	json_object_set_new(body, "error",
			    json_pack("{s:s, s:o}", "code", req_err_code(rc),
				      "message", msg));
	return req_line(body);
}

char *req_reply_ok(const json_t *id, json_t *body)
{
	json_t *out;

	if (!body)
		return NULL;
	/* "ok" (and "id") first, so a reader sees the verdict at once. */
	out = json_pack("{s:b}", "ok", 1);
	if (out && id)
		json_object_set(out, "id", (json_t *)id);
	if (!out || json_object_update(out, body) < 0) {
		json_decref(out);
		json_decref(body);
		return NULL;
	}
	json_decref(body);
	return req_line(out);
}
