/*
 * spank_remote.c - the plugin in slurmstepd: every step of an Arachne job
 * makes sure the job's plan matches its allocation, exports the plan, and
 * gives each task its role; the job's end removes its plan directory.
 *
 * user_init (as the job's user, on every node of the step) takes the job's
 * plan lock and compares the allocation slurmctld reports (the job, every
 * HetJob component, every running job that joined it) with the
 * composition of the generation in force (common/jobdir.c).  No plan yet:
 * ask plannerd for one.  A different allocation: ask plannerd to replan,
 * sending the plan the state is in (any node's plannerd can answer), and
 * write the next generation.  Whichever node gets the lock first does the
 * asking; the others find the new generation.
 *
 * Elastic changes are two-phase (docs/elastic.md): a join, a shrink or a
 * leave writes a generation that is "pending" until the job's processes
 * ran its migration (arachne-migrate, or the trainer itself) and said so
 * with `arachnectl commit`.  While it is pending, the GPUs that leave are
 * still held: the step that migrates sees them, their tasks get the role
 * "leaving", and nothing is replanned.  GPUs that vanish without that
 * (a node failure, an scontrol update nobody announced) are replanned at
 * the next step, and the state they held is reported lost.
 *
 * task_init (in each task) exports the task's role; a failure recorded in
 * user_init is reported there, on the task's own stderr: mode=advise
 * warns, mode=enforce fails the task.
 *
 * The end of the job's batch step tells plannerd to forget the job and
 * removes its plan directory; the job epilog (root, every node) does the
 * same for jobs without a batch step, and the job prolog removes a
 * directory an earlier job with the same id left behind.
 */
#include "config.h"

#include <errno.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <slurm/spank.h>

#include "ar.h"
#include "arachne.h"

/* How long a join waits for the running job to take its part (s). */
#define JOIN_WAIT_S	600

static struct {
	bool active;		/* this step belongs to an Arachne job */
	bool batch;		/* the batch step: the script, not workers */
	uint32_t job_id;	/* this job (HetJob leader) */
	uint32_t target;	/* the job whose plan it follows */
	char dir[600];		/* target's plan directory */
	char socket[KV_VALUE_MAX];	/* plannerd's, %n expanded */
	unsigned generation;
	json_t *plan;		/* the plan of that generation, or NULL */
	json_t *pending;	/* the reconfiguration under way, or NULL */
	json_t *lost;		/* nodes whose state the last change lost */
	struct job_node *nodes;	/* the allocation, for addresses */
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

/*
 * This node's Slurm name: SLURMD_NODENAME of the job's environment (one
 * host may run several slurmd), else of ours, else the short host name.
 */
static void remote_node_name(spank_t sp, char *buf, size_t len)
{
	const char *env;

	if (sp && spank_getenv(sp, "SLURMD_NODENAME", buf, (int)len) ==
	    ESPANK_SUCCESS && buf[0])
		return;
	env = getenv("SLURMD_NODENAME");
	if (env && *env) {
		snprintf(buf, len, "%s", env);
		return;
	}
	if (gethostname(buf, len) < 0)
		snprintf(buf, len, "localhost");
	buf[len - 1] = '\0';
	buf[strcspn(buf, ".")] = '\0';
}

void remote_socket_path(spank_t sp, char *buf, size_t len)
{
	char node[256];

	remote_node_name(sp, node, sizeof(node));
	conf_socket_expand(arachne_conf.socket, node, buf, len);
}

/* plan_dir/JOB, for @job. */
static int remote_link_path(uint32_t job, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%s/%u", arachne_conf.plan_dir, job);

	return n < 0 || (size_t)n >= len ? -1 : 0;
}

/*
 * A directory plan_dir/JOB that an earlier job with the same id left
 * (Slurm restarts job ids from 1 when its state is cleared): its state
 * names another start time or another owner.
 */
static bool remote_dir_is_stale(const char *dir, uint32_t uid,
				long long submit_time)
{
	json_t *state = NULL;
	bool stale;
	struct stat st;

	if (stat(dir, &st) < 0)
		return false;
	if (st.st_uid != uid)
		return true;
	if (ar_jobdir_load(dir, &state) < 0 || !state)
		return false;
	stale = json_integer_value(json_object_get(state, "submit_time")) !=
		submit_time ||
		json_integer_value(json_object_get(state, "uid")) != uid;
	json_decref(state);
	return stale;
}

/* The job's directory: the user's output=DIR, or plan_dir/JOBID. */
static int remote_dir_prepare(const struct job_alloc *own, bool joining,
			      char *why, size_t len)
{
	char link[300], *real;

	if (remote_link_path(rs.target, link, sizeof(link)) < 0) {
		snprintf(why, len, "plan_dir %s: path too long",
			 arachne_conf.plan_dir);
		return -1;
	}
	if (joining) {
		real = realpath(link, NULL);
		if (real && strlen(real) < sizeof(rs.dir)) {
			strcpy(rs.dir, real);
			free(real);
			return 0;
		}
		snprintf(why, len, "join=%u: job %u has no Arachne plan directory (%s: %s), so it was not submitted with --arachne or has ended",
			 rs.target, rs.target, link,
			 real ? "path too long" : strerror(errno));
		free(real);
		return -1;
	}
	if (remote_dir_is_stale(link, own->user_id, own->submit_time)) {
		struct stat st;

		/* Ours: clear it.  Another user's: only root can. */
		if (stat(link, &st) == 0 && st.st_uid == own->user_id &&
		    ar_jobdir_remove(link) == 0) {
			slurm_info("arachne: job %u: removed the plan directory an earlier job %u left",
				   rs.target, rs.target);
		} else {
			snprintf(why, len, "%s was left by an earlier job with this id (Slurm reuses ids when its state is cleared); the plugin's job prolog removes such directories as root, so slurmd does not load arachne.so (add it to the plugstack.conf that slurmd reads and restart slurmd)",
				 link);
			return -1;
		}
	}
	if (!arachne_opts.output_set) {
		snprintf(rs.dir, sizeof(rs.dir), "%s", link);
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
		slurm_info("arachne: job %u: cannot link %s to %s: %m",
			   rs.target, link, rs.dir);
	return 0;
}

static int remote_nodes_append(const struct job_alloc *a, json_t *owners)
{
	struct job_node *n;

	if (!a->nnodes)
		return 0;
	n = realloc(rs.nodes, (rs.nnodes + a->nnodes) * sizeof(*n));
	if (!n)
		return -1;
	memcpy(n + rs.nnodes, a->nodes, a->nnodes * sizeof(*n));
	rs.nodes = n;
	for (size_t i = 0; i < a->nnodes; i++)
		json_object_set_new(owners, a->nodes[i].name,
				    json_integer(a->job_id));
	rs.nnodes += a->nnodes;
	return 0;
}

/*
 * The target's allocation now: its own nodes, then those of every joined
 * job that still runs, each node with the job that holds it in @owners.
 * Joined jobs that ended are dropped from @joined.  A node held by two of
 * them is refused: a plan's GPU indices count one job's GPUs on a node.
 */
static int remote_nodes_gather(const struct job_alloc *target_alloc,
			       json_t *joined, json_t *owners, char *why,
			       size_t len)
{
	size_t i = 0;

	free(rs.nodes);
	rs.nodes = NULL;
	rs.nnodes = 0;
	json_object_clear(owners);
	if (remote_nodes_append(target_alloc, owners) < 0)
		goto oom;
	while (i < json_array_size(joined)) {
		uint32_t j = (uint32_t)json_integer_value(
			json_array_get(joined, i));
		struct job_alloc ja;
		char jwhy[256];

		if (job_alloc_load(j, &ja, jwhy, sizeof(jwhy)) < 0 ||
		    !ja.running) {
			job_alloc_free(&ja);
			json_array_remove(joined, i);
			continue;
		}
		for (size_t k = 0; k < ja.nnodes; k++) {
			if (json_object_get(owners, ja.nodes[k].name)) {
				snprintf(why, len, "node %s is held by job %u and by job %lld: an allocation that joins must not share nodes with the job",
					 ja.nodes[k].name, j,
					 (long long)json_integer_value(
						json_object_get(owners,
							ja.nodes[k].name)));
				job_alloc_free(&ja);
				return -1;
			}
		}
		if (remote_nodes_append(&ja, owners) < 0) {
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

/* The model spec of the first plan request, kept for every replan. */
static json_t *remote_model_spec(void)
{
	json_t *model = json_object();

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
	return model;
}

static json_t *remote_user(uid_t uid)
{
	struct passwd *pw = getpwuid(uid);

	return pw ? json_string(pw->pw_name) : json_integer(uid);
}

/* A new job's state: generation 0, what every replan will need. */
static json_t *remote_state_new(const struct job_alloc *own, uid_t uid)
{
	json_t *s = json_pack("{s:i, s:I, s:I, s:o, s:I, s:i, s:[], s:[], s:{}, s:o}",
			      "arachne_state", 2,
			      "job_id", (json_int_t)rs.target,
			      "uid", (json_int_t)uid,
			      "user", remote_user(uid),
			      "submit_time", (json_int_t)own->submit_time,
			      "generation", 0, "joined", "left", "nodes",
			      "model", remote_model_spec());

	if (s && arachne_opts.signal_set && arachne_opts.signal)
		json_object_set_new(s, "signal", json_string(
			arachne_signal_names[arachne_opts.signal]));
	return s;
}

static bool remote_list_has(const json_t *list, uint32_t job)
{
	const json_t *v;
	size_t i;

	json_array_foreach(list, i, v)
		if (json_integer_value(v) == job)
			return true;
	return false;
}

/* The nodes of @before's composition that @after does not have. */
static json_t *remote_gone(const json_t *before, const json_t *after)
{
	json_t *gone = json_array();
	const json_t *e;
	size_t i;

	json_array_foreach(json_object_get(before, "nodes"), i, e) {
		const char *host = json_string_value(json_object_get(e, "hosts"));

		if (host && !ar_composition_has(after, host))
			json_array_append_new(gone, json_string(host));
	}
	return gone;
}

/*
 * The job's comment: where scontrol show job and sacct show the plan.
 * Not after Slurm refused it for good (see arachnectl's elastic.c: a
 * resized job without an accounting database), which @state remembers.
 */
static void remote_comment(json_t *state, uint32_t job, unsigned g,
			   const json_t *plan, const char *pending)
{
	char summary[512], line[700];
	job_desc_msg_t d;

	if (json_is_false(json_object_get(state, "comment")))
		return;
	ar_plan_summary(plan, summary, sizeof(summary));
	snprintf(line, sizeof(line), "arachne generation %u%s%s: %s", g,
		 pending ? " pending " : "", pending ? pending : "", summary);
	slurm_init_job_desc_msg(&d);
	d.job_id = job;
	d.comment = line;
	if (slurm_update_job(&d) == SLURM_SUCCESS)
		return;
	if (slurm_get_errno() == ESLURM_JOB_SETTING_DB_INX) {
		json_object_set_new(state, "comment", json_false());
		ar_jobdir_save(rs.dir, state);
	}
	slurm_verbose("arachne: job %u: cannot set the comment: %s", job,
		      slurm_strerror(slurm_get_errno()));
}

/* Tell the running job's batch script, when it asked to be told. */
static void remote_notify(const json_t *state)
{
	const char *name = json_string_value(json_object_get(state, "signal"));
	int sig = arachne_signal_number(name);

	if (sig > 0 && slurm_kill_job(rs.target, (uint16_t)sig,
				      KILL_JOB_BATCH) != SLURM_SUCCESS)
		slurm_info("arachne: job %u: cannot send SIG%s: %s", rs.target,
			   name, slurm_strerror(slurm_get_errno()));
}

/*
 * Asks plannerd and writes the next generation.  @pending is the new
 * generation's pending reconfiguration (taken), @lost the nodes whose state
 * is gone with it (taken).  Returns 0 or -1 with @why set.
 */
static int remote_advance(json_t *state, const char *op, json_t *comp,
			  json_t *pending, json_t *lost, char *why, size_t len)
{
	json_t *req, *resp = NULL, *plan, *mig, *cluster;
	unsigned g = 0;
	int rc = -1, err;

	if (!strcmp(op, "plan")) {
		req = json_pack("{s:s, s:I, s:O, s:O, s:O}", "op", "plan",
				"job", (json_int_t)rs.target,
				"user", json_object_get(state, "user"),
				"model", json_object_get(state, "model"),
				"cluster", comp);
	} else {
		req = ar_jobdir_replan_request(rs.dir, state, comp);
		if (!req) {
			snprintf(why, len, "cannot read the plan the job runs now: %s",
				 ar_errmsg());
			goto out;
		}
	}
	if (client_call(rs.socket, arachne_conf.timeout_ms, req, &resp, why,
			len) < 0)
		goto out;
	plan = json_object_get(resp, "plan");
	mig = json_object_get(resp, "migration");
	if (!json_is_object(plan)) {
		snprintf(why, len, "plannerd's %s answer has no plan", op);
		goto out;
	}
	if (pending && !json_is_object(mig)) {
		/* Nothing moves (the old plan kept, or only idle GPUs came). */
		json_decref(pending);
		pending = NULL;
	}
	if (pending)
		json_object_set_new(pending, "generation", json_integer(
			json_integer_value(json_object_get(state, "generation")) + 1));
	json_object_set(state, "composition", comp);
	json_object_set_new(state, "pending", pending ? pending : json_null());
	pending = NULL;
	if (lost && json_array_size(lost))
		json_object_set_new(state, "lost", json_pack("{s:I, s:O}",
			"generation", json_integer_value(json_object_get(state, "generation")) + 1,
			"nodes", lost));
	/* plannerd's own view of the composition (its GRES types mapped to
	 * GPU profiles) goes with the plan: the trainer places on it. */
	cluster = json_object_get(resp, "cluster");
	err = ar_jobdir_store(rs.dir, state, plan,
			      json_is_object(cluster) ? cluster : NULL,
			      json_is_object(mig) ? mig : NULL, &g);
	if (err < 0) {
		snprintf(why, len, "cannot write the plan into %s: %s",
			 rs.dir, ar_strerror(err));
		goto out;
	}
	slurm_info("arachne: job %u: plan generation %u (%s%s%s)", rs.target,
		   g, op, json_is_object(json_object_get(state, "pending")) ?
		   ", pending " : "",
		   json_is_object(json_object_get(state, "pending")) ?
		   json_string_value(json_object_get(json_object_get(state, "pending"), "op")) : "");
	remote_comment(state, rs.target, g, plan,
		       json_string_value(json_object_get(json_object_get(state, "pending"), "op")));
	rc = 0;
out:
	json_decref(pending);
	json_decref(lost);
	json_decref(resp);
	json_decref(req);
	return rc;
}

/* The previous composition, joined list and owners, for an abort. */
static json_t *remote_previous(const json_t *state)
{
	return json_pack("{s:O, s:O, s:O}",
			 "composition", json_object_get(state, "composition"),
			 "joined", json_object_get(state, "joined"),
			 "nodes", json_object_get(state, "nodes"));
}

static int remote_plan_load(const json_t *state, char *why, size_t len)
{
	const json_t *lost = json_object_get(state, "lost");

	json_decref(rs.plan);
	json_decref(rs.pending);
	json_decref(rs.lost);
	rs.plan = rs.pending = rs.lost = NULL;
	rs.generation = state ? (unsigned)json_integer_value(
		json_object_get(state, "generation")) : 0;
	if (!rs.generation)
		return 0;
	if (json_is_object(json_object_get(state, "pending")))
		rs.pending = json_deep_copy(json_object_get(state, "pending"));
	if (json_integer_value(json_object_get(lost, "generation")) ==
	    rs.generation)
		rs.lost = json_incref(json_object_get(lost, "nodes"));
	rs.plan = ar_jobdir_plan(rs.dir, rs.generation);
	if (!rs.plan) {
		snprintf(why, len, "cannot read plan generation %u: %s",
			 rs.generation, ar_errmsg());
		return -1;
	}
	return 0;
}

/*
 * What the allocation now means for a job with a reconfiguration pending:
 * 0 when it is as expected (nothing to do, or the release happened), 1
 * when something else changed (replan).
 */
static int remote_pending_check(json_t *state, const json_t *comp)
{
	json_t *pending = json_object_get(state, "pending");
	const json_t *release = json_object_get(pending, "release");
	const json_t *current = json_object_get(state, "composition");
	json_t *without;
	bool expected;

	without = ar_composition_without(comp, release);
	expected = json_equal(without, current);
	json_decref(without);
	if (!expected)
		return 1;
	if (json_equal(comp, current) && json_array_size(release) &&
	    strcmp(json_string_value(json_object_get(pending, "op")), "leave")) {
		/*
		 * The release happened.  Before `arachnectl commit` said the
		 * migration ran, the state those GPUs held went with them.
		 */
		if (strcmp(json_string_value(json_object_get(pending, "phase")),
			   "migrated"))
			json_object_set_new(state, "lost", json_pack("{s:O, s:O}",
				"generation", json_object_get(state, "generation"),
				"nodes", release));
		json_object_set_new(state, "pending", json_null());
		ar_jobdir_save(rs.dir, state);
	}
	return 0;
}

/*
 * Brings the target job's plan up to date with its allocation (see the top
 * of this file).  Returns 0 or -1 with @why set; the newest plan there is
 * is loaded either way.
 */
static int remote_sync(uint32_t job_id, uid_t uid, char *why, size_t len)
{
	struct job_alloc own = { 0 }, tgt = { 0 };
	json_t *state = NULL, *comp = NULL, *joined, *owners = NULL;
	json_t *pending = NULL, *lost = NULL;
	const char *op = NULL;
	bool joining = arachne_opts.join, join_event = false;
	char loadwhy[900];
	int lockfd = -1, rc = -1;

	if (job_alloc_load(job_id, &own, why, len) < 0)
		return -1;
	rs.job_id = own.job_id;
	rs.target = joining ? (uint32_t)arachne_opts.join : own.job_id;
	if (joining && rs.target == own.job_id) {
		snprintf(why, len, "join=%u: a job cannot join itself",
			 rs.target);
		goto out;
	}
	if (joining) {
		if (alloc_join_check(rs.target, uid, why, len) < 0)
			goto out;
		if (job_alloc_load(rs.target, &tgt, why, len) < 0) {
			char inner[512];

			snprintf(inner, sizeof(inner), "%.400s", why);
			snprintf(why, len, "join=%u: %s", rs.target, inner);
			goto out;
		}
		if (!tgt.running) {
			snprintf(why, len, "join=%u: job %u is not running",
				 rs.target, rs.target);
			goto out;
		}
	}
	if (remote_dir_prepare(&own, joining, why, len) < 0)
		goto out;
	lockfd = ar_jobdir_lock(rs.dir, arachne_conf.timeout_ms / 1000.0);
	if (lockfd < 0) {
		snprintf(why, len, "cannot lock %s/lock: %s", rs.dir,
			 ar_strerror(lockfd));
		goto out;
	}
	if (ar_jobdir_load(rs.dir, &state) < 0) {
		snprintf(why, len, "%s/state.json: %s", rs.dir, ar_errmsg());
		goto out;
	}
	if (!state && joining) {
		snprintf(why, len, "join=%u: job %u has no plan yet",
			 rs.target, rs.target);
		goto out;
	}
	if (!state)
		state = remote_state_new(&own, uid);
	joined = json_object_get(state, "joined");
	if (joining && !remote_list_has(joined, own.job_id) &&
	    !remote_list_has(json_object_get(state, "left"), own.job_id)) {
		const json_t *p = json_object_get(state, "pending");

		if (json_is_object(p)) {
			snprintf(why, len, "join=%u: job %u is in the middle of a reconfiguration (generation %lld, %s); try again when it is done",
				 rs.target, rs.target,
				 (long long)json_integer_value(json_object_get(p, "generation")),
				 json_string_value(json_object_get(p, "op")));
			goto out_load;
		}
		json_array_append_new(joined, json_integer(own.job_id));
		join_event = true;
	}
	owners = json_object();
	if (remote_nodes_gather(joining ? &tgt : &own, joined, owners, why,
				len) < 0)
		goto out_load;
	comp = job_composition(rs.nodes, rs.nnodes, rs.target);

	if (!json_integer_value(json_object_get(state, "generation"))) {
		op = "plan";
	} else if (json_is_object(json_object_get(state, "pending"))) {
		if (remote_pending_check(state, comp)) {
			/* Something else changed under a pending change. */
			op = "replan";
			lost = remote_gone(json_object_get(json_object_get(
				json_object_get(state, "pending"), "previous"),
				"composition"), comp);
		}
	} else if (!json_equal(comp, json_object_get(state, "composition"))) {
		op = "replan";
		lost = remote_gone(json_object_get(state, "composition"), comp);
		if (join_event)
			pending = json_pack("{s:s, s:I, s:I, s:I, s:[], s:s, s:o}",
				"op", "join", "job", (json_int_t)own.job_id,
				"from", json_integer_value(json_object_get(state, "generation")),
				"deadline", (json_int_t)time(NULL) + JOIN_WAIT_S,
				"release", "phase", "migrate",
				"previous", remote_previous(state));
	}
	if (op) {
		json_object_set(state, "nodes", owners);
		rc = remote_advance(state, op, comp, pending, lost, why, len);
		pending = lost = NULL;
		if (rc == 0 && join_event &&
		    json_is_object(json_object_get(state, "pending")))
			remote_notify(state);
	} else {
		rc = 0;
	}
out_load:
	/* Without a new plan the previous one, if any, stays in force. */
	if (remote_plan_load(state, loadwhy, sizeof(loadwhy)) < 0) {
		if (rc == 0)
			snprintf(why, len, "%s", loadwhy);
		rc = -1;
	}
out:
	ar_jobdir_unlock(lockfd);
	json_decref(pending);
	json_decref(lost);
	json_decref(owners);
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
	char val[4096];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(val, sizeof(val), fmt, ap);
	va_end(ap);
	if (spank_setenv(sp, name, val, 1) != ESPANK_SUCCESS)
		slurm_error("arachne: cannot set %s", name);
}

/* A JSON array of names as "a,b,c". */
static void remote_join_names(const json_t *list, char *buf, size_t len)
{
	size_t used = 0;
	const json_t *v;
	size_t i;

	buf[0] = '\0';
	json_array_foreach(list, i, v)
		if (used < len)
			used += snprintf(buf + used, len - used, "%s%s",
					 i ? "," : "", json_string_value(v));
}

static void remote_export_plan(spank_t sp)
{
	static const char *const per_generation[] = {
		"ARACHNE_JOINED", "ARACHNE_PLAN", "ARACHNE_PLAN_GENERATION",
		"ARACHNE_PLAN_SUMMARY", "ARACHNE_MIGRATION", "ARACHNE_PENDING",
		"ARACHNE_PREVIOUS_PLAN", "ARACHNE_STATE_LOST",
	};
	char path[700], summary[512];

	/* A step inherits the batch script's values, which may be stale. */
	for (size_t i = 0; i < ARRAY_SIZE(per_generation); i++)
		spank_unsetenv(sp, per_generation[i]);

	remote_setenv(sp, "ARACHNE_JOB_ID", "%u", rs.target);
	remote_setenv(sp, "ARACHNE_PLAN_DIR", "%s", rs.dir);
	remote_setenv(sp, "ARACHNE_PLAN_ROOT", "%s", arachne_conf.plan_dir);
	remote_setenv(sp, "ARACHNE_SOCKET", "%s", rs.socket);
	if (rs.target != rs.job_id)
		remote_setenv(sp, "ARACHNE_JOINED", "%u", rs.target);
	if (!rs.plan)
		return;
	ar_jobdir_file(path, sizeof(path), rs.dir, "plan", rs.generation);
	remote_setenv(sp, "ARACHNE_PLAN", "%s", path);
	remote_setenv(sp, "ARACHNE_PLAN_GENERATION", "%u", rs.generation);
	ar_plan_summary(rs.plan, summary, sizeof(summary));
	remote_setenv(sp, "ARACHNE_PLAN_SUMMARY", "%s", summary);
	ar_jobdir_file(path, sizeof(path), rs.dir, "migration", rs.generation);
	if (rs.generation > 1 && access(path, R_OK) == 0)
		remote_setenv(sp, "ARACHNE_MIGRATION", "%s", path);
	if (rs.pending) {
		remote_setenv(sp, "ARACHNE_PENDING", "%s", json_string_value(
			json_object_get(rs.pending, "op")));
		ar_jobdir_file(path, sizeof(path), rs.dir, "plan",
			       (unsigned)json_integer_value(
				json_object_get(rs.pending, "from")));
		remote_setenv(sp, "ARACHNE_PREVIOUS_PLAN", "%s", path);
	}
	if (rs.lost) {
		char nodes[1024];

		remote_join_names(rs.lost, nodes, sizeof(nodes));
		remote_setenv(sp, "ARACHNE_STATE_LOST", "%s", nodes);
	}
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
	rs.job_id = rs.target = job_id;
	remote_socket_path(sp, rs.socket, sizeof(rs.socket));
	/* The user reads this from task_init, on the job's own stderr. */
	if (remote_sync(job_id, uid, rs.failure, sizeof(rs.failure)) < 0)
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

/* Whether GPUs of @node leave in the pending reconfiguration. */
static bool remote_node_leaves(const char *node)
{
	const json_t *v;
	size_t i;

	if (!rs.pending)
		return false;
	json_array_foreach(json_object_get(rs.pending, "release"), i, v)
		if (!strcmp(json_string_value(v), node))
			return true;
	return false;
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
	if (rs.lost && global == 0 && !rs.batch)
		dprintf(STDERR_FILENO, "arachne: warning: job %u: the model state held on %s left with those nodes before it was migrated; plan generation %u starts from a checkpoint (ARACHNE_STATE_LOST)\n",
			rs.job_id, json_string_value(json_array_get(rs.lost, 0)),
			rs.generation);
	if (!rs.plan || rs.batch)
		return 0;
	remote_node_name(sp, node, sizeof(node));
	if (role_find(rs.plan, node, local, &r) < 0) {
		dprintf(STDERR_FILENO, "arachne: warning: job %u: plan generation %u is malformed; no role for task %u\n",
			rs.job_id, rs.generation, global);
		return remote_mode() == ARACHNE_MODE_ENFORCE ? -1 : 0;
	}
	remote_setenv(sp, "ARACHNE_LOCAL_GPU", "%u", local);
	if (!r.found) {
		/* Its GPU holds state to send before it goes, or nothing. */
		bool leaving = remote_node_leaves(node) ||
			       (rs.pending && rs.job_id != rs.target &&
				json_integer_value(json_object_get(rs.pending, "job")) ==
				rs.job_id &&
				!strcmp(json_string_value(json_object_get(rs.pending, "op")),
					"leave"));

		remote_setenv(sp, "ARACHNE_ROLE", leaving ? "leaving" :
							    "unused");
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

/* Tell this node's plannerd the job is over (a failure is only logged). */
static void remote_forget(const char *socket, uint32_t job)
{
	json_t *req = json_pack("{s:s, s:I}", "op", "forget", "job",
				(json_int_t)job);
	json_t *resp = NULL;
	char why[512];

	if (client_call(socket, arachne_conf.timeout_ms, req, &resp, why,
			sizeof(why)) < 0 && !strstr(why, "no stored plan"))
		slurm_info("arachne: job %u: forget: %s", job, why);
	json_decref(resp);
	json_decref(req);
}

/*
 * The job @job is over: its plan directory goes (for output=DIR only the
 * link in plan_dir: the directory is the user's).  Only a directory that
 * names this very job is removed.
 */
static void remote_dir_remove(uint32_t job)
{
	char link[300];
	json_t *state = NULL;
	struct stat st;

	if (remote_link_path(job, link, sizeof(link)) < 0 ||
	    lstat(link, &st) < 0)
		return;
	if (S_ISLNK(st.st_mode)) {
		unlink(link);
		return;
	}
	if (ar_jobdir_load(link, &state) == 0 && state &&
	    json_integer_value(json_object_get(state, "job_id")) == job &&
	    ar_jobdir_remove(link) < 0)
		slurm_info("arachne: job %u: cannot remove %s: %m", job, link);
	json_decref(state);
}

int remote_exit(spank_t sp)
{
	/*
	 * The end of the job's batch step is the end of the job.  A joined
	 * job's end needs nothing here: its GPUs left either through
	 * `arachnectl leave` (their state moved first) or without it, which
	 * the job it joined sees at its next step.
	 */
	if (rs.active && rs.batch && rs.generation &&
	    rs.target == rs.job_id) {
		remote_forget(rs.socket, rs.target);
		remote_dir_remove(rs.target);
	}
	json_decref(rs.plan);
	json_decref(rs.pending);
	json_decref(rs.lost);
	free(rs.nodes);
	memset(&rs, 0, sizeof(rs));
	return 0;
}

/*
 * Job prolog (root, on each node as the job starts there): a plan
 * directory under this job's id that an earlier job left is removed
 * before the job's own steps, which run as its user, need the name.
 */
int remote_job_prolog(spank_t sp)
{
	uint32_t job = 0, uid = 0;
	struct job_alloc a;
	char link[300], why[256];

	if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
	    remote_link_path(job, link, sizeof(link)) < 0 ||
	    access(link, F_OK) < 0)
		return 0;
	if (job_alloc_load(job, &a, why, sizeof(why)) < 0)
		a.submit_time = -1;	/* no GPUs: not an Arachne job anyway */
	if (a.submit_time >= 0 && remote_dir_is_stale(link, uid, a.submit_time)) {
		struct stat st;

		if (lstat(link, &st) == 0 && S_ISLNK(st.st_mode))
			unlink(link);
		else
			ar_jobdir_remove(link);
		slurm_info("arachne: job %u: removed %s, left by an earlier job with this id",
			   job, link);
	}
	job_alloc_free(&a);
	return 0;
}

/* Whether slurmctld still runs @job (a shrink ends it on some nodes only). */
static bool remote_job_running(uint32_t job)
{
	job_info_msg_t *jm = NULL;
	bool running = false;

	if (slurm_load_job(&jm, job, 0) == SLURM_SUCCESS && jm &&
	    jm->record_count)
		running = (jm->job_array[0].job_state & JOB_STATE_BASE) ==
			  JOB_RUNNING &&
			  !(jm->job_array[0].job_state & JOB_COMPLETING);
	if (jm)
		slurm_free_job_info_msg(jm);
	return running;
}

/*
 * Job epilog (root, on every node the job leaves): this node's plannerd
 * forgets the job, and, when the job is over (not a node that a shrink
 * released), a plan directory its batch step did not remove (a job of
 * srun steps only) goes.
 */
int remote_job_epilog(spank_t sp)
{
	uint32_t job = 0;
	char socket[KV_VALUE_MAX];

	if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS)
		return 0;
	if (!remote_job_running(job))
		remote_dir_remove(job);
	remote_socket_path(sp, socket, sizeof(socket));
	if (access(socket, F_OK) == 0)
		remote_forget(socket, job);
	return 0;
}
