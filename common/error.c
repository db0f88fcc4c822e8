/* error.c - error codes and the per-thread error detail. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "ar.h"

static const struct {
	const char *name;
	const char *text;
} ar_errs[AR_ELAST - AR_EINVAL] = {
	[AR_EINVAL - AR_EINVAL] = { "invalid", "invalid input" },
	[AR_ENOTFOUND - AR_EINVAL] = { "not_found", "not found" },
	[AR_EINFEASIBLE - AR_EINVAL] = { "infeasible", "no feasible plan" },
	[AR_ENOPROFILE - AR_EINVAL] = { "no_profile", "no profile entry" },
	[AR_ETIMEOUT - AR_EINVAL] = { "timeout", "timed out" },
	[AR_EPROTO - AR_EINVAL] = { "protocol", "protocol error" },
	[AR_EPERM - AR_EINVAL] = { "permission", "permission denied" },
	[AR_ENOTBUILT - AR_EINVAL] = { "not_built", "not built" },
	[AR_EABORT - AR_EINVAL] = { "aborted", "aborted by a peer" },
};

static _Thread_local char ar_errbuf[1024];

const char *ar_strerror(int rc)
{
	if (rc < 0)
		rc = -rc;
	if (rc >= AR_EINVAL && rc < AR_ELAST)
		return ar_errs[rc - AR_EINVAL].text;
	return strerror(rc);
}

const char *ar_err_name(int rc)
{
	if (rc < 0)
		rc = -rc;
	if (rc >= AR_EINVAL && rc < AR_ELAST)
		return ar_errs[rc - AR_EINVAL].name;
	return "system";
}

int ar_seterr(int rc, const char *fmt, ...)
{
	char tmp[sizeof(ar_errbuf)];
	va_list ap;

	/* Through a copy: callers may pass ar_errmsg() to add context. */
	va_start(ap, fmt);
	vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	memcpy(ar_errbuf, tmp, sizeof(tmp));
	return rc;
}

const char *ar_errmsg(void)
{
	return ar_errbuf;
}

void ar_clearerr(void)
{
	ar_errbuf[0] = '\0';
}
