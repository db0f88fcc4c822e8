/*
 * req.h - the plannerd wire protocol (PROTOCOL.md): parsing one request
 * line and encoding the answers.  Pure functions of their input, so the
 * unit tests and the fuzz target drive them without a daemon.
 */
#ifndef PLANNERD_REQ_H
#define PLANNERD_REQ_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

#define REQ_JOB_MAX	64		/* job id, NUL included */
#define REQ_NAME_MAX	32		/* user, model and planner names */

enum req_op {
	REQ_PING,
	REQ_STATUS,
	REQ_PLAN,
	REQ_REPLAN,
	REQ_GET,
	REQ_FORGET,
};

struct req {
	enum req_op op;
	json_t *id;			/* the client's "id", echoed; or NULL */
	char job[REQ_JOB_MAX];		/* plan, replan, get, forget */
	/* plan only */
	char user[REQ_NAME_MAX];	/* owner by name, or "" */
	long uid;			/* owner by number, or -1 */
	char model[REQ_NAME_MAX];
	int global_batch;		/* 0: the model's default */
	int seq_len;			/* 0: the model's default */
	char planner[REQ_NAME_MAX];	/* "": the configured planner */
	double budget_s;		/* 0: the configured budget */
	/* plan and replan */
	json_t *cluster;		/* the composition (a reference) */
	double horizon_s;		/* replan; < 0: the configured one */
	/*
	 * replan: what the job's plan directory holds, so that a daemon
	 * that never saw the job answers: the plan the job runs now and the
	 * composition it was made for (references, or NULL).  The model and
	 * user above are optional for a replan.
	 */
	json_t *previous_plan;
	json_t *previous_cluster;
};

/*
 * req_parse() - parse the request @line of @len bytes (no newline) into
 * @req, which the caller releases with req_fini() whatever the result.
 * Returns 0, -AR_EPROTO when the line is not a JSON object, or -AR_EINVAL
 * when a field is missing, unknown or has a bad value; ar_errmsg() names
 * the field.
 */
int req_parse(const char *line, size_t len, struct req *req);
void req_fini(struct req *req);

const char *req_op_name(enum req_op op);

/*
 * req_err_code() - the wire error code for @rc (-errno or -AR_E*):
 * ar_err_name()'s names, plus "too_large", "busy" and "shutting_down"
 * for the daemon's own conditions.
 */
const char *req_err_code(int rc);

/*
 * req_reply_error() / req_reply_ok() - one answer line, newline included,
 * in a new string the caller frees; NULL on ENOMEM.  @id (may be NULL) is
 * echoed.  req_reply_ok() adds "ok":true and "id" to @body and takes
 * ownership of the reference.
 */
char *req_reply_error(const json_t *id, int rc, const char *message);
char *req_reply_ok(const json_t *id, json_t *body);

#endif /* PLANNERD_REQ_H */
