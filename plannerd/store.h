/*
 * store.h - the plan store: one JSON document per job under
 * STATE_DIR/jobs/JOB.json, written atomically, loaded at start, so plans
 * survive restarts.  Thread-safe.
 *
 * A document is {"arachne_job":1, "job":..., "uid":..., "request":
 * {"model":{...}, "cluster":{...}}, "plan":{...}, "updated":...}; the
 * request is the normalized one the plan was made for.
 */
#ifndef PLANNERD_STORE_H
#define PLANNERD_STORE_H

#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

struct store;

/*
 * store_open() - create STATE_DIR/jobs if needed (mode 0700), remove the
 * temporary files a crash left and load every document.  A document that
 * does not parse is logged and skipped.  Caller frees with store_close().
 */
int store_open(const char *state_dir, struct store **storep);
void store_close(struct store *store);

/*
 * store_get() - the document of @job: a new reference in *@docp (may be
 * NULL), its owner in *@uidp and, when @keyp is not NULL, a copy of its
 * request key that the caller frees.  -AR_ENOTFOUND when there is none.
 */
int store_get(struct store *store, const char *job, uid_t *uidp,
	      char **keyp, json_t **docp);

/* store_put() - write @doc for @job owned by @uid, durably, then publish. */
int store_put(struct store *store, const char *job, uid_t uid, json_t *doc);

/* store_forget() - delete @job's document; -AR_ENOTFOUND if none. */
int store_forget(struct store *store, const char *job);

size_t store_count(struct store *store);

/* Calls @fn for every stored job (for seeding the answer cache). */
void store_foreach(struct store *store,
		   void (*fn)(const char *job, const char *key,
			      const json_t *doc, void *arg),
		   void *arg);

/*
 * store_request_key() - the canonical text of a normalized request (sorted
 * keys, compact, without the composition's name): equal requests have
 * equal keys.  Caller frees.
 */
char *store_request_key(const json_t *request);

#endif /* PLANNERD_STORE_H */
