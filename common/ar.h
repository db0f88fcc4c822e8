/*
 * ar.h - the internal library shared by every Arachne module (libarcommon):
 * error codes, logging, hostlists, JSON and file helpers, growable arrays.
 *
 * Conventions (see HACKING.md): int functions return 0 on success and a
 * negative value on failure, -errno for system errors and -AR_E* for
 * domain errors; ar_strerror() names both.  Pointer returns are NULL with
 * errno set.
 */
#ifndef AR_COMMON_H
#define AR_COMMON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <syslog.h>

#include <jansson.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Domain errors start at 1000 so that they never collide with errno. */
enum ar_err {
	AR_EINVAL = 1000,	/* bad input: malformed file, unknown name, bad value */
	AR_ENOTFOUND,		/* no such GPU, model, profile entry or job */
	AR_EINFEASIBLE,		/* no plan fits: memory, GPU count, node size */
	AR_ENOPROFILE,		/* the layer profiles lack an entry the plan needs */
	AR_ETIMEOUT,		/* a deadline or budget passed */
	AR_EPROTO,		/* a peer broke the protocol */
	AR_EPERM,		/* the peer may not act on this object */
	AR_ENOTBUILT,		/* a feature this build does not have */
	AR_EABORT,		/* a peer aborted (migration) */
	AR_ELAST
};

/* ar_strerror() - text for @rc, either -errno or -AR_E* (or positive). */
const char *ar_strerror(int rc);

/* ar_err_name() - stable wire name for @rc ("invalid", "infeasible", ...). */
const char *ar_err_name(int rc);

/*
 * Error details: a library call that fails may leave a message naming
 * what was wrong (the file, the field, the reason) in a per-thread buffer.
 * ar_errmsg() returns it ("" when none); ar_seterr() sets it and returns
 * @rc so that callers can write `return ar_seterr(-AR_EINVAL, ...)`.
 */
int ar_seterr(int rc, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
const char *ar_errmsg(void);
void ar_clearerr(void);

/*
 * Logging.  Messages go to stderr (the default, and plannerd -F) or to
 * syslog after ar_log_open(..., true).  Priorities are syslog's.
 */
void ar_log_open(const char *ident, bool use_syslog, int max_priority);
void ar_log_close(void);
void ar_log(int priority, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void ar_vlog(int priority, const char *fmt, va_list ap);
int ar_log_level_parse(const char *name);	/* "debug" -> LOG_DEBUG; -1 if unknown */

/*
 * Hostlists (Slurm syntax): "gpu[001-004,010],login1".
 * ar_hostlist_expand() stores a NULL-terminated array of names in *@hostsp
 * and their count in *@np; the caller frees it with ar_hostlist_free().
 * Returns 0 or -AR_EINVAL (with ar_errmsg() saying why).
 */
int ar_hostlist_expand(const char *expr, char ***hostsp, size_t *np);
void ar_hostlist_free(char **hosts);

/*
 * ar_json_load_file() - parse the JSON file at @path; on failure returns
 * NULL and leaves "path:line:column: reason" in ar_errmsg().  The caller
 * owns the reference.
 */
json_t *ar_json_load_file(const char *path);

/*
 * ar_json_check_keys() - fail with -AR_EINVAL when @obj has a key that is
 * not in the NULL-terminated @allowed list; @what names the object in the
 * message ("cluster node entry 2").
 */
int ar_json_check_keys(const json_t *obj, const char *const *allowed,
		       const char *what);

/*
 * ar_file_write_atomic() - write @len bytes to @path through a temporary
 * file in the same directory, fsync it, rename it over @path and fsync the
 * directory, so a reader sees the old file or the new one, never a part.
 */
int ar_file_write_atomic(const char *path, const void *buf, size_t len,
			 int mode);

/* ar_now() - monotonic time in seconds. */
double ar_now(void);

/* Sizes in bytes, as doubles (memory capacities and footprints). */
#define MIB (1024.0 * 1024.0)
#define GIB (1024.0 * MIB)

/*
 * ARRAY_SIZE() - the number of elements of the array @a.  Given a pointer
 * instead of an array it does not compile.
 */
#define AR_MUST_BE_ARRAY(a) \
	(sizeof(struct { int ar_not_an_array : 1 - 2 * \
		__builtin_types_compatible_p(__typeof__(a), \
					     __typeof__(&(a)[0])); }) * 0)
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]) + AR_MUST_BE_ARRAY(a))

/*
 * AR_GROW() - make room for @need elements in the growable array @v (any
 * object pointer, NULL when empty) whose capacity in elements is the
 * size_t @cap: when @need exceeds it, the capacity doubles, from @first,
 * until it holds @need, and @v is reallocated.  Evaluates to 0, or to
 * -ENOMEM with @v and @cap unchanged.  Appending one element:
 *
 *	if (AR_GROW(v->items, v->cap, v->n + 1, 16) < 0)
 *		return -ENOMEM;
 *	v->items[v->n++] = item;
 */
#define AR_GROW(v, cap, need, first) \
	((size_t)(need) <= (cap) ? 0 : \
	 ar_grow((void **)&(v), &(cap), (need), sizeof(*(v)), (first)))
int ar_grow(void **vp, size_t *capp, size_t need, size_t size, size_t first);

#ifdef __cplusplus
}
#endif
#endif /* AR_COMMON_H */
