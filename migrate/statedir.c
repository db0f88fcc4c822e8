/*
 * statedir.c - shard files: "ARSHARD1", the index length as 8 bytes little
 * endian, the JSON index, then the data.  One file per GPU, so replacing
 * a GPU's state is one rename.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ar.h"
#include "statedir.h"

#define HEADER_BYTES	16
#define MAX_INDEX	(64u << 20)

int statedir_path(char *buf, size_t size, const char *dir, const char *node,
		  int gpu, bool staged)
{
	int n = snprintf(buf, size, "%s/%srank-%s-%d.bin%s", dir,
			 staged ? "." : "", node, gpu,
			 staged ? ".migrating" : "");

	if (n < 0 || (size_t)n >= size)
		return ar_seterr(-ENAMETOOLONG, "state path too long under %s",
				 dir);
	return 0;
}

static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int read_all(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len > 0) {
		ssize_t n = read(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -AR_EINVAL;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int statedir_write(const char *path, const char *node, int gpu,
		   const struct migrate_shard *shards, int n, const void *buf)
{
	json_t *idx, *arr;
	char *text = NULL;
	unsigned char hdr[HEADER_BYTES];
	uint64_t bytes = 0, len;
	int fd = -1, rc;

	arr = json_array();
	for (int i = 0; arr && i < n; i++) {
		json_array_append_new(arr, json_pack("[i,i,I,I]",
				shards[i].layer, shards[i].tensor,
				(json_int_t)shards[i].lo,
				(json_int_t)shards[i].hi));
		bytes += shards[i].hi - shards[i].lo;
	}
	idx = json_pack("{s:i,s:s,s:i,s:I,s:o}", "arachne_shards", 1,
			"node", node, "gpu", gpu, "bytes", (json_int_t)bytes,
			"shards", arr);
	if (idx)
		text = json_dumps(idx, JSON_COMPACT);
	json_decref(idx);
	if (!text)
		return -ENOMEM;

	len = strlen(text);
	memcpy(hdr, STATEDIR_MAGIC, 8);
	for (int i = 0; i < 8; i++)
		hdr[8 + i] = (unsigned char)(len >> (8 * i));

	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = ar_seterr(-errno, "%s: %s", path, strerror(errno));
		goto out;
	}
	rc = write_all(fd, hdr, sizeof(hdr));
	if (!rc)
		rc = write_all(fd, text, len);
	if (!rc)
		rc = write_all(fd, buf, bytes);
	if (!rc && fsync(fd) < 0)
		rc = -errno;
	if (rc < 0)
		ar_seterr(rc, "%s: write failed: %s", path, ar_strerror(rc));
out:
	if (fd >= 0 && close(fd) < 0 && !rc)
		rc = ar_seterr(-errno, "%s: %s", path, strerror(errno));
	free(text);
	return rc;
}

int statedir_read(const char *path, struct migrate_shard **shardsp, int *np,
		  void **bufp, size_t *lenp)
{
	unsigned char hdr[HEADER_BYTES];
	struct migrate_shard *sh = NULL;
	char *text = NULL;
	void *buf = NULL;
	json_t *idx = NULL, *arr;
	uint64_t len = 0, bytes = 0;
	size_t n = 0;
	struct stat stt;
	int fd, rc;

	*shardsp = NULL;
	*bufp = NULL;
	*np = 0;
	*lenp = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ar_seterr(-errno, "%s: %s", path, strerror(errno));
	rc = read_all(fd, hdr, sizeof(hdr));
	if (rc < 0 || memcmp(hdr, STATEDIR_MAGIC, 8)) {
		rc = ar_seterr(-AR_EINVAL, "%s: not a shard file", path);
		goto out;
	}
	for (int i = 0; i < 8; i++)
		len |= (uint64_t)hdr[8 + i] << (8 * i);
	if (len == 0 || len > MAX_INDEX) {
		rc = ar_seterr(-AR_EINVAL, "%s: bad index length", path);
		goto out;
	}
	text = malloc(len + 1);
	if (!text) {
		rc = -ENOMEM;
		goto out;
	}
	rc = read_all(fd, text, len);
	if (rc < 0) {
		rc = ar_seterr(-AR_EINVAL, "%s: truncated index", path);
		goto out;
	}
	text[len] = '\0';
	idx = json_loads(text, 0, NULL);
	arr = json_object_get(idx, "shards");
	if (!json_is_array(arr)) {
		rc = ar_seterr(-AR_EINVAL, "%s: index has no shard list", path);
		goto out;
	}
	n = json_array_size(arr);
	sh = calloc(n + 1, sizeof(*sh));
	if (!sh) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		json_int_t l, t, lo, hi;

		if (json_unpack(json_array_get(arr, i), "[IIII]", &l, &t, &lo,
				&hi) || l < 0 || t < 0 || lo < 0 || hi <= lo) {
			rc = ar_seterr(-AR_EINVAL, "%s: index shard %zu is malformed",
				       path, i);
			goto out;
		}
		sh[i] = (struct migrate_shard){
			.layer = (int32_t)l, .tensor = (int32_t)t,
			.lo = (uint64_t)lo, .hi = (uint64_t)hi,
			.offset = bytes,
		};
		bytes += (uint64_t)(hi - lo);
	}
	if (fstat(fd, &stt) < 0 ||
	    (uint64_t)stt.st_size != HEADER_BYTES + len + bytes) {
		rc = ar_seterr(-AR_EINVAL,
			       "%s: holds %lld bytes, its index says %llu",
			       path, (long long)stt.st_size,
			       (unsigned long long)(HEADER_BYTES + len +
						    bytes));
		goto out;
	}
	buf = malloc(bytes ? bytes : 1);
	if (!buf) {
		rc = -ENOMEM;
		goto out;
	}
	rc = read_all(fd, buf, bytes);
	if (rc < 0) {
		rc = ar_seterr(-AR_EINVAL, "%s: truncated data", path);
		goto out;
	}
	*shardsp = sh;
	*np = (int)n;
	*bufp = buf;
	*lenp = bytes;
	sh = NULL;
	buf = NULL;
out:
	close(fd);
	json_decref(idx);
	free(text);
	free(sh);
	free(buf);
	return rc;
}

int statedir_load(const char *dir, const struct migrate *m, int rank,
		  void **bufp)
{
	const struct migrate_rank *rk = &m->ranks[rank];
	const char *node = m->topo->nodes[rk->node].name;
	struct migrate_shard *sh = NULL;
	char path[4096];
	size_t len;
	int n, rc;

	*bufp = NULL;
	if (m->n_old[rank] == 0) {
		*bufp = malloc(1);
		return *bufp ? 0 : -ENOMEM;
	}
	rc = statedir_path(path, sizeof(path), dir, node, rk->gpu, false);
	if (rc < 0)
		return rc;
	rc = statedir_read(path, &sh, &n, bufp, &len);
	if (rc < 0)
		return rc;
	if (n != m->n_old[rank])
		rc = ar_seterr(-AR_EINVAL,
			       "%s: holds %d shards, the old plan gives this GPU %d",
			       path, n, m->n_old[rank]);
	for (int i = 0; !rc && i < n; i++) {
		const struct migrate_shard *want = &m->old_shards[rank][i];

		if (sh[i].layer != want->layer ||
		    sh[i].tensor != want->tensor || sh[i].lo != want->lo ||
		    sh[i].hi != want->hi)
			rc = ar_seterr(-AR_EINVAL,
				       "%s: shard %d is layer %d tensor %d [%llu, %llu); the old plan says layer %d tensor %d [%llu, %llu)",
				       path, i, sh[i].layer, sh[i].tensor,
				       (unsigned long long)sh[i].lo,
				       (unsigned long long)sh[i].hi,
				       want->layer, want->tensor,
				       (unsigned long long)want->lo,
				       (unsigned long long)want->hi);
	}
	free(sh);
	if (rc < 0) {
		free(*bufp);
		*bufp = NULL;
	}
	return rc;
}

int statedir_stage(const char *dir, const struct migrate *m, int rank,
		   const void *buf)
{
	const struct migrate_rank *rk = &m->ranks[rank];
	char path[4096];
	int rc;

	if (m->n_new[rank] == 0)
		return 0;
	rc = statedir_path(path, sizeof(path), dir,
			   m->topo->nodes[rk->node].name, rk->gpu, true);
	if (rc < 0)
		return rc;
	return statedir_write(path, m->topo->nodes[rk->node].name, rk->gpu,
			      m->new_shards[rank], m->n_new[rank], buf);
}

static int fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

int statedir_commit(const char *dir, const struct migrate *m, int rank)
{
	const struct migrate_rank *rk = &m->ranks[rank];
	const char *node = m->topo->nodes[rk->node].name;
	char staged[4096], final[4096];
	int rc;

	rc = statedir_path(staged, sizeof(staged), dir, node, rk->gpu, true);
	if (!rc)
		rc = statedir_path(final, sizeof(final), dir, node, rk->gpu,
				   false);
	if (rc < 0)
		return rc;
	if (m->n_new[rank] == 0) {
		/* The GPU leaves the plan: its old state lives elsewhere. */
		if (unlink(final) < 0 && errno != ENOENT)
			return ar_seterr(-errno, "%s: %s", final,
					 strerror(errno));
	} else if (rename(staged, final) < 0) {
		return ar_seterr(-errno, "rename %s: %s", staged,
				 strerror(errno));
	}
	return fsync_dir(dir);
}

void statedir_unstage(const char *dir, const struct migrate *m, int rank)
{
	const struct migrate_rank *rk = &m->ranks[rank];
	char path[4096];

	if (statedir_path(path, sizeof(path), dir,
			  m->topo->nodes[rk->node].name, rk->gpu, true) == 0)
		unlink(path);
}
