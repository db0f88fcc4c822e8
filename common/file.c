/* file.c - JSON file loading with located errors, atomic file writes. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ar.h"

json_t *ar_json_load_file(const char *path)
{
	json_error_t jerr;
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);

	if (!root) {
		ar_seterr(-AR_EINVAL, "%s:%d:%d: %s", path, jerr.line,
			  jerr.column, jerr.text);
		errno = EINVAL;
	}
	return root;
}

int ar_json_check_keys(const json_t *obj, const char *const *allowed,
		       const char *what)
{
	const char *key;
	json_t *val;

	json_object_foreach((json_t *)obj, key, val) {
		const char *const *a;

		for (a = allowed; *a; a++)
			if (strcmp(*a, key) == 0)
				break;
		if (!*a)
			return ar_seterr(-AR_EINVAL, "%s: unknown key \"%s\"",
					 what, key);
	}
	return 0;
}

static int write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = write(fd, buf, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

int ar_file_write_atomic(const char *path, const void *buf, size_t len,
			 int mode)
{
	char *tmp = NULL, *dircopy = NULL;
	int fd = -1, dfd = -1, rc;

	if (asprintf(&tmp, "%s.tmp.XXXXXX", path) < 0)
		return -ENOMEM;
	fd = mkstemp(tmp);
	if (fd < 0) {
		rc = -errno;
		goto out;
	}
	if (fchmod(fd, (mode_t)mode) < 0 || (rc = write_all(fd, buf, len)) < 0 ||
	    fsync(fd) < 0) {
		rc = rc < 0 ? rc : -errno;
		goto out_unlink;
	}
	if (close(fd) < 0) {
		fd = -1;
		rc = -errno;
		goto out_unlink;
	}
	fd = -1;
	if (rename(tmp, path) < 0) {
		rc = -errno;
		goto out_unlink;
	}
	/* The rename is durable only once the directory is synced. */
	dircopy = strdup(path);
	if (!dircopy) {
		rc = -ENOMEM;
		goto out;
	}
	dfd = open(dirname(dircopy), O_RDONLY | O_DIRECTORY);
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	rc = 0;
	goto out;
out_unlink:
	unlink(tmp);
out:
	if (fd >= 0)
		close(fd);
	free(dircopy);
	free(tmp);
	return rc;
}
