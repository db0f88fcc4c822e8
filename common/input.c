/*
 * input.c - the input validation layer: bounded reads of regular files
 * and range-checked 64-bit integers and finite numbers, from JSON and
 * from text.  docs/limits.md lists the bounds the parsers pass in.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ar.h"

static const char *file_kind(mode_t mode)
{
	if (S_ISDIR(mode))
		return "a directory";
	if (S_ISFIFO(mode))
		return "a FIFO";
	if (S_ISCHR(mode))
		return "a character device";
	if (S_ISBLK(mode))
		return "a block device";
	if (S_ISSOCK(mode))
		return "a socket";
	return "not a regular file";
}

int ar_file_open_regular(const char *path, size_t max)
{
	struct stat sb;
	int fd, rc;

	/* O_NONBLOCK: opening a FIFO with no writer must not wait for one. */
	fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		return ar_seterr(rc, "%s: %s", path, strerror(-rc));
	}
	if (fstat(fd, &sb) < 0) {
		rc = -errno;
		ar_seterr(rc, "%s: %s", path, strerror(-rc));
		goto err;
	}
	if (!S_ISREG(sb.st_mode)) {
		rc = ar_seterr(-AR_EINVAL, "%s: is %s, not a regular file", path,
			       file_kind(sb.st_mode));
		goto err;
	}
	if ((uintmax_t)sb.st_size > max) {
		rc = ar_seterr(-AR_EINVAL, "%s: %jd bytes, more than the limit of %zu (docs/limits.md)",
			       path, (intmax_t)sb.st_size, max);
		goto err;
	}
	if (fcntl(fd, F_SETFL, 0) < 0) {
		rc = -errno;
		ar_seterr(rc, "%s: %s", path, strerror(-rc));
		goto err;
	}
	return fd;
err:
	close(fd);
	return rc;
}

int ar_file_read(const char *path, size_t max, char **bufp, size_t *lenp)
{
	/* Reading one byte beyond the limit tells a file that grew past it. */
	size_t limit = max + 1, len = 0, cap;
	char *buf;
	int fd, rc;

	*bufp = NULL;
	*lenp = 0;
	fd = ar_file_open_regular(path, max);
	if (fd < 0)
		return fd;
	cap = (limit < 65536 ? limit : 65536) + 1;
	buf = malloc(cap);
	if (!buf) {
		rc = -ENOMEM;
		goto out;
	}
	while (len < limit) {
		ssize_t n;

		if (len + 1 == cap) {
			size_t ncap = (2 * len < limit ? 2 * len : limit) + 1;
			char *nb = realloc(buf, ncap);

			if (!nb) {
				rc = -ENOMEM;
				goto out;
			}
			buf = nb;
			cap = ncap;
		}
		n = read(fd, buf + len, cap - 1 - len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			ar_seterr(rc, "%s: %s", path, strerror(-rc));
			goto out;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (len > max) {
		rc = ar_seterr(-AR_EINVAL, "%s: more than the limit of %zu bytes (docs/limits.md)",
			       path, max);
		goto out;
	}
	buf[len] = '\0';
	*bufp = buf;
	*lenp = len;
	buf = NULL;
	rc = 0;
out:
	free(buf);
	close(fd);
	return rc;
}

size_t ar_skip_bom(const char *buf, size_t len)
{
	return len >= 3 && memcmp(buf, "\xef\xbb\xbf", 3) == 0 ? 3 : 0;
}

/* ------------------------------------------------------------------ */

int ar_json_int64_value(const json_t *v, const char *what, int64_t min,
			int64_t max, int64_t *out)
{
	json_int_t x;

	if (!json_is_integer(v))
		return ar_seterr(-AR_EINVAL, "%s must be an integer from %" PRId64 " to %" PRId64,
				 what, min, max);
	x = json_integer_value(v);
	if (x < min || x > max)
		return ar_seterr(-AR_EINVAL, "%s must be an integer from %" PRId64 " to %" PRId64 ", not %" PRId64,
				 what, min, max, (int64_t)x);
	*out = x;
	return 0;
}

int ar_json_int64(const json_t *obj, const char *key, const char *what,
		  int64_t min, int64_t max, bool required, int64_t *out)
{
	const json_t *v = json_object_get(obj, key);
	char name[256];

	if (!v) {
		if (required)
			return ar_seterr(-AR_EINVAL, "%s: \"%s\" is missing",
					 what, key);
		return 0;
	}
	snprintf(name, sizeof(name), "%s: \"%s\"", what, key);
	return ar_json_int64_value(v, name, min, max, out);
}

int ar_json_int(const json_t *obj, const char *key, const char *what,
		int min, int max, bool required, int *out)
{
	int64_t v = *out;
	int rc = ar_json_int64(obj, key, what, min, max, required, &v);

	if (rc == 0)
		*out = (int)v;
	return rc;
}

int ar_json_number(const json_t *obj, const char *key, const char *what,
		   double min, double max, bool required, double *out)
{
	const json_t *v = json_object_get(obj, key);
	double x;

	if (!v) {
		if (required)
			return ar_seterr(-AR_EINVAL, "%s: \"%s\" is missing",
					 what, key);
		return 0;
	}
	if (!json_is_number(v) || !isfinite(json_number_value(v)))
		return ar_seterr(-AR_EINVAL, "%s: \"%s\" must be a number from %g to %g",
				 what, key, min, max);
	x = json_number_value(v);
	if (x < min || x > max)
		return ar_seterr(-AR_EINVAL, "%s: \"%s\" must be a number from %g to %g, not %g",
				 what, key, min, max, x);
	*out = x;
	return 0;
}

/* ------------------------------------------------------------------ */

int ar_parse_int64(const char *s, const char *what, int64_t min,
		   int64_t max, int64_t *out)
{
	long long v;
	char *end;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (end == s || *end || (errno && errno != ERANGE))
		return ar_seterr(-AR_EINVAL, "%s = \"%s\" is not an integer",
				 what, s);
	if (errno == ERANGE || v < min || v > max)
		return ar_seterr(-AR_EINVAL, "%s = %s is out of range [%" PRId64 ", %" PRId64 "]",
				 what, s, min, max);
	*out = v;
	return 0;
}

int ar_parse_double(const char *s, const char *what, double min,
		    double max, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end || !isfinite(v))
		return ar_seterr(-AR_EINVAL, "%s = \"%s\" is not a number",
				 what, s);
	/* ERANGE: an overflow was caught above; an underflow is out of range
	 * unless zero is in it. */
	if ((errno == ERANGE && !(min <= 0 && max >= 0)) || v < min || v > max)
		return ar_seterr(-AR_EINVAL, "%s = %s is out of range [%g, %g]",
				 what, s, min, max);
	*out = errno == ERANGE ? 0 : v;
	return 0;
}
