/*
 * file.c - JSON file loading with located errors, atomic file writes, and
 * the output files of -o options.
 */
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

json_t *ar_json_load_file_max(const char *path, size_t max)
{
	json_error_t jerr;
	json_t *root;
	size_t len, skip;
	char *buf;
	int rc;

	rc = ar_file_read(path, max, &buf, &len);
	if (rc < 0) {
		errno = rc > -AR_EINVAL ? -rc : EINVAL;
		return NULL;
	}
	skip = ar_skip_bom(buf, len);
	root = json_loadb(buf + skip, len - skip, JSON_REJECT_DUPLICATES, &jerr);
	free(buf);
	if (!root) {
		ar_seterr(-AR_EINVAL, "%s:%d:%d: %s", path, jerr.line,
			  jerr.column, jerr.text);
		errno = EINVAL;
	}
	return root;
}

json_t *ar_json_load_file(const char *path)
{
	return ar_json_load_file_max(path, AR_LIMIT_JSON_BYTES);
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

int ar_file_write_output(const char *path, const void *buf, size_t len,
			 int mode)
{
	char *target = NULL;
	struct stat sb;
	int rc;

	/* stat() follows links: what would be replaced is what counts. */
	if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
		return ar_seterr(-AR_EINVAL, "%s: is %s; an output file must be a regular file (leave the option out to write to standard output)",
				 path, S_ISDIR(sb.st_mode) ? "a directory" :
				 S_ISFIFO(sb.st_mode) ? "a FIFO" :
				 S_ISCHR(sb.st_mode) ? "a character device" :
				 S_ISBLK(sb.st_mode) ? "a block device" :
				 S_ISSOCK(sb.st_mode) ? "a socket" :
				 "not a regular file");
	if (lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode)) {
		/* Replace the link's target, not the link. */
		target = realpath(path, NULL);
		if (!target) {
			rc = -errno;
			return ar_seterr(rc, "%s: a symbolic link whose target cannot be resolved: %s",
					 path, strerror(-rc));
		}
	}
	rc = ar_file_write_atomic(target ? target : path, buf, len, mode);
	if (rc < 0)
		ar_seterr(rc, "%s: %s", target ? target : path, strerror(-rc));
	free(target);
	return rc;
}
