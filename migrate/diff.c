/*
 * diff.c - the plan diff: which bytes of which shard every GPU holds before
 * and after, and for each byte of the new state the old holder that sends
 * it (§5.6, "migration tuples").
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define AR_INTERNAL
#include "migrate_private.h"

/* Sender choice balances load in pieces of at most this many bytes. */
#define BALANCE_GRANULE	(64ull << 20)

/* One GPU's place in one plan. */
struct role {
	int node;
	int gpu;
	int pipe;			/* global pipeline index */
	const struct costmodel_stage *stage;
	int tp_rank;
	int replica;
	int replicas;
	/*
	 * Its place in the stage's expert layout: the stage's GPUs are
	 * numbered replica-major (w = replica * tp + tp_rank); ETP varies
	 * fastest, then EP, then EDP.
	 */
	int ep_rank, etp_rank;
};

/* A growable array of shards. */
struct shard_vec {
	struct migrate_shard *v;
	int n;
	size_t cap;
};

static int shard_push(struct shard_vec *sv, int layer, int tensor,
		      uint64_t lo, uint64_t hi)
{
	struct migrate_shard *last = sv->n ? &sv->v[sv->n - 1] : NULL;

	if (lo >= hi)
		return 0;
	/* Neighbouring experts held whole form one range. */
	if (last && last->layer == layer && last->tensor == tensor &&
	    last->hi == lo) {
		last->hi = hi;
		return 0;
	}
	if (AR_GROW(sv->v, sv->cap, sv->n + 1, 16) < 0)
		return -ENOMEM;
	sv->v[sv->n++] = (struct migrate_shard){
		.layer = layer, .tensor = tensor, .lo = lo, .hi = hi,
	};
	return 0;
}

void migrate_shards_place(struct migrate_shard *sh, int n)
{
	uint64_t off = 0;

	for (int i = 0; i < n; i++) {
		sh[i].offset = off;
		off += sh[i].hi - sh[i].lo;
	}
}

/* The expert layout of @st, with unset fields meaning "not tiled". */
static int expert_layout(const struct costmodel_stage *st, int replicas,
			 int *ep, int *etp)
{
	int width = st->tp * replicas;

	*ep = st->ep > 0 ? st->ep : 1;
	*etp = st->etp > 0 ? st->etp : 1;
	if (width % (*ep * *etp))
		return ar_seterr(-AR_EINVAL,
				 "migrate: expert layout EP %d x ETP %d does not divide the stage's %d GPUs",
				 *ep, *etp, width);
	return 0;
}

/*
 * The shards @r holds: for each of its layers, the TP slice of every dense
 * tensor and, in MoE layers, its EP group's experts, each cut to its ETP
 * slice.  They come in (layer, tensor, lo) order, the order of a rank's
 * shard list.
 */
static int role_shards(const struct migrate_layout *layout,
		       const struct role *r, struct shard_vec *sv)
{
	const struct costmodel_stage *st = r->stage;
	int rc;

	if (st->first_layer < 0 || st->last_layer >= layout->nlayers ||
	    st->first_layer > st->last_layer)
		return ar_seterr(-AR_EINVAL,
				 "migrate: stage layers [%d, %d] outside the model's %d layers",
				 st->first_layer, st->last_layer,
				 layout->nlayers);

	for (int l = st->first_layer; l <= st->last_layer; l++) {
		const struct migrate_layer *ly = &layout->layers[l];

		for (int k = 0; k < MIGRATE_NUM_KINDS; k++) {
			int t = MIGRATE_PART_DENSE * MIGRATE_NUM_KINDS + k;
			uint64_t b = ly->bytes[t];

			uint64_t lo = migrate_split(b, r->tp_rank, st->tp);
			uint64_t hi = migrate_split(b, r->tp_rank + 1, st->tp);

			rc = shard_push(sv, l, t, lo, hi);
			if (rc < 0)
				return rc;
		}
		if (ly->experts <= 0)
			continue;

		int ep, etp;

		rc = expert_layout(st, r->replicas, &ep, &etp);
		if (rc < 0)
			return rc;
		if (ly->experts % ep)
			return ar_seterr(-AR_EINVAL,
					 "migrate: EP %d does not divide layer %d's %d experts",
					 ep, l, ly->experts);

		int etp_rank = r->etp_rank;
		int e0 = ly->experts / ep * r->ep_rank;
		int e1 = e0 + ly->experts / ep;

		for (int k = 0; k < MIGRATE_NUM_KINDS; k++) {
			int t = MIGRATE_PART_EXPERT * MIGRATE_NUM_KINDS + k;
			uint64_t b = ly->bytes[t];

			for (int e = e0; e < e1; e++) {
				uint64_t xlo = migrate_split(b, e, ly->experts);
				uint64_t x = migrate_split(b, e + 1,
							   ly->experts) - xlo;

				uint64_t lo = migrate_split(x, etp_rank, etp);
				uint64_t hi = migrate_split(x, etp_rank + 1,
							    etp);

				rc = shard_push(sv, l, t, xlo + lo, xlo + hi);
				if (rc < 0)
					return rc;
			}
		}
	}
	return 0;
}

/* Every GPU's role in @plan; NULL plan means none. */
static int plan_roles(const struct migrate_topo *topo,
		      const struct costmodel_plan *plan, struct role **rolesp,
		      int *np)
{
	struct role *roles = NULL;
	int n = 0, pipe = 0;
	size_t cap = 0;

	*rolesp = NULL;
	*np = 0;
	if (!plan)
		return 0;

	for (int t = 0; t < plan->ntemplates; t++) {
		const struct costmodel_template *tm = &plan->templates[t];

		if (tm->nstages <= 0 || tm->nstages > COSTMODEL_MAX_DEPTH ||
		    tm->replicas < 0 || (tm->replicas && !tm->placement)) {
			free(roles);
			return ar_seterr(-AR_EINVAL,
					 "migrate: template %d has no valid stages or placement",
					 t);
		}
		for (int r = 0; r < tm->replicas; r++, pipe++) {
			for (int s = 0; s < tm->nstages; s++) {
				const struct costmodel_stage *st =
					&tm->stages[s];
				const struct costmodel_group *g =
					&tm->placement[r * tm->nstages + s];

				if (st->tp < 1 || st->tp > COSTMODEL_MAX_TP) {
					free(roles);
					return ar_seterr(-AR_EINVAL,
							 "migrate: template %d stage %d has TP %d",
							 t, s, st->tp);
				}
				if (costmodel_stage_dp(st) > 1) {
					free(roles);
					return ar_seterr(-AR_EINVAL,
							 "migrate: template %d stage %d has data parallelism of its own (dp %d); only plans with one TP group a stage and replica can be migrated",
							 t, s, st->dp);
				}
				if (g->node < 0 || g->node >= topo->nnodes) {
					free(roles);
					return ar_seterr(-AR_EINVAL,
							 "migrate: template %d replica %d stage %d is on node %d, outside the cluster",
							 t, r, s, g->node);
				}
				int ep = st->ep > 0 ? st->ep : 1;
				int etp = st->etp > 0 ? st->etp : 1;

				for (int k = 0; k < st->tp; k++) {
					int w = r * st->tp + k;

					if (AR_GROW(roles, cap, n + 1, 64) < 0) {
						free(roles);
						return -ENOMEM;
					}
					roles[n++] = (struct role){
						.node = g->node,
						.gpu = g->gpu[k],
						.pipe = pipe,
						.stage = st,
						.tp_rank = k,
						.replica = r,
						.replicas = tm->replicas,
						.etp_rank = w % etp,
						.ep_rank = w / etp % ep,
					};
				}
			}
		}
	}
	*rolesp = roles;
	*np = n;
	return 0;
}

static int rank_key_cmp(const void *a, const void *b)
{
	const struct migrate_rank *x = a, *y = b;

	if (x->node != y->node)
		return x->node < y->node ? -1 : 1;
	return x->gpu < y->gpu ? -1 : x->gpu > y->gpu;
}

int migrate_rank_find(const struct migrate *m, int node, int gpu)
{
	struct migrate_rank key = { .node = node, .gpu = gpu };
	struct migrate_rank *r = bsearch(&key, m->ranks, m->nranks,
					 sizeof(key), rank_key_cmp);

	return r ? (int)(r - m->ranks) : -1;
}

enum migrate_link migrate_link_of(const struct migrate *m, int a, int b)
{
	if (a == b)
		return MIGRATE_LINK_LOCAL;
	if (m->ranks[a].node == m->ranks[b].node)
		return MIGRATE_LINK_INTRA;
	return MIGRATE_LINK_NET;
}

double migrate_share_Bps(const struct migrate *m, int from, int to)
{
	const struct migrate_node *nf = &m->topo->nodes[m->ranks[from].node];
	const struct migrate_node *nt = &m->topo->nodes[m->ranks[to].node];
	double a, b;

	if (migrate_link_of(m, from, to) == MIGRATE_LINK_INTRA)
		return nf->intra_GBps * 1e9;
	a = nf->nic_GBps * 1e9 / (nf->gpus > 0 ? nf->gpus : 1);
	b = nt->nic_GBps * 1e9 / (nt->gpus > 0 ? nt->gpus : 1);
	return a < b ? a : b;
}

/*
 * Roles whose GPUs hold the same shards (same stage, TP rank and expert
 * place) side by side, by GPU within a kind.
 */
static int role_kind_cmp(const void *a, const void *b)
{
	const struct role *x = *(const struct role *const *)a;
	const struct role *y = *(const struct role *const *)b;
	uintptr_t sx = (uintptr_t)x->stage, sy = (uintptr_t)y->stage;

	if (sx != sy)
		return sx < sy ? -1 : 1;
	if (x->tp_rank != y->tp_rank)
		return x->tp_rank < y->tp_rank ? -1 : 1;
	if (x->ep_rank != y->ep_rank)
		return x->ep_rank < y->ep_rank ? -1 : 1;
	if (x->etp_rank != y->etp_rank)
		return x->etp_rank < y->etp_rank ? -1 : 1;
	if (x->node != y->node)
		return x->node < y->node ? -1 : 1;
	return x->gpu < y->gpu ? -1 : x->gpu > y->gpu;
}

static bool role_same_kind(const struct role *x, const struct role *y)
{
	return x->stage == y->stage && x->tp_rank == y->tp_rank &&
	       x->ep_rank == y->ep_rank && x->etp_rank == y->etp_rank;
}

/* Assigns the ranks of both plans and their shard lists. */
static int build_ranks(struct migrate *m, const struct role *old_roles,
		       int nold, const struct role *new_roles, int nnew)
{
	const struct role **order;
	int n = 0, rc;

	m->ranks = calloc(nold + nnew + 1, sizeof(*m->ranks));
	if (!m->ranks)
		return -ENOMEM;
	for (int i = 0; i < nold; i++)
		m->ranks[n++] = (struct migrate_rank){
			.node = old_roles[i].node, .gpu = old_roles[i].gpu,
		};
	for (int i = 0; i < nnew; i++)
		m->ranks[n++] = (struct migrate_rank){
			.node = new_roles[i].node, .gpu = new_roles[i].gpu,
		};
	qsort(m->ranks, n, sizeof(*m->ranks), rank_key_cmp);
	m->nranks = 0;
	for (int i = 0; i < n; i++) {
		if (m->nranks &&
		    !rank_key_cmp(&m->ranks[m->nranks - 1], &m->ranks[i]))
			continue;
		m->ranks[m->nranks] = m->ranks[i];
		m->ranks[m->nranks].old_pipe = -1;
		m->ranks[m->nranks].new_pipe = -1;
		m->nranks++;
	}
	for (int i = 0; i < m->nranks; i++) {
		const struct migrate_rank *rk = &m->ranks[i];

		if (rk->gpu < 0 || rk->gpu >= m->topo->nodes[rk->node].gpus)
			return ar_seterr(-AR_EINVAL,
					 "migrate: GPU %d of node %s does not exist (it has %d)",
					 rk->gpu, m->topo->nodes[rk->node].name,
					 m->topo->nodes[rk->node].gpus);
	}

	m->old_shards = calloc(m->nranks, sizeof(*m->old_shards));
	m->new_shards = calloc(m->nranks, sizeof(*m->new_shards));
	m->n_old = calloc(m->nranks, sizeof(*m->n_old));
	m->n_new = calloc(m->nranks, sizeof(*m->n_new));
	if (!m->old_shards || !m->new_shards || !m->n_old || !m->n_new)
		return -ENOMEM;

	order = malloc(((size_t)(nold > nnew ? nold : nnew) + 1) *
		       sizeof(*order));
	if (!order)
		return -ENOMEM;
	for (int pass = 0; pass < 2; pass++) {
		const struct role *roles = pass ? new_roles : old_roles;
		struct migrate_shard **shards = pass ? m->new_shards :
						       m->old_shards;
		int *nshards = pass ? m->n_new : m->n_old;
		int nroles = pass ? nnew : nold, prev = -1;

		/*
		 * The GPUs of one kind hold the same shards: a 512-GPU MoE
		 * plan has hundreds of thousands of shards but a few dozen
		 * kinds, so each kind's list is built once and shared.
		 */
		for (int i = 0; i < nroles; i++)
			order[i] = &roles[i];
		qsort(order, nroles, sizeof(*order), role_kind_cmp);
		for (int i = 0; i < nroles; i++) {
			int r = migrate_rank_find(m, order[i]->node,
						  order[i]->gpu);
			struct migrate_rank *rk = &m->ranks[r];
			int *pipe = pass ? &rk->new_pipe : &rk->old_pipe;
			struct shard_vec sv = { 0 };

			if (*pipe >= 0) {
				rc = ar_seterr(-AR_EINVAL,
					       "migrate: GPU %d of node %s is used twice in the %s plan",
					       rk->gpu,
					       m->topo->nodes[rk->node].name,
					       pass ? "new" : "old");
				goto out;
			}
			*pipe = order[i]->pipe;
			if (prev >= 0 && role_same_kind(order[i - 1], order[i])) {
				shards[r] = shards[prev];
				nshards[r] = nshards[prev];
				continue;
			}
			rc = role_shards(m->layout, order[i], &sv);
			if (rc < 0) {
				free(sv.v);
				goto out;
			}
			migrate_shards_place(sv.v, sv.n);
			shards[r] = sv.v;
			nshards[r] = sv.n;
			prev = r;
		}
	}
	rc = 0;
out:
	free(order);
	return rc;
}

/* Old holders of one tensor of one layer. */
struct holder {
	int rank;
	int shard;			/* into m->old_shards[rank] */
	uint64_t lo, hi;
	uint64_t offset;		/* in the holder's old buffer */
};

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * Holders of one range: the replicas (and EDP ranks) that hold the same
 * bytes, ordered by rank, hence by node.  @cursor rotates the network
 * senders so that sender choice looks at a few of them, not all.
 */
struct group {
	uint64_t lo, hi;
	int start, n;			/* into holder_index.v */
	int cursor;
	/* group_on_node()'s last answer: receivers come node by node */
	int memo_node, memo_first, memo_n;
};

/*
 * A stretch of a tensor between two boundaries of old ranges: the bytes
 * of a new shard that one piece can take.  @ncov groups hold all of it.
 */
struct seg {
	uint64_t lo, hi;
	int cov, ncov;			/* into holder_index.cov */
};

struct holder_index {
	struct holder *v;		/* by key, range, rank */
	int *gstart;			/* [nkeys + 1] into g */
	struct group *g;		/* by key, (lo, hi) */
	int *sstart;			/* [nkeys + 1] into seg */
	struct seg *seg;		/* by key, lo; gaps included */
	int *cov;			/* indices into g */
};

/* An old shard of one kind of rank (see holder_index_build()). */
struct range_item {
	uint64_t lo, hi;
	int key;
	int at;				/* its index in the kinds' lists */
};

static int range_item_cmp(const void *a, const void *b)
{
	const struct range_item *x = a, *y = b;

	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	if (x->lo != y->lo)
		return x->lo < y->lo ? -1 : 1;
	return x->hi < y->hi ? -1 : x->hi > y->hi;
}

/* A rank and its old shard list, to sort ranks by list. */
struct rank_list {
	uintptr_t list;
	int rank;
};

static int rank_list_cmp(const void *a, const void *b)
{
	const struct rank_list *x = a, *y = b;

	if (x->list != y->list)
		return x->list < y->list ? -1 : 1;
	return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/*
 * The groups of every key: one per distinct old range, from the kinds of
 * rank (ranks that share a shard list hold the same ranges).  Stores in
 * @gid[kbase[kind] + i] the group of shard i of each kind.
 */
static int index_groups(const struct migrate *m, struct holder_index *hx,
			const int *kind_rank, int nkinds, const int *kbase,
			int *gid)
{
	int nkeys = m->layout->nlayers * MIGRATE_NUM_TENSORS;
	int nitems = kbase[nkinds], ng = 0;
	struct range_item *it = malloc((nitems + 1) * sizeof(*it));

	hx->gstart = calloc(nkeys + 1, sizeof(*hx->gstart));
	hx->g = malloc((nitems + 1) * sizeof(*hx->g));
	if (!it || !hx->gstart || !hx->g) {
		free(it);
		return -ENOMEM;
	}
	for (int j = 0; j < nkinds; j++) {
		const struct migrate_shard *sh = m->old_shards[kind_rank[j]];

		for (int i = 0; i < kbase[j + 1] - kbase[j]; i++)
			it[kbase[j] + i] = (struct range_item){
				.lo = sh[i].lo, .hi = sh[i].hi,
				.key = sh[i].layer * MIGRATE_NUM_TENSORS +
				       sh[i].tensor,
				.at = kbase[j] + i,
			};
	}
	qsort(it, nitems, sizeof(*it), range_item_cmp);
	for (int i = 0; i < nitems; i++) {
		if (!i || range_item_cmp(&it[i - 1], &it[i])) {
			hx->g[ng++] = (struct group){
				.lo = it[i].lo, .hi = it[i].hi,
				.memo_node = -1,
			};
			hx->gstart[it[i].key + 1] = ng;
		}
		gid[it[i].at] = ng - 1;
	}
	/* Keys without old state have no groups: carry the starts over. */
	for (int k = 0; k < nkeys; k++)
		if (hx->gstart[k + 1] < hx->gstart[k])
			hx->gstart[k + 1] = hx->gstart[k];
	free(it);
	return 0;
}

/*
 * The segments of every key: the stretches between the boundaries of its
 * groups (gaps that no group holds included), each with the groups that
 * hold all of it.
 */
static int index_segments(const struct migrate *m, struct holder_index *hx)
{
	int nkeys = m->layout->nlayers * MIGRATE_NUM_TENSORS;
	int ng = hx->gstart[nkeys], nseg = 0, ncov = 0;
	size_t capcov = 0;
	uint64_t *bound = malloc((2 * (size_t)ng + 1) * sizeof(*bound));

	hx->sstart = calloc(nkeys + 1, sizeof(*hx->sstart));
	hx->seg = malloc((2 * (size_t)ng + 1) * sizeof(*hx->seg));
	if (!bound || !hx->sstart || !hx->seg) {
		free(bound);
		return -ENOMEM;
	}
	for (int k = 0; k < nkeys; k++) {
		const struct group *g = &hx->g[hx->gstart[k]];
		int n = hx->gstart[k + 1] - hx->gstart[k], nb = 0;

		for (int i = 0; i < n; i++) {
			bound[nb++] = g[i].lo;
			bound[nb++] = g[i].hi;
		}
		qsort(bound, nb, sizeof(*bound), u64_cmp);
		for (int b = 0; b + 1 < nb; b++) {
			struct seg *sg = &hx->seg[nseg];

			if (bound[b] == bound[b + 1])
				continue;
			*sg = (struct seg){
				.lo = bound[b], .hi = bound[b + 1], .cov = ncov,
			};
			for (int i = 0; i < n; i++) {
				if (g[i].lo > sg->lo || g[i].hi < sg->hi)
					continue;
				if (AR_GROW(hx->cov, capcov, ncov + 1, 1024) < 0) {
					free(bound);
					return -ENOMEM;
				}
				hx->cov[ncov++] = hx->gstart[k] + i;
				sg->ncov++;
			}
			nseg++;
		}
		hx->sstart[k + 1] = nseg;
	}
	free(bound);
	return 0;
}

/*
 * The holder index.  Ranks that share a shard list (one kind: a 512-GPU
 * plan has a few dozen) hold the same ranges, so the ranges are sorted
 * once per kind, and the holders are counted into their groups, in rank
 * order, without comparing them.
 */
static int holder_index_build(const struct migrate *m, struct holder_index *hx)
{
	int nkeys = m->layout->nlayers * MIGRATE_NUM_TENSORS;
	struct rank_list *order = malloc((m->nranks + 1) * sizeof(*order));
	int *kind_of = malloc((m->nranks + 1) * sizeof(*kind_of));
	int *kind_rank = malloc((m->nranks + 1) * sizeof(*kind_rank));
	int *kbase = calloc(m->nranks + 2, sizeof(*kbase));
	int *gid = NULL, *fill = NULL;
	int nkinds = 0, nholders = 0, rc = -ENOMEM;

	if (!order || !kind_of || !kind_rank || !kbase)
		goto out;
	for (int r = 0; r < m->nranks; r++) {
		order[r] = (struct rank_list){
			.list = (uintptr_t)m->old_shards[r], .rank = r,
		};
		nholders += m->n_old[r];
	}
	qsort(order, m->nranks, sizeof(*order), rank_list_cmp);
	for (int i = 0; i < m->nranks; i++) {
		int r = order[i].rank;

		if (!i || order[i].list != order[i - 1].list) {
			kind_rank[nkinds] = r;
			kbase[nkinds + 1] = kbase[nkinds] + m->n_old[r];
			nkinds++;
		}
		kind_of[r] = nkinds - 1;
	}
	gid = malloc((kbase[nkinds] + 1) * sizeof(*gid));
	if (!gid)
		goto out;
	rc = index_groups(m, hx, kind_rank, nkinds, kbase, gid);
	if (rc < 0)
		goto out;

	rc = -ENOMEM;
	fill = malloc((hx->gstart[nkeys] + 1) * sizeof(*fill));
	hx->v = malloc((nholders + 1) * sizeof(*hx->v));
	if (!fill || !hx->v)
		goto out;
	for (int r = 0; r < m->nranks; r++)
		for (int i = 0; i < m->n_old[r]; i++)
			hx->g[gid[kbase[kind_of[r]] + i]].n++;
	for (int g = 0, at = 0; g < hx->gstart[nkeys]; g++) {
		hx->g[g].start = fill[g] = at;
		at += hx->g[g].n;
	}
	for (int r = 0; r < m->nranks; r++) {
		for (int i = 0; i < m->n_old[r]; i++) {
			const struct migrate_shard *s = &m->old_shards[r][i];

			hx->v[fill[gid[kbase[kind_of[r]] + i]]++] =
				(struct holder){
					.rank = r, .shard = i, .lo = s->lo,
					.hi = s->hi, .offset = s->offset,
				};
		}
	}
	rc = index_segments(m, hx);
out:
	free(order);
	free(kind_of);
	free(kind_rank);
	free(kbase);
	free(gid);
	free(fill);
	return rc;
}

static void holder_index_free(struct holder_index *hx)
{
	free(hx->v);
	free(hx->gstart);
	free(hx->g);
	free(hx->sstart);
	free(hx->seg);
	free(hx->cov);
}

/* Seconds per byte on each GPU's links, so that the hot loops do not divide. */
struct rate {
	int node;
	double intra;			/* its intra-node port */
	double nic;			/* its node's NIC */
	double share;			/* its share of the NIC */
};

/*
 * Load per link resource so far, in seconds, for balancing senders.  A
 * stage-2 chunk moves at the GPU's share of its node's NIC (schedule.c),
 * so a GPU's network sends take share_out however idle the NIC is.
 */
struct loads {
	const struct rate *rate;	/* [nranks] */
	double *intra_out;		/* [nranks] GPU's intra-node port */
	double *share_out;		/* [nranks] at its share of the NIC */
	double *nic_out;		/* [nnodes] */
	/*
	 * The busiest receive-side resource.  The plan alone fixes it, so no
	 * choice of senders finishes sooner: a sender may keep serving one
	 * receiver while its own load stays within it.
	 */
	double floor;
};

struct tuple_vec {
	struct migrate_tuple *v;
	long n;
	size_t cap;
};

/*
 * Whether one-block @t, of the same pair and tensor, continues @last: its
 * bytes follow on in the tensor and both buffers (@last grows), or it is
 * @last's next block at the same strides (the same slice of the next
 * expert; two blocks set the strides).
 */
static bool tuple_extends(struct migrate_tuple *last,
			  const struct migrate_tuple *t)
{
	uint64_t len = last->hi - last->lo;

	if (last->from != t->from || last->to != t->to ||
	    last->layer != t->layer || last->tensor != t->tensor)
		return false;
	if (last->count == 1 && last->hi == t->lo &&
	    last->src_offset + len == t->src_offset &&
	    last->dst_offset + len == t->dst_offset) {
		last->hi = t->hi;
		return true;
	}
	if (t->hi - t->lo != len)
		return false;
	if (last->count == 1) {
		if (t->lo < last->hi || t->src_offset < last->src_offset + len ||
		    t->dst_offset < last->dst_offset + len)
			return false;
		last->stride = t->lo - last->lo;
		last->src_stride = t->src_offset - last->src_offset;
		last->dst_stride = t->dst_offset - last->dst_offset;
	} else if (t->lo != last->lo + last->count * last->stride ||
		   t->src_offset != last->src_offset +
				    last->count * last->src_stride ||
		   t->dst_offset != last->dst_offset +
				    last->count * last->dst_stride) {
		return false;
	}
	last->count++;
	return true;
}

/* Appends one-block @t, or merges it into the last tuple it continues. */
static int tuple_push(struct tuple_vec *tv, const struct migrate_tuple *t)
{
	if (tv->n && tuple_extends(&tv->v[tv->n - 1], t))
		return 0;
	if (AR_GROW(tv->v, tv->cap, tv->n + 1, 256) < 0)
		return -ENOMEM;
	tv->v[tv->n++] = *t;
	return 0;
}

/*
 * The cost of giving @bytes more to sender @h on its link to @to: the
 * busiest of its resources after the addition.  Lower is better.
 */
static double sender_cost(const struct loads *ld, int h, int to,
			  uint64_t bytes)
{
	const struct rate *rh = &ld->rate[h], *rt = &ld->rate[to];
	double nic, share;

	if (rh->node == rt->node)
		return ld->intra_out[h] + bytes * rh->intra;
	nic = ld->nic_out[rh->node] + bytes * rh->nic;
	share = ld->share_out[h] +
		bytes * (rh->share > rt->share ? rh->share : rt->share);
	return nic > share ? nic : share;
}

static void sender_charge(struct loads *ld, int h, int to, uint64_t bytes)
{
	const struct rate *rh = &ld->rate[h], *rt = &ld->rate[to];

	if (rh->node == rt->node) {
		ld->intra_out[h] += bytes * rh->intra;
	} else {
		ld->nic_out[rh->node] += bytes * rh->nic;
		ld->share_out[h] +=
			bytes * (rh->share > rt->share ? rh->share : rt->share);
	}
}

/*
 * The shard of @sh[0..n) (sorted, disjoint) that holds [@lo, @hi) of
 * (@layer, @tensor), or NULL, for queries in increasing order: *@cur only
 * moves forward, so a sweep over a rank's shards costs their number.
 */
static const struct migrate_shard *
shard_seek(const struct migrate_shard *sh, int n, int *cur, int layer,
	   int tensor, uint64_t lo, uint64_t hi)
{
	const struct migrate_shard *s;

	for (; *cur < n; (*cur)++) {
		s = &sh[*cur];
		if (s->layer > layer ||
		    (s->layer == layer &&
		     (s->tensor > tensor ||
		      (s->tensor == tensor && s->hi > lo))))
			break;
	}
	if (*cur == n)
		return NULL;
	s = &sh[*cur];
	if (s->layer != layer || s->tensor != tensor || s->lo > lo ||
	    s->hi < hi)
		return NULL;
	return s;
}

/*
 * Where a new shard's bytes come from, as the first pass of the diff
 * finds them for the second, which picks the senders.  Most shards are
 * one piece: kept whole (the index of the GPU's old shard that holds it)
 * or sent whole, from a GPU of the same node or over the network.  A
 * shard that old ranges cut (NEED_SPLIT) has its pieces in a list.
 */
enum {
	NEED_NET = -1,
	NEED_INTRA = -2,
	NEED_SPLIT = -3,
};

/* A piece of a split shard, in the order of the shards. */
struct need {
	uint64_t lo, hi;
	int32_t own;			/* old shard of its GPU holding it; -1 */
	int32_t intra;			/* some GPU of its node holds it */
};

struct need_vec {
	struct need *v;
	long n;
	size_t cap;
};

static int need_push(struct need_vec *nv, const struct need *nd)
{
	if (AR_GROW(nv->v, nv->cap, nv->n + 1, 256) < 0)
		return -ENOMEM;
	nv->v[nv->n++] = *nd;
	return 0;
}

/* The candidates of a piece, reused from piece to piece. */
struct scratch {
	const struct holder **best;	/* of the best class */
	size_t bcap;
};

static void scratch_free(struct scratch *sc)
{
	free(sc->best);
}

static int best_push(struct scratch *sc, int *n, const struct holder *h)
{
	if (AR_GROW(sc->best, sc->bcap, *n + 1, 64) < 0)
		return -ENOMEM;
	sc->best[(*n)++] = h;
	return 0;
}

static int emit(struct migrate *m, struct loads *ld, struct tuple_vec *tv,
		const struct migrate_shard *s, int to, const struct holder *h,
		uint64_t a, uint64_t e)
{
	struct migrate_tuple t = {
		.layer = s->layer, .tensor = s->tensor,
		.lo = a, .hi = e,
		.from = h->rank, .to = to,
		.count = 1,
		.src_offset = h->offset + (a - h->lo),
		.dst_offset = s->offset + (a - s->lo),
	};

	if (h->rank == to) {
		m->stats.bytes_local += e - a;
	} else {
		m->stats.bytes_min += e - a;
		sender_charge(ld, h->rank, to, e - a);
	}
	return tuple_push(tv, &t);
}

/*
 * Network senders looked at per piece, from the group's rotating cursor:
 * enough for every EDP rank of a 512-GPU expert layout, bounded so that a
 * job of hundreds of replicas is not scanned whole for every piece.
 */
#define NET_CANDIDATES	64

/*
 * The holders of @g on the node of rank @to: a slice, since holders are
 * ordered by rank and ranks by node.  Stores its start in *@first.
 */
static int group_on_node(const struct migrate *m, const struct holder *v,
			 struct group *g, int node, int *first)
{
	int a = g->start, b = g->start + g->n, end;

	if (g->memo_node == node) {
		*first = g->memo_first;
		return g->memo_n;
	}
	while (a < b) {
		int mid = (a + b) / 2;

		if (m->ranks[v[mid].rank].node < node)
			a = mid + 1;
		else
			b = mid;
	}
	for (end = a; end < g->start + g->n &&
	     m->ranks[v[end].rank].node == node; end++)
		;
	g->memo_node = node;
	g->memo_first = *first = a;
	g->memo_n = end - a;
	return end - a;
}

/* The groups of one (layer, tensor) key. */
static struct group *key_groups(struct holder_index *hx, int layer,
				int tensor, int *ng)
{
	int k = layer * MIGRATE_NUM_TENSORS + tensor;

	*ng = hx->gstart[k + 1] - hx->gstart[k];
	return &hx->g[hx->gstart[k]];
}

/*
 * Candidates for piece [@a, @b) of a shard of rank @to among the groups
 * @gs[0..ng): every holder on @to's node when @intra (the intra-node
 * class), else up to NET_CANDIDATES holders per covering group from its
 * rotating cursor.  Returns how many.
 */
static int piece_candidates(struct migrate *m, struct holder_index *hx,
			    struct scratch *sc, struct group *gs, int ng,
			    int to, bool intra, uint64_t a, uint64_t b)
{
	int node = m->ranks[to].node, n = 0;

	for (int i = 0; i < ng; i++) {
		struct group *g = &gs[i];
		int first = g->start, k;

		if (g->lo > a || g->hi < b)
			continue;
		if (intra) {
			k = group_on_node(m, hx->v, g, node, &first);
			for (int j = 0; j < k; j++)
				if (best_push(sc, &n, &hx->v[first + j]) < 0)
					return -ENOMEM;
			continue;
		}
		k = g->n < NET_CANDIDATES ? g->n : NET_CANDIDATES;
		for (int j = 0; j < k; j++)
			if (best_push(sc, &n, &hx->v[g->start +
				      (g->cursor + j) % g->n]) < 0)
				return -ENOMEM;
		g->cursor = (g->cursor + 1) % g->n;
	}
	return n;
}

/* Per-GPU receive loads of the first pass, for the floor. */
struct recv_loads {
	double *intra_in;		/* [nranks] */
	double *share_in;		/* [nranks] */
	double *nic_in;			/* [nnodes] */
};

/*
 * The class of piece [@a, @b) of shard @s of rank @to, inside segment
 * @sg, which no old shard of @to holds: whether a GPU of its node holds
 * it; and its load on @to's side.  -AR_EINFEASIBLE when no GPU of the old
 * plan holds it.
 */
static int piece_class(struct migrate *m, struct holder_index *hx, int to,
		       const struct migrate_shard *s, const struct seg *sg,
		       uint64_t a, uint64_t b, const struct rate *rt,
		       struct recv_loads *rl, bool *intrap)
{
	*intrap = false;
	if (!sg || !sg->ncov)
		return ar_seterr(-AR_EINFEASIBLE,
				 "migrate: no GPU of the old plan holds bytes [%llu, %llu) of tensor %d of layer %d",
				 (unsigned long long)a, (unsigned long long)b,
				 s->tensor, s->layer);
	for (int i = 0; i < sg->ncov && !*intrap; i++) {
		int first;

		*intrap = group_on_node(m, hx->v, &hx->g[hx->cov[sg->cov + i]],
					rt->node, &first) > 0;
	}
	if (*intrap) {
		rl->intra_in[to] += (b - a) * rt->intra;
	} else {
		rl->nic_in[rt->node] += (b - a) * rt->nic;
		/* At most its own share: a lower bound on its time. */
		rl->share_in[to] += (b - a) * rt->share;
	}
	return 0;
}

/*
 * First pass for new shard @si of rank @to: the GPU keeps it whole, or it
 * is cut at every boundary of the old ranges inside it (the segments) and
 * each piece is kept or classed by link.  Stores the shard's code in
 * *@code and a split shard's pieces in @nv.
 */
static int shard_needs(struct migrate *m, struct holder_index *hx, int to,
		       int si, int *own_cur, const struct rate *rt,
		       int32_t *code, struct need_vec *nv,
		       struct recv_loads *rl)
{
	const struct migrate_shard *s = &m->new_shards[to][si];
	int k = s->layer * MIGRATE_NUM_TENSORS + s->tensor;
	const struct seg *sg = &hx->seg[hx->sstart[k]];
	int nseg = hx->sstart[k + 1] - hx->sstart[k], j = 0, top = nseg;
	const struct migrate_shard *own;
	bool intra;
	int rc;

	own = shard_seek(m->old_shards[to], m->n_old[to], own_cur, s->layer,
			 s->tensor, s->lo, s->hi);
	if (own) {
		*code = (int32_t)(own - m->old_shards[to]);
		return 0;
	}
	/* The first segment that ends after the shard starts. */
	while (j < top) {
		int mid = (j + top) / 2;

		if (sg[mid].hi <= s->lo)
			j = mid + 1;
		else
			top = mid;
	}
	if (j < nseg && sg[j].lo <= s->lo && sg[j].hi >= s->hi) {
		rc = piece_class(m, hx, to, s, &sg[j], s->lo, s->hi, rt, rl,
				 &intra);
		*code = intra ? NEED_INTRA : NEED_NET;
		return rc;
	}
	*code = NEED_SPLIT;
	for (uint64_t a = s->lo, b; a < s->hi; a = b, j++) {
		struct need n = { .lo = a, .own = -1 };

		/* Before the first old range or after the last: nobody's. */
		if (j == nseg || sg[j].lo > a)
			return piece_class(m, hx, to, s, NULL, a, s->hi, rt,
					   rl, &intra);
		b = sg[j].hi < s->hi ? sg[j].hi : s->hi;
		n.hi = b;
		own = shard_seek(m->old_shards[to], m->n_old[to], own_cur,
				 s->layer, s->tensor, a, b);
		if (own) {
			n.own = (int32_t)(own - m->old_shards[to]);
		} else {
			rc = piece_class(m, hx, to, s, &sg[j], a, b, rt, rl,
					 &intra);
			if (rc < 0)
				return rc;
			n.intra = intra;
		}
		rc = need_push(nv, &n);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* A receiver's last sender of each link class, and its place. */
struct keep {
	int rank[2];			/* [intra]; -1: none yet */
	int cur[2];			/* in its shard list, shard_seek() */
};

/*
 * The old holder @k->rank[@intra] of piece [@a, @b) of shard @s when it
 * can keep serving the shard's receiver @to: holding the bytes, and
 * within the floor after taking them.
 */
static bool sender_keeps(const struct migrate *m, const struct loads *ld,
			 struct keep *k, bool intra, int to,
			 const struct migrate_shard *s, uint64_t a, uint64_t b,
			 struct holder *out)
{
	int h = k->rank[intra];
	const struct migrate_shard *old;

	if (h < 0)
		return false;
	old = shard_seek(m->old_shards[h], m->n_old[h], &k->cur[intra],
			 s->layer, s->tensor, a, b);
	if (!old || sender_cost(ld, h, to, b - a) > ld->floor * (1 + 1e-9))
		return false;
	*out = (struct holder){
		.rank = h, .shard = k->cur[intra], .lo = old->lo,
		.hi = old->hi, .offset = old->offset,
	};
	return true;
}

/*
 * The sender of piece [@lo, @hi) of shard @s of rank @to, which another
 * GPU sends (@intra: one of its node).  The receiver keeps the sender of
 * its previous piece of the same link class while that sender holds the
 * bytes and stays within the floor (see struct loads): a receiver then
 * gets its state from few peers, which the rounds of stage 2 pair
 * without gaps, and adjacent pieces merge into one tuple.  Otherwise the
 * piece goes, in BALANCE_GRANULE steps, to the least loaded holder of its
 * class, so that state spreads over the replicas that hold it.
 */
static int piece_source(struct migrate *m, struct holder_index *hx,
			struct loads *ld, struct keep *k, int to,
			const struct migrate_shard *s, uint64_t lo,
			uint64_t hi, bool intra, struct tuple_vec *tv,
			struct scratch *sc)
{
	struct group *gs;
	int ng, rc;

	gs = key_groups(hx, s->layer, s->tensor, &ng);
	for (uint64_t a = lo, e; a < hi; a = e) {
		struct holder kept;
		const struct holder *pick;
		double pick_cost;
		int nbest;

		e = hi - a > BALANCE_GRANULE ? a + BALANCE_GRANULE : hi;
		if (sender_keeps(m, ld, k, intra, to, s, a, e, &kept)) {
			rc = emit(m, ld, tv, s, to, &kept, a, e);
			if (rc < 0)
				return rc;
			continue;
		}
		nbest = piece_candidates(m, hx, sc, gs, ng, to, intra, a, e);
		if (nbest < 0)
			return nbest;
		/* One candidate: it takes the whole piece at once. */
		if (nbest == 1)
			e = hi;
		pick = sc->best[0];
		pick_cost = sender_cost(ld, pick->rank, to, e - a);
		for (int j = 1; j < nbest; j++) {
			double cost = sender_cost(ld, sc->best[j]->rank, to,
						  e - a);

			if (cost < pick_cost) {
				pick = sc->best[j];
				pick_cost = cost;
			}
		}
		k->rank[intra] = pick->rank;
		k->cur[intra] = pick->shard;
		rc = emit(m, ld, tv, s, to, pick, a, e);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* The part of @s that old shard @own of rank @to holds, kept in place. */
static int keep_own(struct migrate *m, struct loads *ld, struct tuple_vec *tv,
		    const struct migrate_shard *s, int to, int own,
		    uint64_t lo, uint64_t hi)
{
	const struct migrate_shard *o = &m->old_shards[to][own];
	struct holder h = {
		.rank = to, .shard = own, .lo = o->lo, .hi = o->hi,
		.offset = o->offset,
	};

	return emit(m, ld, tv, s, to, &h, lo, hi);
}

/*
 * Second pass: every new shard's sources, from its code (see NEED_*) and
 * a split shard's pieces, which come in shard order.
 */
static int need_sources(struct migrate *m, struct holder_index *hx,
			struct loads *ld, const int32_t *codes,
			const struct need_vec *nv, struct tuple_vec *tv,
			struct scratch *sc)
{
	const struct need *n = nv->v;
	int rc = 0;

	for (int to = 0; to < m->nranks; to++) {
		struct keep k = { .rank = { -1, -1 } };

		for (int i = 0; i < m->n_new[to] && rc == 0; i++) {
			const struct migrate_shard *s = &m->new_shards[to][i];
			int32_t code = *codes++;

			if (code >= 0) {
				rc = keep_own(m, ld, tv, s, to, code, s->lo,
					      s->hi);
				continue;
			}
			if (code != NEED_SPLIT) {
				rc = piece_source(m, hx, ld, &k, to, s, s->lo,
						  s->hi, code == NEED_INTRA,
						  tv, sc);
				continue;
			}
			for (uint64_t at = s->lo; at < s->hi && rc == 0;
			     at = n++->hi) {
				if (n->own >= 0)
					rc = keep_own(m, ld, tv, s, to, n->own,
						      n->lo, n->hi);
				else
					rc = piece_source(m, hx, ld, &k, to, s,
							  n->lo, n->hi,
							  n->intra, tv, sc);
			}
		}
		if (rc < 0)
			return rc;
	}
	return 0;
}

static double max_of(const double *v, int n, double at_least)
{
	for (int i = 0; i < n; i++)
		if (v[i] > at_least)
			at_least = v[i];
	return at_least;
}

/*
 * The sources of every byte of the new state: both passes, with the
 * floor between them.  Their loads are the migration's totals, so they
 * also give the lower bound that sizes the rounds of stage 2.
 */
static int diff_sources(struct migrate *m, struct holder_index *hx,
			struct tuple_vec *tv)
{
	struct need_vec nv = { 0 };
	struct recv_loads rl = { 0 };
	struct loads ld = { 0 };
	struct scratch sc = { 0 };
	struct rate *rate;
	int32_t *codes = NULL;
	int nnodes = m->topo->nnodes, rc = -ENOMEM;
	long nshards = 0;

	ld.rate = rate = calloc((size_t)m->nranks + 1, sizeof(*rate));
	rl.intra_in = calloc((size_t)m->nranks + 1, sizeof(double));
	rl.share_in = calloc((size_t)m->nranks + 1, sizeof(double));
	rl.nic_in = calloc(nnodes, sizeof(double));
	ld.intra_out = calloc((size_t)m->nranks + 1, sizeof(double));
	ld.share_out = calloc((size_t)m->nranks + 1, sizeof(double));
	ld.nic_out = calloc(nnodes, sizeof(double));
	if (!rate || !rl.intra_in || !rl.share_in || !rl.nic_in ||
	    !ld.intra_out || !ld.share_out || !ld.nic_out)
		goto out;
	for (int r = 0; r < m->nranks; r++) {
		const struct migrate_node *nd =
			&m->topo->nodes[m->ranks[r].node];

		rate[r] = (struct rate){
			.node = m->ranks[r].node,
			.intra = 1.0 / (nd->intra_GBps * 1e9),
			.nic = 1.0 / (nd->nic_GBps * 1e9),
			.share = (nd->gpus > 0 ? nd->gpus : 1) /
				 (nd->nic_GBps * 1e9),
		};
		nshards += m->n_new[r];
	}
	codes = malloc((nshards + 1) * sizeof(*codes));
	if (!codes)
		goto out;

	nshards = 0;
	for (int r = 0; r < m->nranks; r++) {
		int own_cur = 0;

		for (int i = 0; i < m->n_new[r]; i++) {
			rc = shard_needs(m, hx, r, i, &own_cur, &rate[r],
					 &codes[nshards++], &nv, &rl);
			if (rc < 0)
				goto out;
		}
	}
	ld.floor = max_of(rl.intra_in, m->nranks, 0.0);
	ld.floor = max_of(rl.share_in, m->nranks, ld.floor);
	ld.floor = max_of(rl.nic_in, nnodes, ld.floor);

	rc = need_sources(m, hx, &ld, codes, &nv, tv, &sc);
	if (rc < 0)
		goto out;
	m->stats.lower_bound_s =
		max_of(ld.intra_out, m->nranks,
		       max_of(ld.nic_out, nnodes,
			      max_of(rl.intra_in, m->nranks,
				     max_of(rl.nic_in, nnodes, 0.0))));
out:
	free(codes);
	free(nv.v);
	free(rate);
	free(rl.intra_in);
	free(rl.share_in);
	free(rl.nic_in);
	free(ld.intra_out);
	free(ld.share_out);
	free(ld.nic_out);
	scratch_free(&sc);
	return rc;
}

static bool plan_is_empty(const struct costmodel_plan *p)
{
	if (!p)
		return true;
	for (int t = 0; t < p->ntemplates; t++)
		if (p->templates[t].replicas > 0)
			return false;
	return true;
}

int migrate_diff(const struct migrate_layout *layout,
		 const struct migrate_topo *topo,
		 const struct costmodel_plan *old_plan,
		 const struct costmodel_plan *new_plan,
		 const struct migrate_opts *opts, struct migrate **mp)
{
	static const struct migrate_opts default_opts;
	struct role *old_roles = NULL, *new_roles = NULL;
	int nold = 0, nnew = 0, rc;
	struct holder_index hx = { 0 };
	struct tuple_vec tv = { 0 };
	struct migrate *m;
	double t0 = ar_now();

	*mp = NULL;
	if (!opts)
		opts = &default_opts;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->layout = migrate_layout_dup(layout);
	m->topo = migrate_topo_dup(topo);
	if (!m->layout || !m->topo) {
		rc = -ENOMEM;
		goto out;
	}

	rc = plan_roles(topo, old_plan, &old_roles, &nold);
	if (rc < 0)
		goto out;
	rc = plan_roles(topo, new_plan, &new_roles, &nnew);
	if (rc < 0)
		goto out;
	rc = build_ranks(m, old_roles, nold, new_roles, nnew);
	if (rc < 0)
		goto out;

	/* A job that starts has no state to move: only the ranks matter. */
	if (plan_is_empty(old_plan)) {
		rc = migrate_schedule(m, opts);
		goto out;
	}

	rc = holder_index_build(m, &hx);
	if (rc < 0)
		goto out;
	rc = diff_sources(m, &hx, &tv);
	if (rc < 0)
		goto out;
	m->tuples = tv.v;
	m->ntuples = tv.n;
	tv.v = NULL;
	rc = migrate_schedule(m, opts);

out:
	free(tv.v);
	holder_index_free(&hx);
	free(old_roles);
	free(new_roles);
	if (rc < 0) {
		migrate_free(m);
		return rc;
	}
	m->stats.diff_s = ar_now() - t0;
	*mp = m;
	return 0;
}

static int ptr_cmp(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)*(void *const *)a;
	uintptr_t y = (uintptr_t)*(void *const *)b;

	return x < y ? -1 : x > y;
}

/* Frees each of @lists[0..n) once: ranks of one kind share theirs. */
static void shard_lists_free(struct migrate_shard **lists, int n)
{
	if (!lists)
		return;
	qsort(lists, n, sizeof(*lists), ptr_cmp);
	for (int r = 0; r < n; r++)
		if (!r || lists[r] != lists[r - 1])
			free(lists[r]);
}

void migrate_free(struct migrate *m)
{
	if (!m)
		return;
	shard_lists_free(m->old_shards, m->nranks);
	shard_lists_free(m->new_shards, m->nranks);
	free(m->old_shards);
	free(m->new_shards);
	free(m->n_old);
	free(m->n_new);
	free(m->ranks);
	free(m->tuples);
	migrate_layout_free(m->layout);
	migrate_topo_free(m->topo);
	free(m);
}

uint64_t migrate_rank_old_bytes(const struct migrate *m, int rank)
{
	int n = m->n_old[rank];

	return n ? m->old_shards[rank][n - 1].offset +
		   (m->old_shards[rank][n - 1].hi -
		    m->old_shards[rank][n - 1].lo) : 0;
}

uint64_t migrate_rank_new_bytes(const struct migrate *m, int rank)
{
	int n = m->n_new[rank];

	return n ? m->new_shards[rank][n - 1].offset +
		   (m->new_shards[rank][n - 1].hi -
		    m->new_shards[rank][n - 1].lo) : 0;
}
