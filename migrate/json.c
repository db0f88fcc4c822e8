/*
 * json.c - the migration as JSON (docs/migrate.md): plannerd's replan
 * answer and the file `arachne-migrate --migration` reads.  Shards and
 * tuples are arrays of integers to keep 512-GPU migrations small.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define AR_INTERNAL
#include "migrate_private.h"

#define MIGRATE_JSON_VERSION	1

static json_t *shards_to_json(const struct migrate_shard *sh, int n)
{
	json_t *a = json_array();

	for (int i = 0; a && i < n; i++) {
		if (json_array_append_new(a, json_pack("[i,i,I,I]",
				sh[i].layer, sh[i].tensor,
				(json_int_t)sh[i].lo, (json_int_t)sh[i].hi))) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

json_t *migrate_to_json(const struct migrate *m)
{
	const struct migrate_stats *st = &m->stats;
	json_t *root, *nodes, *layers, *ranks, *tuples;

	root = json_pack("{s:i}", "arachne_migration", MIGRATE_JSON_VERSION);
	nodes = json_array();
	layers = json_array();
	ranks = json_array();
	tuples = json_array();
	if (!root || !nodes || !layers || !ranks || !tuples)
		goto err;
	json_object_set_new(root, "nodes", nodes);
	json_object_set_new(root, "layers", layers);
	json_object_set_new(root, "ranks", ranks);
	json_object_set_new(root, "tuples", tuples);

	for (int n = 0; n < m->topo->nnodes; n++) {
		const struct migrate_node *nd = &m->topo->nodes[n];

		if (json_array_append_new(nodes, json_pack(
				"{s:s,s:i,s:f,s:f}", "name", nd->name,
				"gpus", nd->gpus, "intra_GBps", nd->intra_GBps,
				"nic_GBps", nd->nic_GBps)))
			goto err;
	}
	for (int l = 0; l < m->layout->nlayers; l++) {
		const struct migrate_layer *ly = &m->layout->layers[l];
		json_t *b = json_array();

		for (int t = 0; b && t < MIGRATE_NUM_TENSORS; t++)
			if (json_array_append_new(b,
					json_integer((json_int_t)ly->bytes[t])))
				goto err;
		if (json_array_append_new(layers, json_pack("{s:o,s:i}",
				"bytes", b, "experts", ly->experts)))
			goto err;
	}
	for (int r = 0; r < m->nranks; r++) {
		const struct migrate_rank *rk = &m->ranks[r];

		if (json_array_append_new(ranks, json_pack(
				"{s:i,s:i,s:i,s:i,s:o,s:o}", "node", rk->node,
				"gpu", rk->gpu, "old_pipe", rk->old_pipe,
				"new_pipe", rk->new_pipe,
				"old", shards_to_json(m->old_shards[r], m->n_old[r]),
				"new", shards_to_json(m->new_shards[r], m->n_new[r]))))
			goto err;
	}
	for (long i = 0; i < m->ntuples; i++) {
		const struct migrate_tuple *t = &m->tuples[i];
		json_t *a = json_pack("[i,i,I,I,i,i,i]", t->layer, t->tensor,
				      (json_int_t)t->lo, (json_int_t)t->hi,
				      t->from, t->to, t->round);

		/* Blocks after the first: how many, and how far apart. */
		if (a && t->count > 1 &&
		    (json_array_append_new(a, json_integer(t->count)) ||
		     json_array_append_new(a,
				json_integer((json_int_t)t->stride)))) {
			json_decref(a);
			goto err;
		}
		if (json_array_append_new(tuples, a))
			goto err;
	}
	if (json_object_set_new(root, "predicted", json_pack(
			"{s:I,s:I,s:I,s:I,s:i,s:f,s:f,s:f,s:f}",
			"bytes_moved", (json_int_t)st->bytes_moved,
			"bytes_min", (json_int_t)st->bytes_min,
			"bytes_local", (json_int_t)st->bytes_local,
			"transfers", (json_int_t)st->ntuples,
			"rounds", st->nrounds, "stage1_s", st->stage1_s,
			"stage2_s", st->stage2_s, "time_s", st->time_s,
			"lower_bound_s", st->lower_bound_s)))
		goto err;
	return root;

err:
	json_decref(root);
	errno = ENOMEM;
	return NULL;
}

/*
 * Bounds of a migration file's numbers (docs/limits.md), checked on the
 * 64-bit value before it is narrowed: a tensor holds at most 2^50 bytes,
 * a migration at most MIGRATE_MAX_BLOCKS blocks, so that every offset
 * and block product below stays far from overflow and a small file
 * cannot ask for unbounded work.
 */
#define MIGRATE_MAX_BYTES	(INT64_C(1) << 50)
#define MIGRATE_MAX_BLOCKS	(INT64_C(1) << 22)
#define MIGRATE_MAX_NODE_GPUS	16
#define MIGRATE_MAX_EXPERTS	4096
#define MIGRATE_MAX_GBPS	1e6	/* GB/s of a link, far above any */
#define MIGRATE_MAX_LAYERS	(1 << 16)

/* An integer member @key of @obj in [@min, @max], or -AR_EINVAL naming it. */
static int get_int(const json_t *obj, const char *key, const char *what,
		   int64_t min, int64_t max, int64_t *out)
{
	char name[96];

	snprintf(name, sizeof(name), "migration: %s", what);
	return ar_json_int64(obj, key, name, min, max, true, out);
}

static int get_num(const json_t *obj, const char *key, const char *what,
		   double *out)
{
	const json_t *v = json_object_get(obj, key);

	if (!json_is_number(v) || !(json_number_value(v) > 0.0) ||
	    json_number_value(v) > MIGRATE_MAX_GBPS)
		return ar_seterr(-AR_EINVAL,
				 "migration: %s: \"%s\" must be a positive number up to %g",
				 what, key, MIGRATE_MAX_GBPS);
	*out = json_number_value(v);
	return 0;
}

/* An array of @n integers, element i (called @names[i]) in [0, @max[i]]. */
static int get_ints(const json_t *a, size_t n, const char *const *names,
		    const int64_t *max, int64_t *out, const char *what)
{
	if (!json_is_array(a) || json_array_size(a) != n)
		return ar_seterr(-AR_EINVAL,
				 "migration: %s must be an array of %zu integers",
				 what, n);
	for (size_t i = 0; i < n; i++) {
		char name[128];
		int rc;

		snprintf(name, sizeof(name), "migration: %s: %s (element %zu)",
			 what, names[i], i);
		rc = ar_json_int64_value(json_array_get(a, i), name, 0, max[i],
					 &out[i]);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static const char *const shard_fields[] = { "layer", "tensor", "lo", "hi" };
static const char *const tuple_fields[] = {
	"layer", "tensor", "lo", "hi", "from", "to", "round", "count", "stride",
};
static const char *const tensor_fields[MIGRATE_NUM_TENSORS] = {
	[0 ... MIGRATE_NUM_TENSORS - 1] = "tensor bytes",
};

static int shards_from_json(const struct migrate *m, const json_t *a,
			    const char *what, struct migrate_shard **shp,
			    int *np)
{
	struct migrate_shard *sh;
	size_t n = json_array_size(a);
	char where[96];
	int rc;

	if (!json_is_array(a))
		return ar_seterr(-AR_EINVAL, "migration: %s must be an array",
				 what);
	sh = calloc(n + 1, sizeof(*sh));
	if (!sh)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const int64_t max[4] = {
			m->layout->nlayers - 1, MIGRATE_NUM_TENSORS - 1,
			MIGRATE_MAX_BYTES, MIGRATE_MAX_BYTES,
		};
		int64_t v[4];
		const struct migrate_layer *ly;

		snprintf(where, sizeof(where), "%s shard %zu", what, i);
		rc = get_ints(json_array_get(a, i), 4, shard_fields, max, v, where);
		if (rc < 0)
			goto err;
		ly = &m->layout->layers[v[0]];
		if (v[2] >= v[3] || (uint64_t)v[3] > ly->bytes[v[1]]) {
			rc = ar_seterr(-AR_EINVAL,
				       "migration: %s has range [%lld, %lld) outside the tensor's %llu bytes",
				       where, (long long)v[2], (long long)v[3],
				       (unsigned long long)ly->bytes[v[1]]);
			goto err;
		}
		sh[i] = (struct migrate_shard){
			.layer = (int32_t)v[0], .tensor = (int32_t)v[1],
			.lo = (uint64_t)v[2], .hi = (uint64_t)v[3],
		};
	}
	migrate_shards_place(sh, (int)n);
	*shp = sh;
	*np = (int)n;
	return 0;
err:
	free(sh);
	return rc;
}

static const char *const root_keys[] = {
	"arachne_migration", "nodes", "layers", "ranks", "tuples",
	"predicted", NULL
};
static const char *const node_keys[] = {
	"name", "gpus", "intra_GBps", "nic_GBps", NULL
};
static const char *const rank_keys[] = {
	"node", "gpu", "old_pipe", "new_pipe", "old", "new", NULL
};

static int topo_layout_from_json(struct migrate *m, const json_t *root)
{
	const json_t *nodes = json_object_get(root, "nodes");
	const json_t *layers = json_object_get(root, "layers");
	char what[64];
	int rc;

	if (!json_is_array(nodes) || !json_array_size(nodes) ||
	    !json_is_array(layers) || !json_array_size(layers))
		return ar_seterr(-AR_EINVAL,
				 "migration: \"nodes\" and \"layers\" must be non-empty arrays");
	if (json_array_size(nodes) > AR_LIMIT_HOSTS ||
	    json_array_size(layers) > MIGRATE_MAX_LAYERS)
		return ar_seterr(-AR_EINVAL,
				 "migration: more than %d nodes or %d layers",
				 AR_LIMIT_HOSTS, MIGRATE_MAX_LAYERS);
	m->topo = migrate_topo_create((int)json_array_size(nodes));
	m->layout = migrate_layout_create((int)json_array_size(layers));
	if (!m->topo || !m->layout)
		return -ENOMEM;

	for (int n = 0; n < m->topo->nnodes; n++) {
		const json_t *o = json_array_get(nodes, n);
		struct migrate_node *nd = &m->topo->nodes[n];
		const char *name;
		int64_t gpus;

		snprintf(what, sizeof(what), "node %d", n);
		rc = ar_json_check_keys(o, node_keys, what);
		if (rc < 0)
			return rc;
		name = json_string_value(json_object_get(o, "name"));
		if (!name || !*name || strlen(name) >= sizeof(nd->name) ||
		    strchr(name, '/'))
			return ar_seterr(-AR_EINVAL,
					 "migration: %s: \"name\" must be a hostname",
					 what);
		snprintf(nd->name, sizeof(nd->name), "%s", name);
		rc = get_int(o, "gpus", what, 1, MIGRATE_MAX_NODE_GPUS, &gpus);
		if (!rc)
			rc = get_num(o, "intra_GBps", what, &nd->intra_GBps);
		if (!rc)
			rc = get_num(o, "nic_GBps", what, &nd->nic_GBps);
		if (rc < 0)
			return rc;
		nd->gpus = (int)gpus;
	}
	for (int l = 0; l < m->layout->nlayers; l++) {
		const json_t *o = json_array_get(layers, l);
		int64_t b[MIGRATE_NUM_TENSORS], max[MIGRATE_NUM_TENSORS], experts;

		snprintf(what, sizeof(what), "layer %d", l);
		for (int t = 0; t < MIGRATE_NUM_TENSORS; t++)
			max[t] = MIGRATE_MAX_BYTES;
		rc = get_ints(json_object_get(o, "bytes"), MIGRATE_NUM_TENSORS,
			      tensor_fields, max, b, what);
		if (!rc)
			rc = get_int(o, "experts", what, 0, MIGRATE_MAX_EXPERTS,
				     &experts);
		if (rc < 0)
			return rc;
		for (int t = 0; t < MIGRATE_NUM_TENSORS; t++)
			m->layout->layers[l].bytes[t] = (uint64_t)b[t];
		m->layout->layers[l].experts = (int)experts;
	}
	return 0;
}

/*
 * Where block @k of @t lies in the buffer of shards @sh[0..n), or 0 when
 * none holds it (migrate_check() then names the tuple).
 */
static uint64_t block_offset(const struct migrate_shard *sh, int n,
			     const struct migrate_tuple *t, uint64_t k)
{
	uint64_t lo = t->lo + k * t->stride;
	const struct migrate_shard *s;

	s = migrate_shard_find(sh, n, t->layer, t->tensor, lo,
			       lo + (t->hi - t->lo));
	return s ? s->offset + (lo - s->lo) : 0;
}

int migrate_from_json(const json_t *root, struct migrate **mp)
{
	const json_t *ranks, *tuples;
	struct migrate *m;
	char what[64];
	int64_t v, nblocks = 0;
	int rc;

	*mp = NULL;
	if (!json_is_object(root))
		return ar_seterr(-AR_EINVAL, "migration: not a JSON object");
	rc = ar_json_check_keys(root, root_keys, "migration");
	if (rc < 0)
		return rc;
	if (get_int(root, "arachne_migration", "version", 1, INT32_MAX, &v) < 0 ||
	    v != MIGRATE_JSON_VERSION)
		return ar_seterr(-AR_EINVAL,
				 "migration: \"arachne_migration\" must be %d",
				 MIGRATE_JSON_VERSION);
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	rc = topo_layout_from_json(m, root);
	if (rc < 0)
		goto err;

	ranks = json_object_get(root, "ranks");
	if (!json_is_array(ranks)) {
		rc = ar_seterr(-AR_EINVAL, "migration: \"ranks\" must be an array");
		goto err;
	}
	if (json_array_size(ranks) > (size_t)AR_LIMIT_HOSTS * MIGRATE_MAX_NODE_GPUS) {
		rc = ar_seterr(-AR_EINVAL, "migration: more ranks than GPUs in %d nodes",
			       AR_LIMIT_HOSTS);
		goto err;
	}
	m->nranks = (int)json_array_size(ranks);
	m->ranks = calloc(m->nranks + 1, sizeof(*m->ranks));
	m->old_shards = calloc(m->nranks + 1, sizeof(*m->old_shards));
	m->new_shards = calloc(m->nranks + 1, sizeof(*m->new_shards));
	m->n_old = calloc(m->nranks + 1, sizeof(*m->n_old));
	m->n_new = calloc(m->nranks + 1, sizeof(*m->n_new));
	if (!m->ranks || !m->old_shards || !m->new_shards || !m->n_old ||
	    !m->n_new) {
		rc = -ENOMEM;
		goto err;
	}
	for (int r = 0; r < m->nranks; r++) {
		const json_t *o = json_array_get(ranks, r);
		struct migrate_rank *rk = &m->ranks[r];
		int64_t node, gpu, op, np;

		snprintf(what, sizeof(what), "rank %d", r);
		rc = ar_json_check_keys(o, rank_keys, what);
		if (!rc)
			rc = get_int(o, "node", what, 0, m->topo->nnodes - 1, &node);
		if (!rc)
			rc = get_int(o, "gpu", what, 0, MIGRATE_MAX_NODE_GPUS - 1, &gpu);
		if (!rc)
			rc = get_int(o, "old_pipe", what, -1, m->nranks, &op);
		if (!rc)
			rc = get_int(o, "new_pipe", what, -1, m->nranks, &np);
		if (rc < 0)
			goto err;
		if (gpu >= m->topo->nodes[node].gpus) {
			rc = ar_seterr(-AR_EINVAL,
				       "migration: %s is on GPU %lld of node %lld, which does not exist",
				       what, (long long)gpu, (long long)node);
			goto err;
		}
		*rk = (struct migrate_rank){
			.node = (int)node, .gpu = (int)gpu,
			.old_pipe = (int)op, .new_pipe = (int)np,
		};
		if (r && (rk[-1].node > rk->node ||
			  (rk[-1].node == rk->node && rk[-1].gpu >= rk->gpu))) {
			rc = ar_seterr(-AR_EINVAL,
				       "migration: ranks must be sorted by (node, gpu) and unique (%s)",
				       what);
			goto err;
		}
		snprintf(what, sizeof(what), "rank %d \"old\"", r);
		rc = shards_from_json(m, json_object_get(o, "old"), what,
				      &m->old_shards[r], &m->n_old[r]);
		if (rc < 0)
			goto err;
		snprintf(what, sizeof(what), "rank %d \"new\"", r);
		rc = shards_from_json(m, json_object_get(o, "new"), what,
				      &m->new_shards[r], &m->n_new[r]);
		if (rc < 0)
			goto err;
	}

	tuples = json_object_get(root, "tuples");
	if (!json_is_array(tuples)) {
		rc = ar_seterr(-AR_EINVAL, "migration: \"tuples\" must be an array");
		goto err;
	}
	if (json_array_size(tuples) > MIGRATE_MAX_BLOCKS) {
		rc = ar_seterr(-AR_EINVAL, "migration: more than %" PRId64 " tuples",
			       MIGRATE_MAX_BLOCKS);
		goto err;
	}
	m->ntuples = (long)json_array_size(tuples);
	m->tuples = calloc(m->ntuples + 1, sizeof(*m->tuples));
	if (!m->tuples) {
		rc = -ENOMEM;
		goto err;
	}
	for (long i = 0; i < m->ntuples; i++) {
		struct migrate_tuple *t = &m->tuples[i];
		const json_t *a = json_array_get(tuples, i);
		/* [layer, tensor, lo, hi, from, to, round, count, stride];
		 * rounds are numbered without gaps, so a round number is at
		 * most the tuples before it: the runner steps through them. */
		const int64_t max[9] = {
			m->layout->nlayers - 1, MIGRATE_NUM_TENSORS - 1,
			MIGRATE_MAX_BYTES, MIGRATE_MAX_BYTES, m->nranks - 1,
			m->nranks - 1, i ? m->tuples[i - 1].round + 1 : 1,
			MIGRATE_MAX_BLOCKS, MIGRATE_MAX_BYTES,
		};
		int64_t x[9] = { [7] = 1 };

		snprintf(what, sizeof(what), "tuple %ld", i);
		rc = get_ints(a, json_array_size(a) == 9 ? 9 : 7, tuple_fields,
			      max, x, what);
		if (rc < 0)
			goto err;
		if (x[7] < 1 || (nblocks += x[7]) > MIGRATE_MAX_BLOCKS) {
			rc = ar_seterr(-AR_EINVAL,
				       "migration: %s: a tuple moves at least one block, a migration at most %" PRId64,
				       what, MIGRATE_MAX_BLOCKS);
			goto err;
		}
		*t = (struct migrate_tuple){
			.layer = (int32_t)x[0], .tensor = (int32_t)x[1],
			.lo = (uint64_t)x[2], .hi = (uint64_t)x[3],
			.from = (int32_t)x[4], .to = (int32_t)x[5],
			.round = (int32_t)x[6], .count = (int32_t)x[7],
			.stride = x[7] > 1 ? (uint64_t)x[8] : 0,
		};
		/* The shards place the blocks; migrate_check() holds them. */
		t->src_offset = block_offset(m->old_shards[t->from],
					     m->n_old[t->from], t, 0);
		t->dst_offset = block_offset(m->new_shards[t->to],
					     m->n_new[t->to], t, 0);
		if (t->count > 1) {
			t->src_stride = block_offset(m->old_shards[t->from],
						     m->n_old[t->from], t, 1) -
					t->src_offset;
			t->dst_stride = block_offset(m->new_shards[t->to],
						     m->n_new[t->to], t, 1) -
					t->dst_offset;
		}
		if (t->round > m->stats.nrounds)
			m->stats.nrounds = t->round;
	}
	/* The file may come from anywhere: hold it to every invariant. */
	rc = migrate_check(m);
	if (rc < 0) {
		char msg[512];

		snprintf(msg, sizeof(msg), "%s", ar_errmsg());
		rc = ar_seterr(rc, "migration: %s", msg);
		goto err;
	}
	migrate_predict(m);
	/* Every new byte has one source, so the bytes moved are the minimum. */
	m->stats.bytes_min = m->stats.bytes_moved;
	for (long i = 0; i < m->ntuples; i++) {
		const struct migrate_tuple *t = &m->tuples[i];

		if (t->from == t->to)
			m->stats.bytes_local += migrate_tuple_bytes(t);
	}
	*mp = m;
	return 0;
err:
	migrate_free(m);
	return rc;
}
