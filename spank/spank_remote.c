/*
 * spank_remote.c - the plugin in slurmstepd: every step of an Arachne job
 * makes sure the job's plan matches its allocation, exports the plan, and
 * gives each task its role.
 *
 * user_init (as the job's user, on every node of the step) takes the
 * job's state lock and compares the allocation slurmctld reports (the job,
 * every HetJob component, every running job that joined it) with the
 * composition of the current plan generation.  No plan yet: ask plannerd
 * for one.  A different allocation (a join, a joined job gone, a shrink by
 * `scontrol update NumNodes`): ask plannerd to replan, which also answers
 * the migration.  Whichever node gets the lock first does the asking; the
 * others find the new generation.  So a running job learns of a change at
 * its next step, and every node of that step sees the same generation.
 *
 * task_init (in each task) exports the task's role; a failure recorded in
 * user_init is reported there, on the task's own stderr, which is where a
 * user looks: mode=advise warns, mode=enforce fails the task.
 *
 * exit of the batch step of a job that joined another: replan the other
 * job without this one, so the change shows up as early as possible.  At
 * the end of an Arachne job's own batch step, plannerd is told to forget
 * the job; the plan files stay in the job's directory.
 */
#include "config.h"

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

#include "ar.h"
#include "arachne.h"

static struct {
	bool active;		/* this step belongs to an Arachne job */
	bool batch;		/* the batch step: the script, not workers */
	uint32_t job_id;	/* this job (HetJob leader) */
	uint32_t target;	/* the job whose plan it follows */
	char dir[512];		/* target's plan directory */
	unsigned generation;
	json_t *plan;		/* the plan of that generation, or NULL */
	struct job_node *nodes;	/* the plan's nodes, for addresses */
	size_t nnodes;
	char failure[1024];	/* why there is no (current) plan */
} rs;

static char remote_env_buf[KV_VALUE_MAX * 2];

static const char *remote_getenv(const char *name, void *arg)
{
	spank_t sp = arg;

	if (spank_getenv(sp, name, remote_env_buf, sizeof(remote_env_buf)) !=
	    ESPANK_SUCCESS)
		return NULL;
	return remote_env_buf;
}

int remote_init_post_opt(spank_t sp)
{
	return opts_from_env(&arachne_opts, remote_getenv, sp);
}

static unsigned long remote_mode(void)
{
	return arachne_opts.mode_set ? arachne_opts.mode : arachne_conf.mode;
}

static const char *remote_model(void)
{
	if (arachne_opts.model_set)
		return arachne_opts.model;
	return arachne_conf.model[0] ? arachne_conf.model : NULL;
}

/* The job's directory: the user's output=DIR, or plan_dir/JOBID. */
static int remote_dir_prepare(uint32_t target, bool own, char *why,
			      size_t len)
{
	char link[600];
	int n;

	n = snprintf(link, sizeof(link), "%s/%u", arachne_conf.plan_dir,
		     target);
	if (n < 0 || (size_t)n >= sizeof(rs.dir)) {
		snprintf(why, len, "plan_dir %s: path too long",
			 arachne_conf.plan_dir);
		return -1;
	}
	if (!own) {
		/* realpath() wants PATH_MAX bytes: let it allocate them. */
		char *real = realpath(link, NULL);

		if (!real) {
			snprintf(why, len, "job %u has no Arachne plan directory (%s: %s); was it submitted with --arachne?",
				 target, link, strerror(errno));
			return -1;
		}
		n = snprintf(rs.dir, sizeof(rs.dir), "%s", real);
		free(real);
		if ((size_t)n >= sizeof(rs.dir)) {
			snprintf(why, len, "job %u: its plan directory's path is longer than %zu bytes",
				 target, sizeof(rs.dir) - 1);
			return -1;
		}
		return 0;
	}
	if (!arachne_opts.output_set) {
		strcpy(rs.dir, link);
		if (mkdir(rs.dir, 0700) < 0 && errno != EEXIST) {
			snprintf(why, len, "cannot create the plan directory %s: %s",
				 rs.dir, strerror(errno));
			return -1;
		}
		return 0;
	}
	snprintf(rs.dir, sizeof(rs.dir), "%s", arachne_opts.output);
	if (mkdir(rs.dir, 0700) < 0 && errno != EEXIST) {
		snprintf(why, len, "cannot create output=%s: %s", rs.dir,
			 strerror(errno));
		return -1;
	}
	/* Jobs that join this one find it through plan_dir. */
	if (symlink(rs.dir, link) < 0 && errno != EEXIST)
		slurm_info("arachne: job %u: cannot link %s to %s: %m", target,
			   link, rs.dir);
	return 0;
}

static int remote_nodes_append(const struct job_alloc *a)
{
	struct job_node *n;

	if (!a->nnodes)
		return 0;
	n = realloc(rs.nodes, (rs.nnodes + a->nnodes) * sizeof(*n));
	if (!n)
		return -1;
	memcpy(n + rs.nnodes, a->nodes, a->nnodes * sizeof(*n));
	rs.nodes = n;
	rs.nnodes += a->nnodes;
	return 0;
}

/*
 * The target's allocation now: its own nodes, then those of every joined
 * job that still runs (and is not @exclude).  Drops ended joins from
 * @joined.
 */
static int remote_nodes_gather(const struct job_alloc *target_alloc,
			       json_t *joined, uint32_t exclude, char *why,
			       size_t len)
{
	size_t i = 0;

	free(rs.nodes);
	rs.nodes = NULL;
	rs.nnodes = 0;
	if (remote_nodes_append(target_alloc) < 0)
		goto oom;
	while (i < json_array_size(joined)) {
		uint32_t j = (uint32_t)json_integer_value(
			json_array_get(joined, i));
		struct job_alloc ja;
		char jwhy[256];

		if (j == exclude ||
		    job_alloc_load(j, &ja, jwhy, sizeof(jwhy)) < 0 ||
		    !ja.running) {
			if (j != exclude)
				job_alloc_free(&ja);
			json_array_remove(joined, i);
			continue;
		}
		if (remote_nodes_append(&ja) < 0) {
			job_alloc_free(&ja);
			goto oom;
		}
		job_alloc_free(&ja);
		i++;
	}
	return 0;
oom:
	snprintf(why, len, "out of memory");
	return -1;
}

/* plan and replan requests as plannerd/PROTOCOL.md has them. */
static json_t *remote_request(const char *op, uint32_t target, uid_t uid,
			      json_t *comp)
{
	struct passwd *pw = getpwuid(uid);
	json_t *req = json_pack("{s:s, s:I, s:O}", "op", op, "job",
				(json_int_t)target, "cluster", comp);
	json_t *model;

	if (!strcmp(op, "replan"))
		return req;	/* plannerd keeps the job's model and user */
	if (pw)
		json_object_set_new(req, "user", json_string(pw->pw_name));
	else
		json_object_set_new(req, "user", json_integer(uid));
	model = json_object();
	if (remote_model())
		json_object_set_new(model, "name", json_string(remote_model()));
	if (arachne_opts.global_batch_set)
		json_object_set_new(model, "global_batch",
				    json_integer(arachne_opts.global_batch));
	if (arachne_opts.seq_len_set)
		json_object_set_new(model, "seq_len",
				    json_integer(arachne_opts.seq_len));
	if (arachne_opts.planner_set)
		json_object_set_new(model, "planner", json_string(
			arachne_planner_names[arachne_opts.planner]));
	json_object_set_new(req, "model", model);
	return req;
}

static int remote_plan_load(unsigned g, char *why, size_t len)
{
	char path[600];

	json_decref(rs.plan);
	rs.plan = NULL;
	rs.generation = g;
	if (!g)
		return 0;
	state_plan_path(rs.dir, g, path, sizeof(path));
	rs.plan = ar_json_load_file(path);
	if (!rs.plan) {
		snprintf(why, len, "cannot read plan generation %u: %s", g,
			 ar_errmsg());
		return -1;
	}
	return 0;
}

/*
 * Brings the target job's plan up to date with its allocation (see the
 * top of this file).  @exclude is a joined job that is leaving.  Returns 0
 * or -1 with @why set; rs.plan is the newest plan there is either way.
 */
static int remote_sync(uint32_t job_id, uid_t uid, uint32_t exclude,
		       char *why, size_t len)
{
	struct job_alloc own = { 0 }, tgt = { 0 };
	json_t *state = NULL, *comp = NULL, *req = NULL, *resp = NULL;
	json_t *joined, *plan, *mig;
	const char *op = NULL;
	char loadwhy[256];
	unsigned g = 0;
	int lockfd = -1, rc = -1, err;

	if (job_alloc_load(job_id, &own, why, len) < 0)
		return -1;
	rs.job_id = own.job_id;
	rs.target = arachne_opts.join ? (uint32_t)arachne_opts.join :
		    own.job_id;
	if (rs.target == own.job_id && arachne_opts.join) {
		snprintf(why, len, "join=%u: a job cannot join itself",
			 rs.target);
		goto out;
	}
	if (arachne_opts.join) {
		if (alloc_join_check(rs.target, uid, why, len) < 0)
			goto out;
		if (job_alloc_load(rs.target, &tgt, why, len) < 0)
			goto out;
		if (!tgt.running) {
			snprintf(why, len, "join=%u: job %u is not running",
				 rs.target, rs.target);
			goto out;
		}
	}
	if (remote_dir_prepare(rs.target, !arachne_opts.join, why, len) < 0)
		goto out;
	lockfd = state_lock(rs.dir, arachne_conf.timeout_ms);
	if (lockfd < 0) {
		snprintf(why, len, "cannot lock %s/lock: %s", rs.dir,
			 ar_strerror(lockfd));
		goto out;
	}
	if (state_load(rs.dir, &state) < 0) {
		snprintf(why, len, "%s/state.json: %s", rs.dir, ar_errmsg());
		goto out;
	}
	if (!state && arachne_opts.join) {
		snprintf(why, len, "join=%u: job %u has no plan yet",
			 rs.target, rs.target);
		goto out;
	}
	if (!state)
		state = json_pack("{s:I, s:i, s:[]}", "job_id",
				  (json_int_t)rs.target, "generation", 0,
				  "joined");
	joined = json_object_get(state, "joined");
	g = (unsigned)json_integer_value(json_object_get(state, "generation"));
	if (arachne_opts.join && own.job_id != exclude) {
		size_t i;
		json_t *v;

		json_array_foreach(joined, i, v)
			if (json_integer_value(v) == own.job_id)
				break;
		if (i == json_array_size(joined))
			json_array_append_new(joined,
					      json_integer(own.job_id));
	}
	if (remote_nodes_gather(arachne_opts.join ? &tgt : &own, joined,
				exclude, why, len) < 0)
		goto out;
	comp = job_composition(rs.nodes, rs.nnodes, rs.target);
	if (!g)
		op = "plan";
	else if (!json_equal(comp, json_object_get(state, "composition")))
		op = "replan";
	if (op) {
		req = remote_request(op, rs.target, uid, comp);
		rc = client_call(arachne_conf.socket, arachne_conf.timeout_ms,
				 req, &resp, why, len);
		if (rc < 0) {
			rc = -1;
			goto out_plan;
		}
		rc = -1;
		plan = json_object_get(resp, "plan");
		mig = json_object_get(resp, "migration");
		if (!json_is_object(plan)) {
			snprintf(why, len, "plannerd's %s answer has no plan",
				 op);
			goto out_plan;
		}
		json_object_set(state, "composition", comp);
		err = state_store(rs.dir, state, plan,
				  json_is_object(mig) ? mig : NULL, &g);
		if (err < 0) {
			snprintf(why, len, "cannot write the plan into %s: %s",
				 rs.dir, ar_strerror(err));
			goto out_plan;
		}
		slurm_info("arachne: job %u: plan generation %u (%s)",
			   rs.target, g, op);
	}
	rc = 0;
out_plan:
	/* Without a new plan the previous one, if any, stays in force. */
	if (remote_plan_load(g, loadwhy, sizeof(loadwhy)) < 0) {
		if (rc == 0)
			snprintf(why, len, "%s", loadwhy);
		rc = -1;
	}
out:
	state_unlock(lockfd);
	json_decref(resp);
	json_decref(req);
	json_decref(comp);
	json_decref(state);
	job_alloc_free(&tgt);
	job_alloc_free(&own);
	return rc;
}

static void remote_setenv(spank_t sp, const char *name, const char *fmt,
			  ...) __attribute__((format(printf, 3, 4)));
static void remote_setenv(spank_t sp, const char *name, const char *fmt,
			  ...)
{
	char val[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(val, sizeof(val), fmt, ap);
	va_end(ap);
	if (spank_setenv(sp, name, val, 1) != ESPANK_SUCCESS)
		slurm_error("arachne: cannot set %s", name);
}

static void remote_export_plan(spank_t sp)
{
	char path[600], summary[512];

	remote_setenv(sp, "ARACHNE_JOB_ID", "%u", rs.target);
	remote_setenv(sp, "ARACHNE_PLAN_DIR", "%s", rs.dir);
	if (rs.target != rs.job_id)
		remote_setenv(sp, "ARACHNE_JOINED", "%u", rs.target);
	if (!rs.plan)
		return;
	state_plan_path(rs.dir, rs.generation, path, sizeof(path));
	remote_setenv(sp, "ARACHNE_PLAN", "%s", path);
	remote_setenv(sp, "ARACHNE_PLAN_GENERATION", "%u", rs.generation);
	role_summary(rs.plan, summary, sizeof(summary));
	remote_setenv(sp, "ARACHNE_PLAN_SUMMARY", "%s", summary);
	state_migration_path(rs.dir, rs.generation, path, sizeof(path));
	if (rs.generation > 1 && access(path, R_OK) == 0)
		remote_setenv(sp, "ARACHNE_MIGRATION", "%s", path);
}

int remote_user_init(spank_t sp)
{
	uint32_t job_id = 0, step_id = 0, uid = 0;

	if (!arachne_opts.enabled)
		return 0;
	if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_STEPID, &step_id) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS) {
		slurm_error("arachne: cannot read the job id, step id or uid");
		return -1;
	}
	if (step_id == SLURM_EXTERN_CONT)
		return 0;	/* no tasks of the user's run there */
	rs.active = true;
	rs.batch = step_id == SLURM_BATCH_SCRIPT;
	/* The user reads this from task_init, on the job's own stderr. */
	if (remote_sync(job_id, uid, 0, rs.failure, sizeof(rs.failure)) < 0)
		slurm_info("arachne: job %u: %s", job_id, rs.failure);
	remote_export_plan(sp);
	return 0;
}

static const char *remote_node_addr(const char *node)
{
	for (size_t i = 0; i < rs.nnodes; i++)
		if (!strcmp(rs.nodes[i].name, node))
			return rs.nodes[i].addr;
	return node;
}

int remote_task_init(spank_t sp)
{
	uint32_t global = 0, local = 0;
	struct task_role r;
	char node[64];

	if (!rs.active)
		return 0;
	spank_get_item(sp, S_TASK_GLOBAL_ID, &global);
	spank_get_item(sp, S_TASK_ID, &local);
	if (rs.failure[0] && remote_mode() == ARACHNE_MODE_ENFORCE) {
		dprintf(STDERR_FILENO, "arachne: error: job %u: %s (mode=enforce)\n",
			rs.job_id, rs.failure);
		return -1;
	}
	if (rs.failure[0] && global == 0)
		dprintf(STDERR_FILENO, "arachne: warning: job %u: %s; running %s (mode=advise)\n",
			rs.job_id, rs.failure,
			rs.plan ? "with the previous plan" : "without a plan");
	if (!rs.plan || rs.batch)
		return 0;
	if (spank_getenv(sp, "SLURMD_NODENAME", node, sizeof(node)) !=
	    ESPANK_SUCCESS && gethostname(node, sizeof(node)) < 0)
		return 0;
	if (role_find(rs.plan, node, local, &r) < 0) {
		dprintf(STDERR_FILENO, "arachne: warning: job %u: plan generation %u is malformed; no role for task %u\n",
			rs.job_id, rs.generation, global);
		return remote_mode() == ARACHNE_MODE_ENFORCE ? -1 : 0;
	}
	remote_setenv(sp, "ARACHNE_LOCAL_GPU", "%u", local);
	if (!r.found) {
		remote_setenv(sp, "ARACHNE_ROLE", "unused");
		return 0;
	}
	remote_setenv(sp, "ARACHNE_ROLE", "worker");
	remote_setenv(sp, "ARACHNE_TEMPLATE", "%u", r.template);
	remote_setenv(sp, "ARACHNE_STAGE", "%u", r.stage);
	remote_setenv(sp, "ARACHNE_PP_RANK", "%u", r.stage);
	remote_setenv(sp, "ARACHNE_PP_SIZE", "%u", r.pp_size);
	remote_setenv(sp, "ARACHNE_TP_RANK", "%u", r.tp_rank);
	remote_setenv(sp, "ARACHNE_TP_SIZE", "%u", r.tp_size);
	remote_setenv(sp, "ARACHNE_DP_RANK", "%u", r.dp_rank);
	remote_setenv(sp, "ARACHNE_DP_SIZE", "%u", r.dp_size);
	remote_setenv(sp, "ARACHNE_PIPELINE", "%u", r.pipeline);
	remote_setenv(sp, "ARACHNE_LAYERS", "%ld-%ld", r.layer_first,
		      r.layer_last);
	remote_setenv(sp, "ARACHNE_EP", "%u", r.ep);
	remote_setenv(sp, "ARACHNE_ETP", "%u", r.etp);
	remote_setenv(sp, "ARACHNE_EDP", "%u", r.edp);
	remote_setenv(sp, "ARACHNE_RDZV_NODE", "%s", r.rdzv_node);
	remote_setenv(sp, "ARACHNE_RDZV_ADDR", "%s:%lu",
		      remote_node_addr(r.rdzv_node),
		      arachne_conf.rdzv_port + r.pipeline);
	return 0;
}

/* The job is over: plannerd may drop its stored plan (the files stay). */
static void remote_forget(void)
{
	json_t *req = json_pack("{s:s, s:I}", "op", "forget", "job",
				(json_int_t)rs.target);
	json_t *resp = NULL;
	char why[512];

	if (client_call(arachne_conf.socket, arachne_conf.timeout_ms, req,
			&resp, why, sizeof(why)) < 0)
		slurm_info("arachne: job %u: forget: %s", rs.target, why);
	json_decref(resp);
	json_decref(req);
}

int remote_exit(spank_t sp)
{
	uint32_t job_id = 0, uid = 0;
	char why[1024];

	if (rs.active && rs.batch && rs.generation &&
	    rs.target == rs.job_id)
		remote_forget();
	if (rs.active && rs.batch && arachne_opts.join &&
	    rs.target != rs.job_id && rs.generation &&
	    spank_get_item(sp, S_JOB_ID, &job_id) == ESPANK_SUCCESS &&
	    spank_get_item(sp, S_JOB_UID, &uid) == ESPANK_SUCCESS &&
	    remote_sync(job_id, uid, rs.job_id, why, sizeof(why)) < 0)
		slurm_error("arachne: job %u leaving job %u: %s", rs.job_id,
			    rs.target, why);
	json_decref(rs.plan);
	free(rs.nodes);
	memset(&rs, 0, sizeof(rs));
	return 0;
}
