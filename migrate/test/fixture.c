/*
 * fixture.c - migrate-fixture, the system tests' helper:
 *   migrate-fixture migration SCENARIO OUT.json [SCALE]
 *       the migration of a hand-built scenario, cut into small rounds;
 *   migrate-fixture init MIGRATION.json DIR
 *       old shard files whose every byte is a function of where it lies;
 *   migrate-fixture verify MIGRATION.json DIR
 *       every new shard file holds exactly the new plan's shards with the
 *       right bytes (a checksum per shard is printed), GPUs that left hold
 *       no file, and no staged file is left behind.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ar.h"
#include "scenario.h"
#include "statedir.h"

static int cmd_migration(const char *name, const char *out, uint64_t scale)
{
	/* Many small rounds, so a few KB already exercise stage 2. */
	const struct migrate_opts opts = {
		.round_s = 1e-9, .min_chunk_bytes = 2048 * scale,
	};
	struct scenario sc;
	struct migrate *m = NULL;
	json_t *j;
	int rc;

	rc = scenario_build(name, &sc);
	if (rc < 0) {
		fprintf(stderr, "migrate-fixture: %s\n", ar_errmsg());
		return 2;
	}
	for (int l = 0; l < sc.layout->nlayers; l++)
		for (int t = 0; t < MIGRATE_NUM_TENSORS; t++)
			sc.layout->layers[l].bytes[t] *= scale;
	rc = migrate_diff(sc.layout, sc.topo, sc.old_plan, sc.new_plan, &opts,
			  &m);
	if (rc == 0)
		rc = migrate_check(m);
	if (rc < 0) {
		fprintf(stderr, "migrate-fixture: %s: %s\n", name, ar_errmsg());
		scenario_fini(&sc);
		migrate_free(m);
		return 1;
	}
	j = migrate_to_json(m);
	rc = json_dump_file(j, out, JSON_COMPACT);
	printf("%d\n", m->nranks);
	json_decref(j);
	migrate_free(m);
	scenario_fini(&sc);
	return rc ? 1 : 0;
}

static struct migrate *load(const char *path)
{
	json_t *root = ar_json_load_file(path);
	struct migrate *m = NULL;

	if (!root || migrate_from_json(root, &m) < 0)
		fprintf(stderr, "migrate-fixture: %s: %s\n", path, ar_errmsg());
	json_decref(root);
	return m;
}

static void fill(const struct migrate_shard *sh, int n, unsigned char *buf)
{
	for (int i = 0; i < n; i++)
		for (uint64_t x = sh[i].lo; x < sh[i].hi; x++)
			buf[sh[i].offset + (x - sh[i].lo)] =
				scenario_byte(sh[i].layer, sh[i].tensor, x);
}

static int cmd_init(const char *mpath, const char *dir)
{
	struct migrate *m = load(mpath);
	char path[4096];
	int rc = 0;

	if (!m)
		return 2;
	for (int r = 0; r < m->nranks && !rc; r++) {
		const struct migrate_rank *rk = &m->ranks[r];
		unsigned char *buf;

		if (!m->n_old[r])
			continue;
		buf = malloc(migrate_rank_old_bytes(m, r) + 1);
		if (!buf)
			return 1;
		fill(m->old_shards[r], m->n_old[r], buf);
		rc = statedir_path(path, sizeof(path), dir,
				   m->topo->nodes[rk->node].name, rk->gpu,
				   false);
		if (!rc)
			rc = statedir_write(path, m->topo->nodes[rk->node].name,
					    rk->gpu, m->old_shards[r],
					    m->n_old[r], buf);
		free(buf);
	}
	if (rc < 0)
		fprintf(stderr, "migrate-fixture: %s\n", ar_errmsg());
	migrate_free(m);
	return rc < 0 ? 1 : 0;
}

/* FNV-1a over one shard's bytes. */
static uint64_t checksum(const unsigned char *p, uint64_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (uint64_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

static int verify_rank(const struct migrate *m, int r, const char *dir)
{
	const struct migrate_rank *rk = &m->ranks[r];
	const char *node = m->topo->nodes[rk->node].name;
	struct migrate_shard *sh = NULL;
	unsigned char *buf = NULL, *want = NULL;
	char path[4096];
	size_t len;
	int n, bad = 0;

	statedir_path(path, sizeof(path), dir, node, rk->gpu, true);
	if (access(path, F_OK) == 0) {
		printf("rank %d: staged file %s left behind\n", r, path);
		bad = 1;
	}
	statedir_path(path, sizeof(path), dir, node, rk->gpu, false);
	if (!m->n_new[r]) {
		if (access(path, F_OK) == 0) {
			printf("rank %d: %s should be gone, the GPU left the plan\n",
			       r, path);
			return 1;
		}
		return bad;
	}
	if (statedir_read(path, &sh, &n, (void **)&buf, &len) < 0) {
		printf("rank %d: %s\n", r, ar_errmsg());
		return 1;
	}
	want = malloc(migrate_rank_new_bytes(m, r) + 1);
	if (!want || n != m->n_new[r] || len != migrate_rank_new_bytes(m, r)) {
		printf("rank %d: %s holds %d shards / %zu bytes, expected %d / %llu\n",
		       r, path, n, len, m->n_new[r],
		       (unsigned long long)migrate_rank_new_bytes(m, r));
		bad = 1;
		goto out;
	}
	fill(m->new_shards[r], m->n_new[r], want);
	for (int i = 0; i < n; i++) {
		const struct migrate_shard *s = &m->new_shards[r][i];
		uint64_t got = checksum(buf + s->offset, s->hi - s->lo);
		uint64_t exp = checksum(want + s->offset, s->hi - s->lo);
		bool same = sh[i].layer == s->layer &&
			    sh[i].tensor == s->tensor && sh[i].lo == s->lo &&
			    sh[i].hi == s->hi && got == exp;

		printf("rank %d %s:%d layer %d tensor %d [%llu,%llu) %016llx %s\n",
		       r, node, rk->gpu, s->layer, s->tensor,
		       (unsigned long long)s->lo, (unsigned long long)s->hi,
		       (unsigned long long)got, same ? "ok" : "MISMATCH");
		bad |= !same;
	}
out:
	free(sh);
	free(buf);
	free(want);
	return bad;
}

static int cmd_verify(const char *mpath, const char *dir)
{
	struct migrate *m = load(mpath);
	int bad = 0;

	if (!m)
		return 2;
	for (int r = 0; r < m->nranks; r++)
		bad |= verify_rank(m, r, dir);
	migrate_free(m);
	return bad;
}

int main(int argc, char **argv)
{
	if (argc >= 4 && !strcmp(argv[1], "migration"))
		return cmd_migration(argv[2], argv[3], argc > 4 ?
				     strtoull(argv[4], NULL, 10) : 1);
	if (argc == 4 && !strcmp(argv[1], "init"))
		return cmd_init(argv[2], argv[3]);
	if (argc == 4 && !strcmp(argv[1], "verify"))
		return cmd_verify(argv[2], argv[3]);
	fprintf(stderr, "usage: migrate-fixture migration SCENARIO OUT.json [SCALE] | init M.json DIR | verify M.json DIR\n");
	return 2;
}
