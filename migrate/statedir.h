/*
 * statedir.h - per-rank shard files of arachne-migrate (docs/migrate.md):
 * DIR/rank-NODE-GPU.bin holds one GPU's shards back to back after a small
 * header and a JSON index of (layer, tensor, lo, hi) ranges.
 */
#ifndef AR_MIGRATE_STATEDIR_H
#define AR_MIGRATE_STATEDIR_H

#include <stddef.h>

#include "migrate.h"

#define STATEDIR_MAGIC	"ARSHARD1"

/* The file of (@node, @gpu) in @dir; @staged: its hidden temporary name. */
int statedir_path(char *buf, size_t size, const char *dir, const char *node,
		  int gpu, bool staged);

/*
 * statedir_load() - read rank @rank's old shards into a new buffer of
 * migrate_rank_old_bytes() bytes (caller frees *@bufp with free()).  The
 * file's index must list exactly the migration's old shards of the rank.
 * A rank without old shards gets an empty buffer and needs no file.
 */
int statedir_load(const char *dir, const struct migrate *m, int rank,
		  void **bufp);

/*
 * statedir_write() - write @shards[0..@n) with their bytes @buf as the
 * file @path (fsync'ed; not renamed).
 */
int statedir_write(const char *path, const char *node, int gpu,
		   const struct migrate_shard *shards, int n, const void *buf);

/* Read any shard file: its shards (caller frees) and data (caller frees). */
int statedir_read(const char *path, struct migrate_shard **shardsp, int *np,
		  void **bufp, size_t *lenp);

/*
 * Two-phase commit of rank @rank's new state: _stage() writes the hidden
 * temporary file, _commit() renames it over the rank's file (or removes
 * the old file of a rank that holds nothing new), _unstage() removes the
 * temporary after a failure.
 */
int statedir_stage(const char *dir, const struct migrate *m, int rank,
		   const void *buf);
int statedir_commit(const char *dir, const struct migrate *m, int rank);
void statedir_unstage(const char *dir, const struct migrate *m, int rank);

#endif /* AR_MIGRATE_STATEDIR_H */
