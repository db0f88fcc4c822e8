/*
 * spank_state.c - a job's plans on disk.
 *
 * Every Arachne job T has a directory (plan_dir/T, or the user's
 * output=DIR with plan_dir/T a symbolic link to it) that the nodes of the
 * job and of the allocations joining it all see:
 *
 *   state.json        {"job_id", "generation", "composition", "joined"}
 *   plan.G.json       the plan of generation G (1, 2, ...)
 *   migration.G.json  plannerd's migration from plan G-1 to plan G
 *   lock              flock()ed by whoever changes the generation
 *
 * Plans and migrations are written before state.json names them, each
 * atomically, so a reader that sees generation G finds its files whole.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ar.h"
#include "arachne.h"

int state_plan_path(const char *dir, unsigned g, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%s/plan.%u.json", dir, g);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int state_migration_path(const char *dir, unsigned g, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%s/migration.%u.json", dir, g);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int state_lock(const char *dir, unsigned long timeout_ms)
{
	double deadline = ar_now() + timeout_ms / 1000.0;
	char path[600];
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

void state_unlock(int fd)
{
	if (fd >= 0)
		close(fd);	/* releases the flock */
}

int state_load(const char *dir, json_t **statep)
{
	char path[600];
	json_t *s;

	*statep = NULL;
	snprintf(path, sizeof(path), "%s/state.json", dir);
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

static int state_write_json(const char *path, const json_t *j)
{
	char *text = json_dumps(j, JSON_INDENT(1) | JSON_SORT_KEYS);
	int rc;

	if (!text)
		return -ENOMEM;
	rc = ar_file_write_atomic(path, text, strlen(text), 0644);
	free(text);
	return rc;
}

int state_store(const char *dir, json_t *state, const json_t *plan,
		const json_t *migration, unsigned *generationp)
{
	unsigned g = (unsigned)json_integer_value(
		json_object_get(state, "generation")) + 1;
	char path[600];
	int rc;

	rc = state_plan_path(dir, g, path, sizeof(path));
	if (rc == 0)
		rc = state_write_json(path, plan);
	if (rc == 0 && migration) {
		rc = state_migration_path(dir, g, path, sizeof(path));
		if (rc == 0)
			rc = state_write_json(path, migration);
	}
	if (rc < 0)
		return rc;
	json_object_set_new(state, "generation", json_integer(g));
	snprintf(path, sizeof(path), "%s/state.json", dir);
	rc = state_write_json(path, state);
	if (rc == 0)
		*generationp = g;
	return rc;
}
