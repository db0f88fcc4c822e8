/*
 * elastic.c - arachnectl's commands for elastic jobs (docs/elastic.md):
 * the two-phase protocol that moves a job's model state before any of its
 * GPUs go.
 *
 *   shrink JOB --nodes N   ask: plan the job on its first N nodes
 *   leave JOB              ask: plan the job a joined allocation joined
 *                          without that allocation
 *   pending [JOB]          in the job's scripts: the reconfiguration that
 *                          waits for this job's part, if any
 *   commit [JOB]           the migration ran: release (shrink), done
 *   abort [JOB]            it did not: back to the plan the state is in
 *   list                   the jobs whose plan directories one may read
 *
 * An ask replans at once (any node's plannerd answers, the plan directory
 * carries what it needs) and writes the next generation as pending: the
 * GPUs that leave are still held, so the job's processes can move the
 * state off them (arachne-migrate --rendezvous, or the trainer) before
 * `commit` releases them (scontrol update ... NodeList=, whose resize
 * script the batch script then sources) or the leaving job ends.  If the
 * migration fails or the grace runs out, `abort` writes the plan the
 * state is still in as the next generation: never a half-moved state.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef HAVE_LIBSLURM
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#endif

#include "ar.h"
#include "ctl.h"

#define LOCK_TIMEOUT_S	10.0
#define DEFAULT_GRACE_S	600.0

/* ------------------------------------------------------------ site */

/* This node's Slurm name, for %n in a socket path. */
static void elastic_node_name(char *buf, size_t len)
{
	const char *env = getenv("SLURMD_NODENAME");

	if (env && *env) {
		snprintf(buf, len, "%s", env);
		return;
	}
	if (gethostname(buf, len) < 0)
		snprintf(buf, len, "localhost");
	buf[len - 1] = '\0';
	buf[strcspn(buf, ".")] = '\0';
}

/* One plugstack.conf line: arachne.so's plan_dir= and socket=. */
static void elastic_plugstack_line(char *line, char **plan_dir,
				   char **socket)
{
	char *save = NULL, *tok[64];
	int n = 0;

	line[strcspn(line, "#\n")] = '\0';
	for (char *t = strtok_r(line, " \t", &save); t && n < 64;
	     t = strtok_r(NULL, " \t", &save))
		tok[n++] = t;
	if (n < 2 || (strcmp(tok[0], "required") && strcmp(tok[0], "optional")))
		return;
	if (strcmp(basename(tok[1]), "arachne.so"))
		return;
	for (int i = 2; i < n; i++) {
		if (!strncmp(tok[i], "plan_dir=", 9) && !*plan_dir)
			*plan_dir = strdup(tok[i] + 9);
		if (!strncmp(tok[i], "socket=", 7) && !*socket)
			*socket = strdup(tok[i] + 7);
	}
}

static void elastic_plugstack_file(const char *path, int depth,
				   char **plan_dir, char **socket)
{
	FILE *f = fopen(path, "r");
	char line[4096];

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *p = line + strspn(line, " \t");

		if (!strncmp(p, "include", 7) && (p[7] == ' ' || p[7] == '\t') &&
		    depth < 4) {
			glob_t g;

			p += 7 + strspn(p + 7, " \t");
			p[strcspn(p, " \t\n#")] = '\0';
			if (glob(p, 0, NULL, &g) == 0) {
				for (size_t i = 0; i < g.gl_pathc; i++)
					elastic_plugstack_file(g.gl_pathv[i],
							       depth + 1,
							       plan_dir, socket);
				globfree(&g);
			}
			continue;
		}
		elastic_plugstack_line(p, plan_dir, socket);
	}
	fclose(f);
}

/*
 * The site's arachne.so arguments, as Slurm reads them: slurm.conf
 * ($SLURM_CONF or /etc/slurm/slurm.conf) names PlugStackConfig (default:
 * plugstack.conf beside it), which may include other files.
 */
void elastic_site_defaults(struct ctl *ctl)
{
	const char *conf = getenv("SLURM_CONF");
	char path[4096] = "", line[4096], node[256];
	char *plan_dir = NULL, *socket = NULL;
	FILE *f;

	if (!conf || !*conf)
		conf = "/etc/slurm/slurm.conf";
	f = fopen(conf, "r");
	if (f) {
		while (fgets(line, sizeof(line), f)) {
			char *p = line + strspn(line, " \t");

			if (!strncasecmp(p, "PlugStackConfig=", 16)) {
				p += 16;
				p[strcspn(p, " \t\n#")] = '\0';
				snprintf(path, sizeof(path), "%s", p);
			}
		}
		fclose(f);
	}
	if (!path[0]) {
		char *copy = strdup(conf);

		snprintf(path, sizeof(path), "%s/plugstack.conf",
			 copy ? dirname(copy) : "/etc/slurm");
		free(copy);
	}
	elastic_plugstack_file(path, 0, &plan_dir, &socket);
	if (!ctl->plan_dir && plan_dir)
		ctl->plan_dir = plan_dir;
	else
		free(plan_dir);
	if (!ctl->socket && socket) {
		static char expanded[4096];
		size_t used = 0;

		elastic_node_name(node, sizeof(node));
		for (const char *p = socket; *p && used + 1 < sizeof(expanded); p++) {
			if (p[0] == '%' && p[1] == 'n') {
				used += (size_t)snprintf(expanded + used,
							 sizeof(expanded) - used,
							 "%s", node);
				p++;
			} else {
				expanded[used++] = *p;
			}
		}
		expanded[used < sizeof(expanded) ? used : sizeof(expanded) - 1] = '\0';
		ctl->socket = expanded;
	}
	free(socket);
}

/* ------------------------------------------------------------ Slurm */

#ifdef HAVE_LIBSLURM
static void elastic_slurm_init(void)
{
	static bool done;

	if (!done)
		slurm_init(NULL);
	done = true;
}
#endif

/*
 * The plan summary in the job's comment (scontrol show job, sacct), unless
 * @state says Slurm refuses updates of this job: without an accounting
 * database, Slurm 22.05 refuses every update of a job that was resized
 * ("the DB index is being set"), each refusal after seconds of retries.
 */
static void elastic_comment(long long job, json_t *state, unsigned g,
			    const json_t *plan, const char *pending)
{
#ifdef HAVE_LIBSLURM
	char summary[512], line[700];
	job_desc_msg_t d;

	if (json_is_false(json_object_get(state, "comment")))
		return;
	elastic_slurm_init();
	ar_plan_summary(plan, summary, sizeof(summary));
	snprintf(line, sizeof(line), "arachne generation %u%s%s: %s", g,
		 pending ? " pending " : "", pending ? pending : "", summary);
	slurm_init_job_desc_msg(&d);
	d.job_id = (uint32_t)job;
	d.comment = line;
	if (slurm_update_job(&d) == SLURM_SUCCESS)
		return;
	if (slurm_get_errno() == ESLURM_JOB_SETTING_DB_INX)
		json_object_set_new(state, "comment", json_false());
	fprintf(stderr, "arachnectl: job %lld: cannot set the comment: %s\n",
		job, slurm_strerror(slurm_get_errno()));
#endif
}

/* After a resize: whether Slurm will still take updates of the job. */
static bool elastic_updates_after_resize(void)
{
#ifdef HAVE_LIBSLURM
	slurm_conf_t *cf = NULL;
	bool ok = true;

	elastic_slurm_init();
	if (slurm_load_ctl_conf(0, &cf) == SLURM_SUCCESS && cf) {
		ok = cf->accounting_storage_type &&
		     strcmp(cf->accounting_storage_type,
			    "accounting_storage/none");
		slurm_free_ctl_conf(cf);
	}
	return ok;
#else
	return true;
#endif
}

/* The signal the job asked to be told of changes with, to its batch script. */
static void elastic_notify(long long job, const json_t *state)
{
	const char *name = json_string_value(json_object_get(state, "signal"));
	int sig = !name ? 0 : !strcmp(name, "USR1") ? SIGUSR1 :
		  !strcmp(name, "USR2") ? SIGUSR2 : 0;

	if (!sig)
		return;
#ifdef HAVE_LIBSLURM
	elastic_slurm_init();
	if (slurm_kill_job((uint32_t)job, (uint16_t)sig, KILL_JOB_BATCH) !=
	    SLURM_SUCCESS)
		fprintf(stderr, "arachnectl: job %lld: cannot send SIG%s: %s\n",
			job, name, slurm_strerror(slurm_get_errno()));
#else
	fprintf(stderr, "arachnectl: built without libslurm: tell job %lld yourself (scancel --batch --signal=%s %lld)\n",
		job, name, job);
#endif
}

/*
 * scontrol update JobId=JOB NodeList=NODES, run here so that Slurm's
 * resize script lands in the caller's directory, where the batch script
 * sources it.
 */
static int elastic_release(long long job, const json_t *keep)
{
	char jobarg[64], nodes[4096] = "NodeList=";
	size_t used = strlen(nodes);
	const json_t *v;
	size_t i;
	pid_t pid;
	int st = 0;

	json_array_foreach(keep, i, v)
		used += (size_t)snprintf(nodes + used, sizeof(nodes) - used,
					 "%s%s", i ? "," : "",
					 json_string_value(v));
	snprintf(jobarg, sizeof(jobarg), "JobId=%lld", job);
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		execlp("scontrol", "scontrol", "update", jobarg, nodes,
		       (char *)NULL);
		fprintf(stderr, "arachnectl: cannot run scontrol: %s\n",
			strerror(errno));
		_exit(127);
	}
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -AR_EABORT;
}

/* ------------------------------------------------------------ the job */

struct ejob {
	long long id;			/* the job whose plan it is */
	char dir[PATH_MAX];
	int lock;
	json_t *state;
};

static const char *elastic_plan_root(const struct ctl *ctl)
{
	const char *env = getenv("ARACHNE_PLAN_ROOT");

	if (ctl->plan_dir)
		return ctl->plan_dir;
	return env && *env ? env : AR_SPANK_PLAN_DIR;
}

static bool elastic_list_has(const json_t *list, long long job)
{
	const json_t *v;
	size_t i;

	json_array_foreach(list, i, v)
		if (json_integer_value(v) == job)
			return true;
	return false;
}

/*
 * The elastic job @job belongs to: @job itself when it has a plan
 * directory, else the job it joined ($ARACHNE_JOINED inside it, or the
 * directory whose state names it).
 */
static int elastic_find(const struct ctl *ctl, long long job, long long *tp)
{
	const char *root = elastic_plan_root(ctl), *joined;
	char path[PATH_MAX];
	struct dirent *de;
	DIR *d;

	snprintf(path, sizeof(path), "%s/%lld/state.json", root, job);
	if (access(path, F_OK) == 0) {
		*tp = job;
		return 0;
	}
	joined = getenv("ARACHNE_JOINED");
	if (joined && getenv("SLURM_JOB_ID") &&
	    atoll(getenv("SLURM_JOB_ID")) == job) {
		*tp = atoll(joined);
		return 0;
	}
	d = opendir(root);
	if (!d) {
		fprintf(stderr, "arachnectl: plan directory %s: %s (give --plan-dir)\n",
			root, strerror(errno));
		return EXIT_USAGE;
	}
	while ((de = readdir(d))) {
		json_t *s = NULL;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", root, de->d_name);
		if (ar_jobdir_load(path, &s) < 0 || !s)
			continue;
		if (elastic_list_has(json_object_get(s, "joined"), job) ||
		    elastic_list_has(json_object_get(s, "left"), job) ||
		    json_integer_value(json_object_get(json_object_get(s, "pending"), "job")) == job) {
			*tp = json_integer_value(json_object_get(s, "job_id"));
			json_decref(s);
			closedir(d);
			return 0;
		}
		json_decref(s);
	}
	closedir(d);
	fprintf(stderr, "arachnectl: job %lld has no Arachne plan directory in %s, nor joined a job that has one\n",
		job, root);
	return EXIT_REFUSED;
}

static void elastic_close(struct ejob *e)
{
	ar_jobdir_unlock(e->lock);
	json_decref(e->state);
	e->lock = -1;
	e->state = NULL;
}

/* Lock and load the state of elastic job @t. */
static int elastic_open(const struct ctl *ctl, long long t, struct ejob *e)
{
	char link[PATH_MAX];
	int rc;

	memset(e, 0, sizeof(*e));
	e->id = t;
	e->lock = -1;
	snprintf(link, sizeof(link), "%s/%lld", elastic_plan_root(ctl), t);
	if (!realpath(link, e->dir)) {
		fprintf(stderr, "arachnectl: job %lld: %s: %s\n", t, link,
			strerror(errno));
		return EXIT_REFUSED;
	}
	e->lock = ar_jobdir_lock(e->dir, LOCK_TIMEOUT_S);
	if (e->lock < 0) {
		fprintf(stderr, "arachnectl: job %lld: cannot lock %s: %s\n",
			t, e->dir, ar_strerror(e->lock));
		return EXIT_REFUSED;
	}
	rc = ar_jobdir_load(e->dir, &e->state);
	if (rc < 0 || !e->state) {
		fprintf(stderr, "arachnectl: job %lld: %s/state.json: %s\n", t,
			e->dir, rc < 0 ? ar_strerror(rc) : "no plan yet");
		elastic_close(e);
		return EXIT_REFUSED;
	}
	return 0;
}

static unsigned elastic_generation(const struct ejob *e)
{
	return (unsigned)json_integer_value(json_object_get(e->state,
							    "generation"));
}

static const json_t *elastic_pending(const struct ejob *e)
{
	const json_t *p = json_object_get(e->state, "pending");

	return json_is_object(p) ? p : NULL;
}

/* The nodes of @e's composition that job @owner holds, in order. */
static json_t *elastic_nodes_of(const struct ejob *e, long long owner)
{
	const json_t *owners = json_object_get(e->state, "nodes"), *ent;
	json_t *list = json_array();
	size_t i;

	json_array_foreach(json_object_get(json_object_get(e->state,
				"composition"), "nodes"), i, ent) {
		const char *host = json_string_value(json_object_get(ent, "hosts"));

		if (host && json_integer_value(json_object_get(owners, host)) ==
		    owner)
			json_array_append_new(list, json_string(host));
	}
	return list;
}

static void elastic_names(const json_t *list, char *buf, size_t len)
{
	size_t used = 0;
	const json_t *v;
	size_t i;

	buf[0] = '\0';
	json_array_foreach(list, i, v)
		if (used < len)
			used += (size_t)snprintf(buf + used, len - used, "%s%s",
						 i ? "," : "",
						 json_string_value(v));
}

/*
 * The ask of shrink and leave: replan @e onto its composition without
 * @release and write the next generation, pending with @op.  @job is the
 * leaving job (leave) or @e's own (shrink).  Takes @release.
 */
static int elastic_ask(const struct ctl *ctl, struct ejob *e, const char *op,
		       long long job, json_t *release)
{
	double grace = ctl->grace_s > 0 ? ctl->grace_s : DEFAULT_GRACE_S;
	json_t *comp, *req, *answer = NULL, *pending, *owners;
	const json_t *plan, *mig, *cluster;
	char summary[512], gone[1024];
	unsigned g = 0;
	const json_t *v;
	size_t i;
	int status, rc;

	comp = ar_composition_without(json_object_get(e->state, "composition"),
				      release);
	req = comp ? ar_jobdir_replan_request(e->dir, e->state, comp) : NULL;
	if (!req) {
		fprintf(stderr, "arachnectl: job %lld: cannot read the plan it runs: %s\n",
			e->id, ar_errmsg());
		json_decref(comp);
		json_decref(release);
		return EXIT_REFUSED;
	}
	status = ctl_request(ctl, req, &answer);
	if (status == EXIT_DAEMON)
		fprintf(stderr, "arachnectl: plannerd runs on the compute nodes: on a host without it, ask from a node of the job (srun --jobid=%lld --overlap -N1 -n1 arachnectl %s ...)\n",
			e->id, op);
	if (status) {
		json_decref(comp);
		json_decref(release);
		return status;
	}
	plan = json_object_get(answer, "plan");
	mig = json_object_get(answer, "migration");
	pending = json_pack("{s:s, s:I, s:I, s:I, s:O, s:s, s:{s:O, s:O, s:O}}",
		"op", op, "job", (json_int_t)job,
		"from", (json_int_t)elastic_generation(e),
		"deadline", (json_int_t)(time(NULL) + (time_t)grace),
		"release", release,
		"phase", json_is_object(mig) ? "migrate" : "migrated",
		"previous",
		"composition", json_object_get(e->state, "composition"),
		"joined", json_object_get(e->state, "joined"),
		"nodes", json_object_get(e->state, "nodes"));
	json_object_set_new(pending, "generation",
			    json_integer(elastic_generation(e) + 1));
	owners = json_deep_copy(json_object_get(e->state, "nodes"));
	json_array_foreach(release, i, v)
		json_object_del(owners, json_string_value(v));
	json_object_set_new(e->state, "nodes", owners);
	json_object_set_new(e->state, "composition", comp);
	json_object_set_new(e->state, "pending", pending);
	cluster = json_object_get(answer, "cluster");
	rc = ar_jobdir_store(e->dir, e->state, plan,
			     json_is_object(cluster) ? cluster : NULL,
			     json_is_object(mig) ? mig : NULL, &g);
	if (rc < 0) {
		fprintf(stderr, "arachnectl: job %lld: cannot write generation %u: %s\n",
			e->id, elastic_generation(e) + 1, ar_strerror(rc));
		json_decref(answer);
		json_decref(release);
		return EXIT_REFUSED;
	}
	elastic_comment(e->id, e->state, g, plan, op);
	ar_jobdir_save(e->dir, e->state);
	ar_plan_summary(plan, summary, sizeof(summary));
	elastic_names(release, gone, sizeof(gone));
	printf("job %lld: generation %u (%s): %s leave%s; %s\n", e->id, g, op,
	       gone, json_array_size(release) == 1 ? "s" : "", summary);
	if (json_is_object(mig))
		printf("job %lld: the state moves first: migration.%u.json, predicted %.3f s; the job's scripts run it, then `arachnectl commit`, within %.0f s\n",
		       e->id, g, json_number_value(json_object_get(answer, "migration_s")),
		       grace);
	else
		printf("job %lld: no state to move; `arachnectl commit` releases the GPUs\n",
		       e->id);
	json_decref(answer);
	json_decref(release);
	return 0;
}

static int elastic_shrink(const struct ctl *ctl, long long job)
{
	json_t *own, *release = json_array();
	struct ejob e;
	long long t;
	int status;

	status = elastic_find(ctl, job, &t);
	if (status)
		return status;
	if (t != job) {
		fprintf(stderr, "arachnectl: job %lld joined job %lld: it leaves with `arachnectl leave %lld`\n",
			job, t, job);
		return EXIT_USAGE;
	}
	status = elastic_open(ctl, t, &e);
	if (status)
		return status;
	if (elastic_pending(&e)) {
		fprintf(stderr, "arachnectl: job %lld: generation %u (%s) is still pending; commit or abort it first\n",
			t, elastic_generation(&e), json_string_value(
				json_object_get(elastic_pending(&e), "op")));
		status = EXIT_REFUSED;
		goto out;
	}
	own = elastic_nodes_of(&e, t);
	if (ctl->release) {
		char *copy = strdup(ctl->release), *save = NULL;

		for (char *n = strtok_r(copy, ",", &save); n;
		     n = strtok_r(NULL, ",", &save)) {
			bool found = false;
			const json_t *v;
			size_t i;

			json_array_foreach(own, i, v)
				found |= !strcmp(json_string_value(v), n);
			if (!found) {
				fprintf(stderr, "arachnectl: job %lld: %s is not one of its own nodes with GPUs\n",
					t, n);
				status = EXIT_USAGE;
			}
			json_array_append_new(release, json_string(n));
		}
		free(copy);
	} else if (ctl->nodes < 1 || (size_t)ctl->nodes >= json_array_size(own)) {
		fprintf(stderr, "arachnectl: shrink: --nodes %ld: job %lld has %zu nodes with GPUs; keep 1 to %zu\n",
			ctl->nodes, t, json_array_size(own),
			json_array_size(own) - 1);
		status = EXIT_USAGE;
	} else {
		for (size_t i = (size_t)ctl->nodes; i < json_array_size(own); i++)
			json_array_append(release, json_array_get(own, i));
	}
	if (!status && json_array_size(release) >= json_array_size(own)) {
		fprintf(stderr, "arachnectl: shrink: job %lld would keep no GPUs\n",
			t);
		status = EXIT_USAGE;
	}
	json_decref(own);
	if (status) {
		json_decref(release);
		goto out;
	}
	status = elastic_ask(ctl, &e, "shrink", t, release);
	if (!status)
		elastic_notify(t, e.state);
out:
	elastic_close(&e);
	return status;
}

static int elastic_leave(const struct ctl *ctl, long long job)
{
	struct ejob e;
	json_t *joined, *left;
	long long t;
	int status;

	status = elastic_find(ctl, job, &t);
	if (status)
		return status;
	if (t == job) {
		fprintf(stderr, "arachnectl: job %lld joined no job: it shrinks with `arachnectl shrink %lld --nodes N`\n",
			job, job);
		return EXIT_USAGE;
	}
	status = elastic_open(ctl, t, &e);
	if (status)
		return status;
	joined = json_object_get(e.state, "joined");
	if (!elastic_list_has(joined, job)) {
		fprintf(stderr, "arachnectl: job %lld is not (or no longer) part of job %lld\n",
			job, t);
		status = EXIT_REFUSED;
		goto out;
	}
	if (elastic_pending(&e)) {
		fprintf(stderr, "arachnectl: job %lld: generation %u (%s) is still pending; commit or abort it first\n",
			t, elastic_generation(&e), json_string_value(
				json_object_get(elastic_pending(&e), "op")));
		status = EXIT_REFUSED;
		goto out;
	}
	/* The ask's "previous" keeps the joined list as it was, for abort. */
	joined = json_deep_copy(joined);
	left = json_object_get(e.state, "left");
	status = elastic_ask(ctl, &e, "leave", job, elastic_nodes_of(&e, job));
	if (!status) {
		for (size_t i = 0; i < json_array_size(joined); i++)
			if (json_integer_value(json_array_get(joined, i)) == job)
				json_array_remove(joined, i--);
		json_object_set_new(e.state, "joined", joined);
		joined = NULL;
		if (!json_is_array(left))
			json_object_set_new(e.state, "left", left = json_array());
		json_array_append_new(left, json_integer(job));
		if (ar_jobdir_save(e.dir, e.state) < 0)
			status = EXIT_REFUSED;
		elastic_notify(t, e.state);
	}
	json_decref(joined);
out:
	elastic_close(&e);
	return status;
}

/*
 * Whether the pending change waits for job @job's part: every allocation
 * whose GPUs may hold state in either plan runs its part of the migration
 * (the job itself, every job joined before or after, the one that joins
 * or leaves); a part with no GPU in the migration ends at once.
 */
static bool elastic_takes_part(const struct ejob *e, long long job)
{
	const json_t *p = elastic_pending(e);

	return p && (job == e->id ||
		     json_integer_value(json_object_get(p, "job")) == job ||
		     elastic_list_has(json_object_get(e->state, "joined"), job) ||
		     elastic_list_has(json_object_get(json_object_get(p,
				"previous"), "joined"), job));
}

static int elastic_pending_cmd(const struct ctl *ctl, long long job)
{
	char mig[PATH_MAX];
	struct ejob e;
	const json_t *p;
	long long t, left;
	int status;

	status = elastic_find(ctl, job, &t);
	if (status)
		return status;
	status = elastic_open(ctl, t, &e);
	if (status)
		return status;
	p = elastic_pending(&e);
	if (!elastic_takes_part(&e, job)) {
		/*
		 * A joined job whose leave another allocation committed (it
		 * held no state to move), or whose join was aborted, must
		 * hear that it is out: its script ends rather than train on.
		 */
		status = EXIT_REFUSED;	/* nothing waits for this job */
		if (job != t &&
		    elastic_list_has(json_object_get(e.state, "left"), job)) {
			fprintf(stderr, "arachnectl: job %lld has left job %lld (generation %u is in force): nothing waits for it\n",
				job, t, elastic_generation(&e));
			status = EXIT_LEFT;
		}
		elastic_close(&e);
		return status;
	}
	left = json_integer_value(json_object_get(p, "deadline")) - time(NULL);
	ar_jobdir_file(mig, sizeof(mig), e.dir, "migration",
		       elastic_generation(&e));
	/* At least 1 s: the caller's wait must be positive. */
	printf("%u %s %lld %s\n", elastic_generation(&e),
	       json_string_value(json_object_get(p, "op")),
	       left > 1 ? left : 1,
	       access(mig, R_OK) == 0 ? mig : "-");
	elastic_close(&e);
	return 0;
}

/* Generation @g is in force now: its line loses the pending mark. */
static void elastic_comment_committed(struct ejob *e, unsigned g)
{
	json_t *plan = ar_jobdir_plan(e->dir, g);

	if (plan)
		elastic_comment(e->id, e->state, g, plan, NULL);
	json_decref(plan);
}

static int elastic_commit(const struct ctl *ctl, long long job)
{
	const json_t *p;
	char names[1024], op[16];
	struct ejob e;
	long long t;
	unsigned g;
	int status, rc;
	json_t *keep;

	status = elastic_find(ctl, job, &t);
	if (status)
		return status;
	status = elastic_open(ctl, t, &e);
	if (status)
		return status;
	p = elastic_pending(&e);
	g = elastic_generation(&e);
	if (!p) {
		printf("job %lld: nothing pending (generation %u is in force)\n",
		       t, g);
		goto out;
	}
	snprintf(op, sizeof(op), "%s", json_string_value(json_object_get(p, "op")));
	if (strcmp(op, "shrink")) {
		json_object_set_new(e.state, "pending", json_null());
		elastic_comment_committed(&e, g);
		if (ar_jobdir_save(e.dir, e.state) < 0) {
			status = EXIT_REFUSED;
			goto out;
		}
		printf("job %lld: generation %u (%s) committed\n", t, g, op);
		goto out;
	}
	if (job != t) {
		printf("job %lld: its part of generation %u (shrink) is done; job %lld releases its own nodes\n",
		       job, g, t);
		goto out;
	}
	/*
	 * The migration ran: say so before the nodes go, so that a step
	 * that sees them gone does not report their state lost.
	 */
	json_object_set_new((json_t *)p, "phase", json_string("migrated"));
	if (ar_jobdir_save(e.dir, e.state) < 0) {
		status = EXIT_REFUSED;
		goto out;
	}
	/*
	 * The line before the release: without an accounting database Slurm
	 * takes no update of a resized job.
	 */
	elastic_comment_committed(&e, g);
	keep = elastic_nodes_of(&e, t);
	elastic_names(json_object_get(p, "release"), names, sizeof(names));
	rc = elastic_release(t, keep);
	json_decref(keep);
	if (rc < 0) {
		fprintf(stderr, "arachnectl: job %lld: scontrol could not release %s; the state has moved: run `arachnectl commit` again\n",
			t, names);
		status = EXIT_REFUSED;
		goto out;
	}
	json_object_set_new(e.state, "pending", json_null());
	if (!elastic_updates_after_resize())
		json_object_set_new(e.state, "comment", json_false());
	if (ar_jobdir_save(e.dir, e.state) < 0) {
		status = EXIT_REFUSED;
		goto out;
	}
	printf("job %lld: generation %u (shrink) committed: %s released; source ./slurm_job_%lld_resize.sh before the next srun\n",
	       t, g, names, t);
out:
	elastic_close(&e);
	return status;
}

/*
 * Tell the ranks still waiting to meet for generation @g's migration
 * (arachne-migrate --rendezvous, in every allocation) that it is off:
 * they stop at once with the reason instead of waiting out the deadline.
 */
static void elastic_call_off(const struct ejob *e, unsigned g, const char *op,
			     const char *reason)
{
	char path[PATH_MAX], text[1024];
	int n, rc;

	n = snprintf(path, sizeof(path), "%s/migration.%u.abandoned", e->dir, g);
	if (n < 0 || (size_t)n >= sizeof(path))
		return;
	n = snprintf(text, sizeof(text), "job %lld: generation %u (%s) abandoned: %s\n",
		     e->id, g, op, reason);
	rc = ar_file_write_atomic(path, text, (size_t)n < sizeof(text) ?
				  (size_t)n : sizeof(text) - 1, 0644);
	if (rc < 0)
		fprintf(stderr, "arachnectl: warning: job %lld: cannot write %s (%s): ranks waiting to migrate wait out their deadline\n",
			e->id, path, strerror(-rc));
}

static int elastic_abort(const struct ctl *ctl, long long job)
{
	const char *reason = ctl->reason ? ctl->reason : "aborted";
	json_t *plan, *p, *prev, *left, *cluster;
	struct ejob e;
	long long t;
	unsigned g, from, ng = 0;
	int status, rc;

	status = elastic_find(ctl, job, &t);
	if (status)
		return status;
	status = elastic_open(ctl, t, &e);
	if (status)
		return status;
	p = json_incref((json_t *)elastic_pending(&e));
	g = elastic_generation(&e);
	if (!p) {
		printf("job %lld: nothing pending (generation %u is in force)\n",
		       t, g);
		goto out;
	}
	from = (unsigned)json_integer_value(json_object_get(p, "from"));
	plan = ar_jobdir_plan(e.dir, from);
	if (!plan) {
		fprintf(stderr, "arachnectl: job %lld: cannot read plan %u: %s\n",
			t, from, ar_errmsg());
		json_decref(p);
		status = EXIT_REFUSED;
		goto out;
	}
	prev = json_object_get(p, "previous");
	json_object_set(e.state, "composition",
			json_object_get(prev, "composition"));
	json_object_set(e.state, "joined", json_object_get(prev, "joined"));
	json_object_set(e.state, "nodes", json_object_get(prev, "nodes"));
	left = json_object_get(e.state, "left");
	if (json_is_array(left)) {
		long long who = json_integer_value(json_object_get(p, "job"));

		/* A leave undone: the job is part again; a join: it stays out. */
		for (size_t i = 0; i < json_array_size(left); i++)
			if (json_integer_value(json_array_get(left, i)) == who)
				json_array_remove(left, i--);
		if (!strcmp(json_string_value(json_object_get(p, "op")), "join"))
			json_array_append_new(left, json_integer(who));
	}
	json_object_set_new(e.state, "pending", json_null());
	json_object_set_new(e.state, "aborted", json_pack("{s:i, s:O, s:s, s:I}",
		"generation", (int)g, "op", json_object_get(p, "op"),
		"reason", reason, "time", (json_int_t)time(NULL)));
	/* Plan F again, on F's composition (none in a directory written
	 * before plannerd answered with it). */
	errno = 0;
	cluster = ar_jobdir_cluster(e.dir, from);
	if (!cluster && errno != ENOENT)
		fprintf(stderr, "arachnectl: job %lld: warning: %s: the trainer places plan %u on state.json's composition\n",
			t, ar_errmsg(), from);
	rc = ar_jobdir_store(e.dir, e.state, plan, cluster, NULL, &ng);
	if (rc < 0) {
		fprintf(stderr, "arachnectl: job %lld: cannot write the next generation: %s\n",
			t, ar_strerror(rc));
		status = EXIT_REFUSED;
	} else {
		elastic_comment(t, e.state, ng, plan, NULL);
		ar_jobdir_save(e.dir, e.state);
		elastic_call_off(&e, g, json_string_value(json_object_get(p,
								"op")), reason);
		printf("job %lld: generation %u (%s) abandoned: %s; generation %u is plan %u again, whose layout the state never left\n",
		       t, g, json_string_value(json_object_get(p, "op")),
		       reason, ng, from);
	}
	json_decref(cluster);
	json_decref(plan);
	json_decref(p);
out:
	elastic_close(&e);
	return status;
}

static int elastic_list(const struct ctl *ctl)
{
	const char *root = elastic_plan_root(ctl);
	struct dirent **names = NULL;
	int n, shown = 0;

	n = scandir(root, &names, NULL, alphasort);
	if (n < 0) {
		fprintf(stderr, "arachnectl: plan directory %s: %s (give --plan-dir)\n",
			root, strerror(errno));
		return EXIT_USAGE;
	}
	printf("%-8s %-10s %4s %-8s %s\n", "JOB", "USER", "GEN", "PENDING",
	       "PLAN");
	for (int i = 0; i < n; i++) {
		char path[PATH_MAX], summary[512], user[64];
		json_t *s = NULL, *plan;
		const json_t *u, *p;

		if (names[i]->d_name[0] == '.')
			goto next;
		snprintf(path, sizeof(path), "%s/%s", root, names[i]->d_name);
		/* Other users' directories are theirs (0700) unless root. */
		if (ar_jobdir_load(path, &s) < 0 || !s)
			goto next;
		u = json_object_get(s, "user");
		if (json_is_string(u))
			snprintf(user, sizeof(user), "%s", json_string_value(u));
		else
			snprintf(user, sizeof(user), "%lld",
				 (long long)json_integer_value(u));
		plan = ar_jobdir_plan(path, (unsigned)json_integer_value(
			json_object_get(s, "generation")));
		ar_plan_summary(plan, summary, sizeof(summary));
		p = json_object_get(s, "pending");
		printf("%-8s %-10s %4lld %-8s %s\n", names[i]->d_name, user,
		       (long long)json_integer_value(json_object_get(s, "generation")),
		       json_is_object(p) ?
		       json_string_value(json_object_get(p, "op")) : "-",
		       plan ? summary : "(no plan yet)");
		shown++;
		json_decref(plan);
		json_decref(s);
next:
		free(names[i]);
	}
	free(names);
	if (!shown && !ctl->json)
		fprintf(stderr, "arachnectl: no job of yours has a plan directory in %s\n",
			root);
	return 0;
}

bool elastic_is_command(const char *cmd)
{
	static const char *const cmds[] = {
		"list", "shrink", "leave", "pending", "commit", "abort",
	};

	for (size_t i = 0; i < ARRAY_SIZE(cmds); i++)
		if (!strcmp(cmd, cmds[i]))
			return true;
	return false;
}

int elastic_main(struct ctl *ctl, const char *cmd, const char *job_arg)
{
	const char *env = getenv("SLURM_JOB_ID");
	long long job;
	char *end;

	if (!strcmp(cmd, "list"))
		return elastic_list(ctl);
	if (!job_arg)
		job_arg = env;
	if (!job_arg) {
		fprintf(stderr, "arachnectl: %s: give a JOB id (outside a job there is no $SLURM_JOB_ID)\n",
			cmd);
		return EXIT_USAGE;
	}
	job = strtoll(job_arg, &end, 10);
	if (*end || end == job_arg || job <= 0) {
		fprintf(stderr, "arachnectl: %s: \"%s\" is not a job id\n", cmd,
			job_arg);
		return EXIT_USAGE;
	}
	if (!strcmp(cmd, "shrink"))
		return elastic_shrink(ctl, job);
	if (!strcmp(cmd, "leave"))
		return elastic_leave(ctl, job);
	if (!strcmp(cmd, "pending"))
		return elastic_pending_cmd(ctl, job);
	if (!strcmp(cmd, "commit"))
		return elastic_commit(ctl, job);
	return elastic_abort(ctl, job);
}
