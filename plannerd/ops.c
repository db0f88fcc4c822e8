/*
 * ops.c - the operations of PROTOCOL.md.
 *
 * ops_dispatch() runs on the I/O loop: it parses, authorizes, and answers
 * at once what needs neither the planner nor a durable write; the rest
 * becomes a task that ops_task_run() finishes on a worker.
 *
 * Authorization (SO_PEERCRED): root and slurm_user may act on any job;
 * any other uid may plan only as itself and read, replan or forget only
 * the jobs it owns; to it, other users' jobs do not exist.  A job's
 * owner is the user its plan request named.
 */
#include "config.h"

#include <errno.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ar.h"
#include "compose.h"
#include "planner.h"
#include "plannerd.h"
#include "slurmjobs.h"

static bool ops_is_privileged(const struct conf *conf, uid_t uid)
{
	return uid == 0 || uid == conf->slurm_uid;
}

/*
 * May peer @uid act on a job owned by @owner?  Another user's job is
 * answered as no job at all, in the words of store_get(): neither its
 * existence nor its owner is anyone else's business.
 */
static int ops_authorize(const struct conf *conf, uid_t uid, uid_t owner,
			 const char *job)
{
	if (ops_is_privileged(conf, uid) || uid == owner)
		return 0;
	return ar_seterr(-AR_ENOTFOUND, "job %s: no stored plan", job);
}

/*
 * Job ids are reused (a slurmctld whose state was cleared starts from 1
 * again), so a stored plan of another user may belong to an earlier job;
 * slurmctld knows who owns the id now.  On a worker, for a request whose
 * job id holds another user's stored plan: go on only when slurmctld says
 * the id is now the requester's, and say in the log that the old plan goes.
 */
static int ops_reclaim_check(const struct task *task)
{
	uid_t now;
	int rc;

	if (task->reclaim_from < 0)
		return 0;
	rc = sjob_owner(task->req.job, &now);
	if (rc == 0 && now == task->owner) {
		ar_log(LOG_NOTICE, "job %s: the stored plan of uid %ld was an earlier job with this id; slurmctld says uid %lu owns it now",
		       task->req.job, task->reclaim_from,
		       (unsigned long)task->owner);
		return 0;
	}
	return ar_seterr(-AR_EPERM, "job %s is another user's%s",
			 task->req.job,
			 rc == 0 ? "" : "; slurmctld could not say who owns it now");
}

static int ops_owner_resolve(const struct req *req, uid_t *ownerp)
{
	struct passwd pw, *res = NULL;
	char buf[4096];
	int rc;

	if (req->uid >= 0) {
		*ownerp = (uid_t)req->uid;
		return 0;
	}
	rc = getpwnam_r(req->user, &pw, buf, sizeof(buf), &res);
	if (rc)
		return ar_seterr(-rc, "user %s: %s", req->user, strerror(rc));
	if (!res)
		return ar_seterr(-AR_EINVAL, "user: no user \"%s\"", req->user);
	*ownerp = res->pw_uid;
	return 0;
}

static json_t *ops_status(struct daemon *d, const struct conf *conf)
{
	struct stats *s = &d->stats;

	return json_pack("{s:s, s:s, s:f, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:s, s:f, s:o}",
		"op", "status",
		"version", PACKAGE_VERSION,
		"uptime_s", ar_now() - d->started,
		"requests", (json_int_t)atomic_load(&s->requests),
		"errors", (json_int_t)atomic_load(&s->errors),
		"cache_hits", (json_int_t)atomic_load(&s->cache_hits),
		"plans_made", (json_int_t)atomic_load(&s->plans),
		"replans", (json_int_t)atomic_load(&s->replans),
		"timeouts", (json_int_t)atomic_load(&s->timeouts),
		"plans_stored", (json_int_t)store_count(d->store),
		"cache_entries", (json_int_t)cache_count(d->cache),
		"clients", (json_int_t)d->nconns,
		"in_flight", (json_int_t)d->nbusy,
		"queued", (json_int_t)pool_queued(d->pool),
		"planner", conf->planner,
		"budget_s", conf->budget_s,
		"node", topo_to_json(&d->topo));
}

/* get: the stored document's plan and the request it answered. */
static int ops_get(struct daemon *d, const struct conf *conf, uid_t peer,
		   const struct req *req, json_t **bodyp)
{
	json_t *doc;
	uid_t owner;
	int rc;

	rc = store_get(d->store, req->job, &owner, NULL, &doc);
	if (rc < 0)
		return rc;
	rc = ops_authorize(conf, peer, owner, req->job);
	if (rc == 0)
		*bodyp = json_pack("{s:s, s:s, s:I, s:O, s:O, s:O}",
				   "op", "get", "job", req->job,
				   "uid", (json_int_t)owner,
				   "request", json_object_get(doc, "request"),
				   "plan", json_object_get(doc, "plan"),
				   "updated", json_object_get(doc, "updated"));
	json_decref(doc);
	return rc;
}

static int ops_forget(struct daemon *d, const struct conf *conf, uid_t peer,
		      const struct req *req, json_t **bodyp)
{
	uid_t owner;
	int rc;

	rc = store_get(d->store, req->job, &owner, NULL, NULL);
	if (rc == 0)
		rc = ops_authorize(conf, peer, owner, req->job);
	if (rc == 0)
		rc = store_forget(d->store, req->job);
	if (rc == 0) {
		ar_log(LOG_INFO, "job %s: forgotten (asked by uid %lu)",
		       req->job, (unsigned long)peer);
		*bodyp = json_pack("{s:s, s:s}", "op", "forget",
				   "job", req->job);
	}
	return rc;
}

/* The normalized request of PROTOCOL.md: every choice made explicit. */
static int ops_request_normalize(struct daemon *d, const struct conf *conf,
				 const struct req *req, const json_t *model,
				 json_t **requestp)
{
	json_t *cluster;
	int rc;

	*requestp = NULL;
	rc = compose_normalize(conf, &d->topo, req->cluster, &cluster);
	if (rc < 0)
		return rc;
	if (model) {
		*requestp = json_pack("{s:O, s:o}", "model", model,
				      "cluster", cluster);
	} else {
		double budget = req->budget_s > 0 && req->budget_s < conf->budget_s ?
				req->budget_s : conf->budget_s;

		*requestp = json_pack("{s:{s:s, s:i, s:i, s:s, s:f}, s:o}",
				      "model", "name", req->model,
				      "global_batch", req->global_batch,
				      "seq_len", req->seq_len,
				      "planner", req->planner[0] ?
				      req->planner : conf->planner,
				      "budget_s", budget, "cluster", cluster);
	}
	return *requestp ? 0 : -ENOMEM;
}

/* The answer carries the composition as planned (the site map applied):
 * the trainer places ranks on the GPU names the plan uses. */
static json_t *ops_plan_body(const char *job, json_t *plan,
			     const json_t *request, bool cached)
{
	return json_pack("{s:s, s:s, s:b, s:O, s:O}", "op", "plan", "job", job,
			 "cached", cached, "plan", plan,
			 "cluster", json_object_get(request, "cluster"));
}

/*
 * plan on the loop: authorize, normalize, and answer from the store when
 * this job already has a plan for this very request; otherwise hand a
 * task to the pool (to plan, or only to store a cached plan).
 */
static int ops_plan(struct daemon *d, struct gen *gen, struct conn *c,
		    struct req *req, json_t **bodyp, struct task **taskp)
{
	const struct conf *conf = gen->conf;
	json_t *request = NULL, *doc = NULL;
	char *key = NULL, *old_key = NULL;
	struct task *task;
	uid_t owner, old_owner;
	bool reclaim = false;
	int rc;

	rc = ops_owner_resolve(req, &owner);
	if (rc < 0)
		return rc;
	if (!ops_is_privileged(conf, c->uid) && owner != c->uid)
		return ar_seterr(-AR_EPERM, "uid %lu may plan only as itself, not as uid %lu",
				 (unsigned long)c->uid, (unsigned long)owner);
	/*
	 * Another user's stored plan belongs to an earlier job with this id
	 * when slurmctld says so; the worker asks it, off the loop.
	 */
	if (store_get(d->store, req->job, &old_owner, &old_key, &doc) == 0 &&
	    old_owner != owner &&
	    ops_authorize(conf, c->uid, old_owner, req->job) < 0) {
		if (!sjob_supported()) {
			/* A plan cannot hide that the id is taken; it hides by whom. */
			rc = ar_seterr(-AR_EPERM, "job %s is another user's", req->job);
			goto out;
		}
		reclaim = true;
	}
	rc = ops_request_normalize(d, conf, req, NULL, &request);
	if (rc < 0)
		goto out;
	key = store_request_key(request);
	if (!key) {
		rc = -ENOMEM;
		goto out;
	}
	if (doc && !reclaim && old_owner == owner &&
	    strcmp(old_key, key) == 0) {
		atomic_fetch_add(&d->stats.cache_hits, 1);
		*bodyp = ops_plan_body(req->job, json_object_get(doc, "plan"),
				       request, true);
		rc = *bodyp ? 0 : -ENOMEM;
		goto out;
	}
	task = calloc(1, sizeof(*task));
	if (!task) {
		rc = -ENOMEM;
		goto out;
	}
	task->cached = cache_get(d->cache, key);
	if (task->cached)
		atomic_fetch_add(&d->stats.cache_hits, 1);
	task->owner = owner;
	task->request = request;
	task->key = key;
	task->reclaim_from = reclaim ? (long)old_owner : -1;
	request = NULL;
	key = NULL;
	*taskp = task;
out:
	json_decref(doc);
	json_decref(request);
	free(old_key);
	free(key);
	return rc;
}

/*
 * replan on the loop: the owner is the stored job's; a daemon that never
 * saw the job takes the request's word (its "user", else the caller) when
 * the request carries the previous plan, authorized as a plan would be.
 */
#define REPLAN_UNKNOWN "job %s: no stored plan on this daemon; send the plan the job runs now as \"previous\" (PROTOCOL.md)"

static int ops_replan(struct daemon *d, struct gen *gen, struct conn *c,
		      struct req *req, struct task **taskp)
{
	const struct conf *conf = gen->conf;
	struct task *task;
	uid_t owner = c->uid, claimed = c->uid;
	bool reclaim = false;
	int rc;

	if (req->user[0] || req->uid >= 0) {
		rc = ops_owner_resolve(req, &claimed);
		if (rc < 0)
			return rc;
	}
	rc = store_get(d->store, req->job, &owner, NULL, NULL);
	if (rc == 0) {
		rc = ops_authorize(conf, c->uid, owner, req->job);
		if (rc < 0 && req->previous_plan && claimed == c->uid &&
		    sjob_supported()) {
			reclaim = true;	/* the worker asks slurmctld */
			rc = 0;
		} else if (rc < 0) {
			/* Another user's job reads as one this daemon lacks. */
			rc = ar_seterr(-AR_ENOTFOUND, REPLAN_UNKNOWN, req->job);
		}
	} else if (rc == -AR_ENOTFOUND && req->previous_plan) {
		owner = claimed;
		rc = ops_is_privileged(conf, c->uid) || owner == c->uid ? 0 :
		     ar_seterr(-AR_EPERM, "uid %lu may replan only as itself, not as uid %lu",
			       (unsigned long)c->uid, (unsigned long)owner);
	} else if (rc == -AR_ENOTFOUND) {
		rc = ar_seterr(-AR_ENOTFOUND, REPLAN_UNKNOWN, req->job);
	}
	if (rc < 0)
		return rc;
	task = calloc(1, sizeof(*task));
	if (!task)
		return -ENOMEM;
	task->owner = reclaim ? claimed : owner;
	task->reclaim_from = reclaim ? (long)owner : -1;
	*taskp = task;
	return 0;
}

void ops_dispatch(struct daemon *d, struct conn *c, const char *line,
		  size_t len, char **replyp, struct task **taskp)
{
	struct gen *gen = gen_get(d);
	struct task *task = NULL;
	json_t *body = NULL;
	struct req req;
	int rc;

	*replyp = NULL;
	*taskp = NULL;
	atomic_fetch_add(&d->stats.requests, 1);
	ar_clearerr();
	rc = req_parse(line, len, &req);
	if (rc < 0)
		goto out;
	if (d->draining && (req.op == REQ_PLAN || req.op == REQ_REPLAN)) {
		rc = ar_seterr(-ESHUTDOWN, "plannerd is shutting down");
		goto out;
	}
	switch (req.op) {
	case REQ_PING:
		body = json_pack("{s:s, s:s, s:I}", "op", "ping",
				 "version", PACKAGE_VERSION,
				 "uid", (json_int_t)c->uid);
		break;
	case REQ_STATUS:
		body = ops_status(d, gen->conf);
		break;
	case REQ_GET:
		rc = ops_get(d, gen->conf, c->uid, &req, &body);
		break;
	case REQ_FORGET:
		rc = ops_forget(d, gen->conf, c->uid, &req, &body);
		break;
	case REQ_PLAN:
		rc = ops_plan(d, gen, c, &req, &body, &task);
		break;
	case REQ_REPLAN:
		rc = ops_replan(d, gen, c, &req, &task);
		break;
	}
	if (rc == 0 && !body && !task)
		rc = -ENOMEM;
out:
	if (rc < 0) {
		atomic_fetch_add(&d->stats.errors, 1);
		ar_log(LOG_DEBUG, "uid %lu: %s: %s", (unsigned long)c->uid,
		       req_err_code(rc), ar_errmsg());
		*replyp = req_reply_error(req.id, rc, ar_errmsg());
		free(task);
		req_fini(&req);
		gen_put(gen);
		return;
	}
	if (task) {
		task->d = d;
		task->conn = c;
		task->gen = gen;
		task->peer_uid = c->uid;
		task->req = req;	/* the task owns its references now */
		*taskp = task;
		return;
	}
	*replyp = req_reply_ok(req.id, body);
	req_fini(&req);
	gen_put(gen);
}

static json_t *ops_job_doc(const char *job, uid_t owner, const char *user,
			   json_t *request, json_t *plan)
{
	json_t *doc = json_pack("{s:i, s:s, s:I, s:O, s:O, s:I}",
				"arachne_job", 1, "job", job,
				"uid", (json_int_t)owner,
				"request", request, "plan", plan,
				"updated", (json_int_t)time(NULL));

	if (doc && user[0])
		json_object_set_new(doc, "user", json_string(user));
	return doc;
}

/* plan on a worker: plan (unless cached), store, answer. */
static int ops_task_plan(struct task *task, json_t **bodyp)
{
	struct daemon *d = task->d;
	json_t *plan = NULL, *doc = NULL;
	int rc;

	rc = ops_reclaim_check(task);
	if (rc < 0)
		return rc;
	plan = json_incref(task->cached);
	if (!plan) {
		rc = planner_plan(task->gen->planner, task->request, &plan);
		if (rc < 0)
			return rc;
		atomic_fetch_add(&d->stats.plans, 1);
		cache_put(d->cache, task->key, plan);
	}
	doc = ops_job_doc(task->req.job, task->owner, task->req.user,
			  task->request, plan);
	rc = doc ? store_put(d->store, task->req.job, task->owner, doc) :
	     -ENOMEM;
	if (rc == 0) {
		*bodyp = ops_plan_body(task->req.job, plan, task->request,
				       task->cached);
		rc = *bodyp ? 0 : -ENOMEM;
	}
	json_decref(doc);
	json_decref(plan);
	return rc;
}

/*
 * The model spec of a replan: the request's, else the stored job's, else
 * the previous plan's model, batch and sequence length with the
 * configured planner and budget.  A new reference, or NULL.
 */
static json_t *ops_replan_model(const struct conf *conf, const struct req *req,
				const json_t *doc)
{
	const json_t *plan = req->previous_plan;

	if (req->model[0])
		return NULL;	/* ops_request_normalize() takes it from req */
	if (doc)
		return json_incref(json_object_get(json_object_get(doc, "request"),
						   "model"));
	return json_pack("{s:O, s:O, s:O, s:s, s:f}",
			 "name", json_object_get(plan, "model"),
			 "global_batch", json_object_get(plan, "global_batch"),
			 "seq_len", json_object_get(plan, "seq_len"),
			 "planner", conf->planner, "budget_s", conf->budget_s);
}

/*
 * replan on a worker: plan the new composition, decide, store, answer.
 * The old plan is the request's "previous" when it has one (the job's
 * plan directory is the truth; this daemon's store may be stale or
 * empty), else the stored one.
 */
static int ops_task_replan(struct task *task, json_t **bodyp)
{
	struct daemon *d = task->d;
	const struct conf *conf = task->gen->conf;
	const struct req *req = &task->req;
	json_t *doc = NULL, *request = NULL, *answer = NULL, *newdoc = NULL;
	json_t *old_request = NULL, *model = NULL, *old_cluster = NULL;
	const json_t *old_plan;
	double horizon = req->horizon_s > 0 ? req->horizon_s :
			 conf->replan_horizon_s;
	const char *user = req->user;
	uid_t owner = task->owner;
	int rc;

	rc = ops_reclaim_check(task);
	if (rc < 0)
		goto out;
	/* The job may have changed since the loop looked; look again. */
	rc = store_get(d->store, req->job, &owner, NULL, &doc);
	if (rc == -AR_ENOTFOUND && req->previous_plan)
		rc = 0;		/* a job this daemon never saw */
	else if (rc == 0 && task->reclaim_from < 0)
		rc = ops_authorize(conf, task->peer_uid, owner, req->job);
	if (task->reclaim_from >= 0 || !doc)
		owner = task->owner;
	if (rc < 0)
		goto out;
	if (task->reclaim_from >= 0) {
		json_decref(doc);
		doc = NULL;
	}
	if (!user[0] && doc && json_is_string(json_object_get(doc, "user")))
		user = json_string_value(json_object_get(doc, "user"));
	model = ops_replan_model(conf, req, doc);
	rc = ops_request_normalize(d, conf, req, model, &request);
	if (rc < 0)
		goto out;
	if (req->previous_plan) {
		rc = compose_normalize(conf, &d->topo, req->previous_cluster,
				       &old_cluster);
		if (rc < 0) {
			char msg[512];

			snprintf(msg, sizeof(msg), "%s", ar_errmsg());
			rc = ar_seterr(rc, "previous.cluster: %s", msg);
			goto out;
		}
		old_request = json_pack("{s:O, s:O}", "model",
					json_object_get(request, "model"),
					"cluster", old_cluster);
		old_plan = req->previous_plan;
	} else {
		old_request = json_incref(json_object_get(doc, "request"));
		old_plan = json_object_get(doc, "plan");
	}
	if (!old_request) {
		rc = -ENOMEM;
		goto out;
	}
	rc = planner_replan(task->gen->planner, old_request, old_plan, request,
			    horizon, &answer);
	if (rc < 0)
		goto out;
	atomic_fetch_add(&d->stats.replans, 1);
	/* Kept or not, the job now runs on the new composition. */
	newdoc = ops_job_doc(req->job, owner, user, request,
			     json_object_get(answer, "plan"));
	rc = newdoc ? store_put(d->store, req->job, owner, newdoc) : -ENOMEM;
	if (rc < 0)
		goto out;
	json_object_set_new(answer, "op", json_string("replan"));
	json_object_set_new(answer, "job", json_string(req->job));
	json_object_set(answer, "cluster", json_object_get(request, "cluster"));
	*bodyp = answer;
	answer = NULL;
out:
	json_decref(doc);
	json_decref(model);
	json_decref(old_cluster);
	json_decref(old_request);
	json_decref(request);
	json_decref(answer);
	json_decref(newdoc);
	return rc;
}

/* What a log line says of an answer: a plan's source, a replan's verdict. */
static void ops_log_answer(const struct task *task, const json_t *body)
{
	const char *job = task->req.job;
	unsigned long uid = (unsigned long)task->peer_uid;

	if (task->req.op == REQ_PLAN) {
		ar_log(LOG_INFO, "job %s: plan answered for uid %lu (%s)", job,
		       uid, json_is_true(json_object_get(body, "cached")) ?
		       "from the cache" : "planned");
		return;
	}
	if (json_is_true(json_object_get(body, "kept")))
		ar_log(LOG_INFO, "job %s: replan answered for uid %lu: the job keeps its plan (%s)",
		       job, uid, json_string_value(json_object_get(body, "reason")));
	else
		ar_log(LOG_INFO, "job %s: replan answered for uid %lu: the job moves to a new plan, %.4g -> %.4g samples/s, %.3f s of migration",
		       job, uid,
		       json_number_value(json_object_get(body, "old_samples_per_s")),
		       json_number_value(json_object_get(body, "new_samples_per_s")),
		       json_number_value(json_object_get(body, "migration_s")));
}

void ops_task_run(struct task *task)
{
	json_t *body = NULL;
	int rc;

	ar_clearerr();
	rc = task->req.op == REQ_PLAN ? ops_task_plan(task, &body) :
	     ops_task_replan(task, &body);
	if (rc < 0) {
		ar_log(LOG_INFO, "job %s: %s failed: %s", task->req.job,
		       req_op_name(task->req.op), ar_errmsg());
		task->reply = req_reply_error(task->req.id, rc, ar_errmsg());
		task->failed = true;
		return;
	}
	ops_log_answer(task, body);
	task->reply = req_reply_ok(task->req.id, body);
}

void ops_task_free(struct task *task)
{
	if (!task)
		return;
	req_fini(&task->req);
	json_decref(task->request);
	json_decref(task->cached);
	free(task->key);
	free(task->reply);
	gen_put(task->gen);
	free(task);
}
