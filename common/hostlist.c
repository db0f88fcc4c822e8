/*
 * hostlist.c - expand Slurm hostlist expressions: comma-separated names,
 * each with at most one bracketed range list ("gpu[001-004,010]"); the
 * width of a zero-padded lower bound is kept, as Slurm does.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ar.h"

#define HOSTLIST_MAX AR_LIMIT_HOSTS	/* what one expression may name */
#define HOSTLIST_DIGITS 9	/* host numbers stay far from ULONG_MAX */

struct names {
	char **v;
	size_t n, cap;
};

static int names_add(struct names *nm, const char *s, size_t len)
{
	if (AR_GROW(nm->v, nm->cap, nm->n + 2, 16) < 0)
		return -ENOMEM;
	nm->v[nm->n] = strndup(s, len);
	if (!nm->v[nm->n])
		return -ENOMEM;
	nm->n++;
	nm->v[nm->n] = NULL;
	return 0;
}

/* Expand "prefix[ranges]suffix" where @lb..@rb are the brackets. */
static int expand_ranges(struct names *nm, const char *item, size_t len,
			 const char *lb, const char *rb, const char *expr)
{
	const char *p = lb + 1;
	size_t plen = lb - item;
	const char *suffix = rb + 1;
	size_t slen = item + len - suffix;

	while (p < rb) {
		char *end;
		unsigned long lo, hi;
		int width;

		if (!isdigit((unsigned char)*p))
			goto bad;
		lo = strtoul(p, &end, 10);
		width = (int)(end - p);
		if (width > HOSTLIST_DIGITS)
			goto bad;
		hi = lo;
		p = end;
		if (*p == '-') {
			p++;
			if (!isdigit((unsigned char)*p))
				goto bad;
			hi = strtoul(p, &end, 10);
			if (end - p > HOSTLIST_DIGITS)
				goto bad;
			p = end;
		}
		/* Counted before a name is made: "n[0000000-0999999]" is
		 * refused at once, not after a million names. */
		if (hi < lo || hi - lo >= HOSTLIST_MAX ||
		    nm->n + (hi - lo) >= HOSTLIST_MAX)
			goto too_many;
		if (p < rb && *p++ != ',')
			goto bad;
		for (unsigned long i = lo; i <= hi; i++) {
			char buf[512];
			int n = snprintf(buf, sizeof(buf), "%.*s%0*lu%.*s",
					 (int)plen, item, width, i, (int)slen,
					 suffix);
			int rc;

			if (n < 0 || (size_t)n >= sizeof(buf))
				goto bad;
			rc = names_add(nm, buf, (size_t)n);
			if (rc < 0)
				return rc;
		}
	}
	return 0;
bad:
	return ar_seterr(-AR_EINVAL, "hostlist \"%s\": bad range in \"%.*s\"",
			 expr, (int)len, item);
too_many:
	return ar_seterr(-AR_EINVAL, "hostlist \"%s\": \"%.*s\" names more than %d hosts",
			 expr, (int)len, item, HOSTLIST_MAX);
}

int ar_hostlist_expand(const char *expr, char ***hostsp, size_t *np)
{
	struct names nm = { 0 };
	const char *p = expr;
	int rc = 0;

	*hostsp = NULL;
	*np = 0;
	if (!expr || !*expr)
		return ar_seterr(-AR_EINVAL, "hostlist is empty");

	while (*p) {
		const char *item = p, *lb = NULL, *rb = NULL;
		int depth = 0;

		/* An item ends at a comma outside brackets. */
		for (; *p && (depth || *p != ','); p++) {
			if (*p == '[') {
				if (depth || lb)
					goto bad;
				depth = 1;
				lb = p;
			} else if (*p == ']') {
				if (!depth)
					goto bad;
				depth = 0;
				rb = p;
			} else if (isspace((unsigned char)*p)) {
				goto bad;
			}
		}
		if (depth || p == item)
			goto bad;
		if (lb)
			rc = expand_ranges(&nm, item, p - item, lb, rb, expr);
		else if (nm.n >= HOSTLIST_MAX)
			rc = ar_seterr(-AR_EINVAL, "hostlist \"%.64s...\" names more than %d hosts",
				       expr, HOSTLIST_MAX);
		else
			rc = names_add(&nm, item, p - item);
		if (rc < 0)
			goto fail;
		if (*p == ',') {
			p++;
			if (!*p)
				goto bad;
		}
	}
	*hostsp = nm.v;
	*np = nm.n;
	return 0;
bad:
	rc = ar_seterr(-AR_EINVAL, "hostlist \"%s\" does not parse", expr);
fail:
	for (size_t i = 0; i < nm.n; i++)
		free(nm.v[i]);
	free(nm.v);
	return rc;
}

void ar_hostlist_free(char **hosts)
{
	if (!hosts)
		return;
	for (char **h = hosts; *h; h++)
		free(*h);
	free(hosts);
}
