/*
 * jobdir.c - an elastic job's plan directory, shared by the arachne.so
 * plugin and arachnectl (docs/elastic.md).
 *
 * Every Arachne job T has a directory on a file system every node of T
 * and of the allocations that join it mounts at the same path:
 *
 *   state.json        the generation in force, its composition, who
 *                     joined, and the reconfiguration under way (below)
 *   plan.G.json       the plan of generation G (1, 2, ...)
 *   cluster.G.json    the composition plan G was made for, as plannerd
 *                     saw it (GRES types mapped to GPU profiles)
 *   migration.G.json  the migration from the state's layout before G
 *                     to plan G (none when nothing had to move)
 *   lock              flock()ed by whoever changes the generation
 *   *.rdzv            rendezvous contact files while ranks meet
 *
 * Plans and migrations are written before state.json names them, each
 * atomically, so a reader that sees generation G finds its files whole.
 *
 * A reconfiguration that waits for the job's processes is "pending":
 *   {"op": "join"|"shrink"|"leave", "generation": G, "from": F,
 *    "job": B, "release": [nodes], "deadline": unix seconds,
 *    "phase": "migrate"|"migrated", "previous": {composition, joined,
 *    nodes}}
 * The model state is in plan F's layout until the job's processes ran
 * migration G; the GPUs of "release" are still held until then.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ar.h"

int ar_jobdir_file(char *buf, size_t len, const char *dir, const char *kind,
		   unsigned g)
{
	int n = g ? snprintf(buf, len, "%s/%s.%u.json", dir, kind, g) :
		    snprintf(buf, len, "%s/%s.json", dir, kind);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int ar_jobdir_lock(const char *dir, double timeout_s)
{
	double deadline = ar_now() + timeout_s;
	char path[4096];
	int fd;

	if (snprintf(path, sizeof(path), "%s/lock", dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	while (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		if (errno != EWOULDBLOCK && errno != EINTR) {
			int rc = -errno;

			close(fd);
			return rc;
		}
		if (ar_now() > deadline) {
			close(fd);
			return -AR_ETIMEOUT;
		}
		usleep(10000);
	}
	return fd;
}

void ar_jobdir_unlock(int fd)
{
	if (fd >= 0)
		close(fd);	/* releases the flock */
}

int ar_jobdir_load(const char *dir, json_t **statep)
{
	char path[4096];
	json_t *s;

	*statep = NULL;
	if (ar_jobdir_file(path, sizeof(path), dir, "state", 0) < 0)
		return -ENAMETOOLONG;
	if (access(path, F_OK) < 0)
		return errno == ENOENT ? 0 : -errno;
	s = ar_json_load_file(path);
	if (!json_is_object(s)) {
		json_decref(s);
		return -AR_EINVAL;
	}
	*statep = s;
	return 0;
}

json_t *ar_jobdir_plan(const char *dir, unsigned g)
{
	char path[4096];

	if (ar_jobdir_file(path, sizeof(path), dir, "plan", g) < 0)
		return NULL;
	return ar_json_load_file(path);
}

static int jobdir_write(const char *path, const json_t *j)
{
	char *text = json_dumps(j, JSON_INDENT(1) | JSON_SORT_KEYS);
	int rc;

	if (!text)
		return -ENOMEM;
	rc = ar_file_write_atomic(path, text, strlen(text), 0644);
	free(text);
	return rc;
}

int ar_jobdir_save(const char *dir, const json_t *state)
{
	char path[4096];
	int rc = ar_jobdir_file(path, sizeof(path), dir, "state", 0);

	return rc < 0 ? rc : jobdir_write(path, state);
}

json_t *ar_jobdir_cluster(const char *dir, unsigned g)
{
	char path[4096];

	if (ar_jobdir_file(path, sizeof(path), dir, "cluster", g) < 0) {
		errno = ENAMETOOLONG;
		ar_seterr(-ENAMETOOLONG, "%s: path too long", dir);
		return NULL;
	}
	return ar_json_load_file(path);
}

/* @j as DIR/KIND.G.json; NULL: that file goes, for a file of an abandoned
 * attempt at G must not pass for G's. */
static int jobdir_write_or_remove(const char *dir, const char *kind,
				  unsigned g, const json_t *j)
{
	char path[4096];
	int rc = ar_jobdir_file(path, sizeof(path), dir, kind, g);

	if (rc < 0)
		return rc;
	if (j)
		return jobdir_write(path, j);
	return unlink(path) < 0 && errno != ENOENT ? -errno : 0;
}

int ar_jobdir_store(const char *dir, json_t *state, const json_t *plan,
		    const json_t *cluster, const json_t *migration,
		    unsigned *generationp)
{
	unsigned g = (unsigned)json_integer_value(
		json_object_get(state, "generation")) + 1;
	int rc;

	rc = jobdir_write_or_remove(dir, "plan", g, plan);
	if (rc == 0)
		rc = jobdir_write_or_remove(dir, "cluster", g, cluster);
	if (rc == 0)
		rc = jobdir_write_or_remove(dir, "migration", g, migration);
	if (rc < 0)
		return rc;
	json_object_set_new(state, "generation", json_integer(g));
	rc = ar_jobdir_save(dir, state);
	if (rc == 0)
		*generationp = g;
	return rc;
}

int ar_jobdir_remove(const char *dir)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	int rc = 0;

	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((de = readdir(d))) {
		char path[4096];

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >=
		    (int)sizeof(path) || (unlink(path) < 0 && errno != ENOENT))
			rc = -errno;
	}
	closedir(d);
	if (rmdir(dir) < 0 && errno != ENOENT)
		rc = -errno;
	return rc;
}

/* ------------------------------------------------------------ compositions */

bool ar_composition_has(const json_t *comp, const char *node)
{
	const json_t *e;
	size_t i;

	json_array_foreach(json_object_get(comp, "nodes"), i, e)
		if (!strcmp(json_string_value(json_object_get(e, "hosts")) ?
			    json_string_value(json_object_get(e, "hosts")) : "",
			    node))
			return true;
	return false;
}

json_t *ar_composition_without(const json_t *comp, const json_t *nodes)
{
	json_t *out = json_copy((json_t *)comp), *list = json_array();
	const json_t *e, *n;
	size_t i, k;

	if (!out || !list) {
		json_decref(out);
		json_decref(list);
		return NULL;
	}
	json_array_foreach(json_object_get(comp, "nodes"), i, e) {
		const char *host = json_string_value(json_object_get(e, "hosts"));
		bool drop = false;

		json_array_foreach(nodes, k, n)
			if (host && json_is_string(n) &&
			    !strcmp(host, json_string_value(n)))
				drop = true;
		if (!drop)
			json_array_append(list, (json_t *)e);
	}
	json_object_set_new(out, "nodes", list);
	return out;
}

/* ------------------------------------------------------------ replans */

json_t *ar_jobdir_replan_request(const char *dir, const json_t *state,
				 const json_t *cluster)
{
	const json_t *pending = json_object_get(state, "pending");
	const json_t *prev_comp = json_object_get(state, "composition");
	unsigned g = (unsigned)json_integer_value(
		json_object_get(state, "generation"));
	json_t *req, *plan;

	/*
	 * Until the job's processes ran a pending migration, the state is
	 * in the layout of the plan it started from.
	 */
	if (json_is_object(pending)) {
		g = (unsigned)json_integer_value(json_object_get(pending, "from"));
		prev_comp = json_object_get(json_object_get(pending, "previous"),
					    "composition");
	}
	plan = ar_jobdir_plan(dir, g);
	if (!plan)
		return NULL;
	req = json_pack("{s:s, s:O, s:O, s:{s:o, s:O}}", "op", "replan",
			"job", json_object_get(state, "job_id"),
			"cluster", cluster,
			"previous", "plan", plan, "cluster", prev_comp);
	if (req && json_object_get(state, "model"))
		json_object_set(req, "model", json_object_get(state, "model"));
	if (req && json_object_get(state, "user"))
		json_object_set(req, "user", json_object_get(state, "user"));
	return req;
}

void ar_plan_summary(const json_t *plan, char *buf, size_t len)
{
	const json_t *templates = json_object_get(plan, "templates");
	const json_t *pred = json_object_get(plan, "predicted");
	const json_t *model = json_object_get(plan, "model");
	unsigned gpus = 0, pipelines = 0;
	const json_t *t;
	size_t ti;

	json_array_foreach(templates, ti, t) {
		const json_t *row, *e;
		size_t i, k;

		pipelines += (unsigned)json_integer_value(
			json_object_get(t, "replicas"));
		json_array_foreach(json_object_get(t, "placement"), i, row)
			json_array_foreach(row, k, e)
				gpus += (unsigned)json_array_size(
					json_object_get(e, "gpus"));
	}
	snprintf(buf, len, "model=%s templates=%zu pipelines=%u gpus=%u micro_batch=%lld iters_per_s=%.4g samples_per_s=%.4g",
		 json_is_string(model) ? json_string_value(model) : "?",
		 json_array_size(templates), pipelines, gpus,
		 (long long)json_integer_value(json_object_get(plan, "micro_batch")),
		 json_number_value(json_object_get(pred, "iters_per_s")),
		 json_number_value(json_object_get(pred, "samples_per_s")));
}
