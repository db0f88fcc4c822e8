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
#include <stdint.h>
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
/* Prefix stderr lines with the local time (a daemon in the foreground). */
void ar_log_timestamps(bool on);
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

/* ar_json_load_file() - see ar_json_load_file_max() below. */
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

/*
 * ar_file_write_output() - a program's -o FILE: ar_file_write_atomic() on
 * the file @path names.  An existing symlink is written through (its
 * target is replaced, the link stays); anything but a regular file at
 * the end (a FIFO, a device, a directory) is refused with -AR_EINVAL and
 * a message, so that -o never replaces /dev/full or a pipe with a file.
 */
int ar_file_write_output(const char *path, const void *buf, size_t len,
			 int mode);

/* ---------------------------------------------------------------------
 * The input validation layer (common/input.c, docs/limits.md).  Every
 * parser of a file or a request reads through these: files are read with
 * a bound and only when regular, integers are read as 64-bit and checked
 * against a documented range before they are narrowed, numbers must be
 * finite and in range, and products are checked for overflow.
 * ------------------------------------------------------------------- */

/* Size limits of the files Arachne reads (docs/limits.md). */
#define AR_LIMIT_JSON_BYTES	(64UL << 20)	/* plans, clusters, state */
#define AR_LIMIT_MIGRATION_BYTES (256UL << 20)	/* migration files */
#define AR_LIMIT_INI_BYTES	(4UL << 20)	/* GPU, model, layer profiles */
#define AR_LIMIT_CONF_BYTES	(1UL << 20)	/* plannerd.conf */
#define AR_LIMIT_POLICY_BYTES	(64UL << 20)	/* policy weights */
#define AR_LIMIT_HOSTS		65536		/* names one hostlist expands to */

/*
 * ar_file_open_regular() - open @path for reading, refusing without
 * blocking anything that is not a regular file (a FIFO, a device, a
 * directory) and a file larger than @max bytes.  Returns the descriptor
 * or -errno / -AR_EINVAL with "PATH: reason" in ar_errmsg().  A missing
 * file is -ENOENT.
 */
int ar_file_open_regular(const char *path, size_t max);

/*
 * ar_file_read() - the whole regular file @path, at most @max bytes, into
 * a NUL-terminated buffer *@bufp (caller frees) of *@lenp bytes.
 * Errors as ar_file_open_regular(); a file that grows past @max while it
 * is read is refused too.
 */
int ar_file_read(const char *path, size_t max, char **bufp, size_t *lenp);

/*
 * ar_skip_bom() - a UTF-8 byte-order mark at the start of @buf is skipped
 * (editors on other systems write one): the offset of the text proper.
 */
size_t ar_skip_bom(const char *buf, size_t len);

/*
 * ar_json_load_file() - parse the JSON file at @path (a regular file of
 * at most AR_LIMIT_JSON_BYTES); on failure returns NULL and leaves
 * "path:line:column: reason" in ar_errmsg().  The caller owns the
 * reference.  ar_json_load_file_max() takes the limit.
 */
json_t *ar_json_load_file_max(const char *path, size_t max);

/*
 * JSON members.  @what names the object in messages ("plan: templates[0]").
 * Absent optional members leave *@out unchanged and return 0; a value
 * that is not an integer, or one outside [@min, @max], fails with
 * -AR_EINVAL and a message giving the range.  The value is read as a
 * 64-bit integer and checked before it is narrowed, so 2^32 + 1 is out
 * of range, never 1.
 */
int ar_json_int64(const json_t *obj, const char *key, const char *what,
		  int64_t min, int64_t max, bool required, int64_t *out);
int ar_json_int(const json_t *obj, const char *key, const char *what,
		int min, int max, bool required, int *out);
/* The same for a value that is not a member (an array element). */
int ar_json_int64_value(const json_t *v, const char *what, int64_t min,
			int64_t max, int64_t *out);
/* A finite number (integer or real) in [@min, @max]. */
int ar_json_number(const json_t *obj, const char *key, const char *what,
		   double min, double max, bool required, double *out);

/*
 * Text (INI values, plannerd.conf, the command line): the whole of @s
 * must be a decimal integer (or a finite number) in [@min, @max].
 * @what names the setting in messages.
 */
int ar_parse_int64(const char *s, const char *what, int64_t min,
		   int64_t max, int64_t *out);
int ar_parse_double(const char *s, const char *what, double min,
		    double max, double *out);

/* Overflow-checked arithmetic: false (and *@out untouched) on overflow. */
static inline bool ar_mul_i64(int64_t a, int64_t b, int64_t *out)
{
	int64_t r;

	if (__builtin_mul_overflow(a, b, &r))
		return false;
	*out = r;
	return true;
}

static inline bool ar_add_i64(int64_t a, int64_t b, int64_t *out)
{
	int64_t r;

	if (__builtin_add_overflow(a, b, &r))
		return false;
	*out = r;
	return true;
}

/*
 * An elastic job's plan directory (jobdir.c, docs/elastic.md), shared by
 * the arachne.so plugin and arachnectl: state.json, plan.G.json,
 * cluster.G.json, migration.G.json and a lock file.
 *
 * ar_jobdir_file() - DIR/KIND.G.json (G > 0) or DIR/KIND.json into @buf.
 * ar_jobdir_lock() - flock DIR/lock within @timeout_s: a descriptor for
 *   ar_jobdir_unlock(), or -errno / -AR_ETIMEOUT.
 * ar_jobdir_load() - state.json into *@statep (NULL when there is none).
 * ar_jobdir_plan() - plan G, or NULL with ar_errmsg() set.
 * ar_jobdir_cluster() - the composition plan G was made for, as plannerd
 *   mapped it (PROTOCOL.md: the answer's "cluster"), or NULL with
 *   ar_errmsg() set (errno ENOENT: a directory written without it).
 * ar_jobdir_store() - write @plan, @cluster and @migration (NULL: none,
 *   and an old file of that kind for G + 1 goes) as generation G + 1, then
 *   @state naming it; every file atomically.  *@generationp is the new
 *   generation.
 * ar_jobdir_save() - write @state alone.
 * ar_jobdir_remove() - the directory and its files (the job is over).
 * ar_jobdir_replan_request() - plannerd's replan of @state's job onto
 *   @cluster, carrying the plan whose layout the state is in and its
 *   composition (PROTOCOL.md "previous"), the model and the user; NULL
 *   when that plan cannot be read.
 */
int ar_jobdir_file(char *buf, size_t len, const char *dir, const char *kind,
		   unsigned g);
int ar_jobdir_lock(const char *dir, double timeout_s);
void ar_jobdir_unlock(int fd);
int ar_jobdir_load(const char *dir, json_t **statep);
json_t *ar_jobdir_plan(const char *dir, unsigned g);
json_t *ar_jobdir_cluster(const char *dir, unsigned g);
int ar_jobdir_store(const char *dir, json_t *state, const json_t *plan,
		    const json_t *cluster, const json_t *migration,
		    unsigned *generationp);
int ar_jobdir_save(const char *dir, const json_t *state);
int ar_jobdir_remove(const char *dir);
json_t *ar_jobdir_replan_request(const char *dir, const json_t *state,
				 const json_t *cluster);

/*
 * Compositions (ARCHITECTURE.md) whose entries name one host each, as the
 * plugin writes them: whether @node is in @comp; @comp without the nodes
 * named in the JSON array @nodes (a new reference).
 */
bool ar_composition_has(const json_t *comp, const char *node);
json_t *ar_composition_without(const json_t *comp, const json_t *nodes);

/* ar_plan_summary() - one line: model, templates, pipelines, GPUs, rates. */
void ar_plan_summary(const json_t *plan, char *buf, size_t len);

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
