/* store.c - per-job plan documents on disk, indexed in memory. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ar.h"
#include "hmap.h"
#include "store.h"

#define STORE_WRITE_STRIPES	64

struct store_job {
	uid_t uid;
	char *key;			/* store_request_key() of the request */
	json_t *doc;			/* never modified once published */
};

struct store {
	char *dir;			/* STATE_DIR/jobs */
	pthread_mutex_t lock;		/* guards jobs */
	/* One writer per job at a time, so that the file on disk and the
	 * index agree; writes of different jobs (their fsyncs) overlap. */
	pthread_mutex_t write_locks[STORE_WRITE_STRIPES];
	struct hmap *jobs;		/* job id -> struct store_job */
};

static void store_job_free(void *p)
{
	struct store_job *sj = p;

	if (!sj)
		return;
	free(sj->key);
	json_decref(sj->doc);
	free(sj);
}

static pthread_mutex_t *store_write_lock(struct store *store, const char *job)
{
	unsigned int h = 5381;

	for (; *job; job++)
		h = h * 33 + (unsigned char)*job;
	return &store->write_locks[h % STORE_WRITE_STRIPES];
}

/*
 * The composition's name is a label (the plugin names it after the job):
 * two jobs on the same GPUs with the same model ask the same question.
 */
char *store_request_key(const json_t *request)
{
	json_t *cluster = json_object_get(request, "cluster");
	json_t *copy;
	char *key;

	if (!json_is_object(cluster) || !json_object_get(cluster, "name"))
		return json_dumps(request, JSON_COMPACT | JSON_SORT_KEYS);
	copy = json_copy((json_t *)request);
	cluster = json_copy(cluster);
	if (!copy || !cluster) {
		json_decref(copy);
		json_decref(cluster);
		return NULL;
	}
	json_object_del(cluster, "name");
	json_object_set_new(copy, "cluster", cluster);
	key = json_dumps(copy, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(copy);
	return key;
}

/* A store_job for @doc (a new reference is taken); NULL when invalid. */
static struct store_job *store_job_create(json_t *doc, uid_t uid)
{
	struct store_job *sj;
	json_t *request = json_object_get(doc, "request");

	if (!json_is_object(request) ||
	    !json_is_object(json_object_get(doc, "plan")))
		return NULL;
	sj = calloc(1, sizeof(*sj));
	if (!sj)
		return NULL;
	sj->key = store_request_key(request);
	if (!sj->key) {
		free(sj);
		return NULL;
	}
	sj->uid = uid;
	sj->doc = json_incref(doc);
	return sj;
}

static int store_mkdir(const char *path)
{
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return ar_seterr(-errno, "%s: cannot create: %s", path,
				 strerror(errno));
	return 0;
}

/* Load one directory entry; a crash's temporary files are removed. */
static void store_load_entry(struct store *store, const char *name)
{
	size_t n = strlen(name);
	struct store_job *sj;
	char *path = NULL;
	json_t *doc, *job;
	int64_t uid;

	if (name[0] == '.')
		return;
	if (asprintf(&path, "%s/%s", store->dir, name) < 0)
		return;
	if (strstr(name, ".tmp.")) {
		ar_log(LOG_NOTICE, "%s: removing a write a crash interrupted",
		       path);
		unlink(path);
		goto out;
	}
	if (n < 6 || strcmp(name + n - 5, ".json") != 0)
		goto out;
	doc = ar_json_load_file(path);
	if (!doc) {
		ar_log(LOG_WARNING, "skipping stored plan: %s", ar_errmsg());
		goto out;
	}
	job = json_object_get(doc, "job");
	/* A uid is 0 to 2^32 - 2 ((uid_t)-1 means none): -5 is no uid. */
	sj = ar_json_int64(doc, "uid", path, 0, UINT32_MAX - 1, true, &uid) == 0 &&
	     json_is_string(job) &&
	     strlen(json_string_value(job)) == n - 5 &&
	     strncmp(json_string_value(job), name, n - 5) == 0 ?
	     store_job_create(doc, (uid_t)uid) : NULL;
	if (!sj)
		ar_log(LOG_WARNING, "%s: skipping: not a plannerd job document with a uid",
		       path);
	else if (hmap_put(store->jobs, json_string_value(job), sj) < 0)
		store_job_free(sj);
	json_decref(doc);
out:
	free(path);
}

/* Make a removal durable: the directory entry is gone only once synced. */
static void store_sync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
}

int store_open(const char *state_dir, struct store **storep)
{
	struct store *store;
	struct dirent *de;
	DIR *dir;
	int rc;

	*storep = NULL;
	store = calloc(1, sizeof(*store));
	if (!store)
		return -ENOMEM;
	pthread_mutex_init(&store->lock, NULL);
	for (int i = 0; i < STORE_WRITE_STRIPES; i++)
		pthread_mutex_init(&store->write_locks[i], NULL);
	store->jobs = hmap_create(store_job_free);
	if (!store->jobs || asprintf(&store->dir, "%s/jobs", state_dir) < 0) {
		store->dir = NULL;
		rc = -ENOMEM;
		goto err;
	}
	rc = store_mkdir(state_dir);
	if (rc == 0)
		rc = store_mkdir(store->dir);
	if (rc < 0)
		goto err;
	dir = opendir(store->dir);
	if (!dir) {
		rc = ar_seterr(-errno, "%s: %s", store->dir, strerror(errno));
		goto err;
	}
	while ((de = readdir(dir)))
		store_load_entry(store, de->d_name);
	closedir(dir);
	*storep = store;
	return 0;
err:
	store_close(store);
	return rc;
}

void store_close(struct store *store)
{
	if (!store)
		return;
	hmap_destroy(store->jobs);
	pthread_mutex_destroy(&store->lock);
	for (int i = 0; i < STORE_WRITE_STRIPES; i++)
		pthread_mutex_destroy(&store->write_locks[i]);
	free(store->dir);
	free(store);
}

int store_get(struct store *store, const char *job, uid_t *uidp,
	      char **keyp, json_t **docp)
{
	struct store_job *sj;
	int rc = 0;

	if (keyp)
		*keyp = NULL;
	if (docp)
		*docp = NULL;
	pthread_mutex_lock(&store->lock);
	sj = hmap_get(store->jobs, job);
	if (!sj) {
		rc = ar_seterr(-AR_ENOTFOUND, "job %s: no stored plan", job);
		goto out;
	}
	if (keyp) {
		*keyp = strdup(sj->key);
		if (!*keyp) {
			rc = -ENOMEM;
			goto out;
		}
	}
	if (uidp)
		*uidp = sj->uid;
	if (docp)
		*docp = json_incref(sj->doc);
out:
	pthread_mutex_unlock(&store->lock);
	return rc;
}

int store_put(struct store *store, const char *job, uid_t uid, json_t *doc)
{
	struct store_job *sj = store_job_create(doc, uid);
	char *path = NULL, *text = NULL;
	pthread_mutex_t *wlock;
	int rc;

	if (!sj)
		return ar_seterr(-AR_EINVAL, "job %s: not a job document", job);
	text = json_dumps(doc, JSON_COMPACT);
	if (!text || asprintf(&path, "%s/%s.json", store->dir, job) < 0) {
		path = NULL;
		rc = -ENOMEM;
		goto out;
	}
	wlock = store_write_lock(store, job);
	pthread_mutex_lock(wlock);
	rc = ar_file_write_atomic(path, text, strlen(text), 0600);
	if (rc == 0) {
		pthread_mutex_lock(&store->lock);
		rc = hmap_put(store->jobs, job, sj);
		pthread_mutex_unlock(&store->lock);
		if (rc == 0)
			sj = NULL;
	} else {
		ar_seterr(rc, "%s: cannot write: %s", path, strerror(-rc));
	}
	pthread_mutex_unlock(wlock);
out:
	store_job_free(sj);
	free(text);
	free(path);
	return rc;
}

int store_forget(struct store *store, const char *job)
{
	pthread_mutex_t *wlock = store_write_lock(store, job);
	char *path = NULL;
	int rc = 0;

	if (asprintf(&path, "%s/%s.json", store->dir, job) < 0)
		return -ENOMEM;
	pthread_mutex_lock(wlock);
	pthread_mutex_lock(&store->lock);
	if (!hmap_get(store->jobs, job))
		rc = ar_seterr(-AR_ENOTFOUND, "job %s: no stored plan", job);
	pthread_mutex_unlock(&store->lock);
	/*
	 * The file goes first: a job forgotten in memory but not on disk
	 * would come back at the next start.  When it cannot be removed,
	 * the job stays and the caller is told.
	 */
	if (rc == 0 && unlink(path) < 0 && errno != ENOENT) {
		rc = -errno;
		ar_seterr(rc, "%s: cannot remove: %s; the job is kept", path,
			  strerror(-rc));
	}
	if (rc == 0) {
		store_sync_dir(store->dir);
		pthread_mutex_lock(&store->lock);
		hmap_remove(store->jobs, job);
		pthread_mutex_unlock(&store->lock);
	}
	pthread_mutex_unlock(wlock);
	free(path);
	return rc;
}

size_t store_count(struct store *store)
{
	size_t n;

	pthread_mutex_lock(&store->lock);
	n = hmap_count(store->jobs);
	pthread_mutex_unlock(&store->lock);
	return n;
}

struct store_foreach_arg {
	void (*fn)(const char *job, const char *key, const json_t *doc,
		   void *arg);
	void *arg;
};

static void store_foreach_one(const char *job, void *value, void *arg)
{
	struct store_foreach_arg *fa = arg;
	struct store_job *sj = value;

	fa->fn(job, sj->key, sj->doc, fa->arg);
}

void store_foreach(struct store *store,
		   void (*fn)(const char *job, const char *key,
			      const json_t *doc, void *arg),
		   void *arg)
{
	struct store_foreach_arg fa = { fn, arg };

	pthread_mutex_lock(&store->lock);
	hmap_foreach(store->jobs, store_foreach_one, &fa);
	pthread_mutex_unlock(&store->lock);
}
