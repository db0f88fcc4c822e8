/*
 * ckpt.c - checkpoints: every rank that holds state writes its state
 * buffer to its own file, atomically, and reads it back to resume.  The
 * trainer writes one before each plan change (so that a migration that
 * fails leaves a state to restart from) and after the last step.
 *
 * DIR/rank-NODE-GPU.bin: the 8 bytes "ARGPTCK1", the length L of an index
 * as 8 bytes little endian, the index (JSON: model, node, gpu, step,
 * layers, units, floats), then the rank's state buffer (FP32, the layout
 * of params.c).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "ar.h"
#include "gpt.h"

#define CKPT_MAGIC	"ARGPTCK1"
#define CKPT_MAX_INDEX	4096

static int ckpt_path(char *buf, size_t size, const struct gpt_job *job,
		     const char *dir, bool staged)
{
	const char *node = job->cl ? job->cl->nodes[job->node_of[job->rank]].name :
				     "local";
	int n = snprintf(buf, size, "%s/%srank-%s-%d.bin%s", dir,
			 staged ? "." : "", node, job->gpu_of[job->rank],
			 staged ? ".tmp" : "");

	if (n < 0 || (size_t)n >= size)
		return ar_seterr(-ENAMETOOLONG, "%s: checkpoint path too long", dir);
	return 0;
}

static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= n;
	}
	return 0;
}

int gpt_ckpt_save(const struct gpt_trainer *tr, const char *dir, long step)
{
	const struct gpt_job *job = tr->job;
	const struct gpt_shard *sh = &tr->shard;
	char path[4096], tmp[4096], *index = NULL;
	uint8_t len8[8];
	size_t len;
	json_t *j;
	int fd = -1, rc;

	if (!sh->state)
		return 0;
	if ((rc = ckpt_path(path, sizeof(path), job, dir, false)) < 0 ||
	    (rc = ckpt_path(tmp, sizeof(tmp), job, dir, true)) < 0)
		return rc;
	j = json_pack("{s:i, s:s, s:i, s:I, s:[i,i], s:[i,i], s:I}",
		      "arachne_gpt_checkpoint", 1,
		      "model", costmodel_model(job->cm)->name,
		      "gpu", job->gpu_of[job->rank], "step", (json_int_t)step,
		      "layers", sh->first, sh->last, "units", sh->u0, sh->nu,
		      "floats", (json_int_t)sh->state_floats);
	index = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!index)
		return -ENOMEM;
	len = strlen(index);
	for (int i = 0; i < 8; i++)
		len8[i] = (uint8_t)(len >> (8 * i));
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = ar_seterr(-errno, "%s: %s", tmp, strerror(errno));
		goto out;
	}
	if ((rc = write_all(fd, CKPT_MAGIC, 8)) < 0 ||
	    (rc = write_all(fd, len8, 8)) < 0 ||
	    (rc = write_all(fd, index, len)) < 0 ||
	    (rc = write_all(fd, sh->state, sh->state_floats * sizeof(float))) < 0 ||
	    (fsync(fd) < 0 && (rc = -errno) < 0)) {
		rc = ar_seterr(rc, "%s: %s", tmp, strerror(-rc));
		goto out;
	}
	if (close(fd) < 0) {
		fd = -1;
		rc = ar_seterr(-errno, "%s: %s", tmp, strerror(errno));
		goto out;
	}
	fd = -1;
	if (rename(tmp, path) < 0)
		rc = ar_seterr(-errno, "%s: %s", path, strerror(errno));
out:
	if (fd >= 0)
		close(fd);
	if (rc < 0)
		unlink(tmp);
	free(index);
	return rc;
}

static int read_all(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		len -= n;
	}
	return 0;
}

int gpt_ckpt_load(struct gpt_trainer *tr, const char *dir, long *stepp)
{
	const struct gpt_job *job = tr->job;
	struct gpt_shard *sh = &tr->shard;
	char path[4096], magic[8], *index = NULL;
	uint8_t len8[8];
	uint64_t len = 0;
	json_t *j = NULL;
	json_error_t err;
	json_int_t step = -1, floats = -1;
	int fd, rc, first, last, u0, nu, gpu;
	const char *model;

	*stepp = -1;
	if (!sh->state)
		return 0;
	if ((rc = ckpt_path(path, sizeof(path), job, dir, false)) < 0)
		return rc;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ar_seterr(-errno, "%s: %s", path, strerror(errno));
	rc = read_all(fd, magic, 8);
	if (rc == 0 && memcmp(magic, CKPT_MAGIC, 8))
		rc = -AR_EINVAL;
	if (rc == 0)
		rc = read_all(fd, len8, 8);
	for (int i = 0; rc == 0 && i < 8; i++)
		len |= (uint64_t)len8[i] << (8 * i);
	if (rc == 0 && (len == 0 || len > CKPT_MAX_INDEX))
		rc = -AR_EINVAL;
	if (rc == 0 && !(index = calloc(1, len + 1)))
		rc = -ENOMEM;
	if (rc == 0)
		rc = read_all(fd, index, len);
	if (rc == 0 && !(j = json_loads(index, 0, &err)))
		rc = -AR_EINVAL;
	if (rc == 0 &&
	    json_unpack(j, "{s:s, s:i, s:I, s:[i,i], s:[i,i], s:I}", "model",
			&model, "gpu", &gpu, "step", &step, "layers", &first,
			&last, "units", &u0, &nu, "floats", &floats) < 0)
		rc = -AR_EINVAL;
	if (rc == -AR_EINVAL) {
		rc = ar_seterr(rc, "%s: not an arachne-gpt checkpoint", path);
		goto out;
	}
	if (rc < 0) {
		rc = ar_seterr(rc, "%s: %s", path, ar_strerror(rc));
		goto out;
	}
	if (strcmp(model, costmodel_model(job->cm)->name) || first != sh->first ||
	    last != sh->last || u0 != sh->u0 || nu != sh->nu ||
	    floats != (json_int_t)sh->state_floats) {
		rc = ar_seterr(-AR_EINVAL, "%s: holds %s layers %d-%d, units %d-%d; this rank's place in the plan is %s layers %d-%d, units %d-%d: resume with the plan of the checkpoint",
			       path, model, first, last, u0, u0 + nu - 1,
			       costmodel_model(job->cm)->name, sh->first,
			       sh->last, sh->u0, sh->u0 + sh->nu - 1);
		goto out;
	}
	rc = read_all(fd, sh->state, sh->state_floats * sizeof(float));
	if (rc < 0) {
		rc = ar_seterr(rc, "%s: short file", path);
		goto out;
	}
	*stepp = step;
out:
	json_decref(j);
	free(index);
	close(fd);
	return rc;
}

int gpt_ckpt_drop(const struct gpt_trainer *tr, const char *dir)
{
	char path[4096];
	int rc;

	if (tr->shard.state)
		return 0;
	if ((rc = ckpt_path(path, sizeof(path), tr->job, dir, false)) < 0)
		return rc;
	if (unlink(path) < 0 && errno != ENOENT)
		return ar_seterr(-errno, "%s: %s", path, strerror(errno));
	return 0;
}

/*
 * DIR/generation: the plan generation the checkpoint's files are in, the
 * step and the change that moved them there (gpt.h), written by rank 0
 * after every rank wrote its file.
 */
int gpt_ckpt_mark(const char *dir, unsigned gen, long step, const char *op)
{
	char path[4096], text[96];
	int n = snprintf(text, sizeof(text), "%u\nstep %ld\n%s%.16s%s", gen,
			 step, op ? "op " : "", op ? op : "", op ? "\n" : "");

	snprintf(path, sizeof(path), "%s/generation", dir);
	if (ar_file_write_atomic(path, text, (size_t)n, 0644) < 0)
		return ar_seterr(-AR_EINVAL, "%s: %s", path, ar_errmsg());
	return 0;
}

int gpt_ckpt_marked(const char *dir, unsigned *genp, long *stepp)
{
	char path[4096];
	unsigned gen;
	long step;
	FILE *f;
	int rc = 0;

	*genp = 0;
	*stepp = 0;
	snprintf(path, sizeof(path), "%s/generation", dir);
	f = fopen(path, "r");
	if (!f)
		return errno == ENOENT ? 0 : ar_seterr(-errno, "%s: %s", path, strerror(errno));
	if (fscanf(f, "%u", &gen) != 1 || !gen) {
		rc = ar_seterr(-AR_EINVAL, "%s: expected a plan generation", path);
	} else {
		*genp = gen;
		if (fscanf(f, " step %ld", &step) == 1 && step >= 0)
			*stepp = step;
	}
	fclose(f);
	return rc;
}
