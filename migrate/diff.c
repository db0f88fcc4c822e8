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
};

/* A growable array of shards. */
struct shard_vec {
	struct migrate_shard *v;
	int n, cap;
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
	if (sv->n == sv->cap) {
		int cap = sv->cap ? 2 * sv->cap : 16;
		struct migrate_shard *v = realloc(sv->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		sv->v = v;
		sv->cap = cap;
	}
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
 * slice.  GPUs of a stage are numbered replica-major (w = replica * tp +
 * tp_rank); ETP varies fastest, then EP, then EDP.
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

		int w = r->replica * st->tp + r->tp_rank;
		int etp_rank = w % etp;
		int ep_rank = (w / etp) % ep;
		int e0 = ly->experts / ep * ep_rank;
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
	int n = 0, cap = 0, pipe = 0;

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
				if (g->node < 0 || g->node >= topo->nnodes) {
					free(roles);
					return ar_seterr(-AR_EINVAL,
							 "migrate: template %d replica %d stage %d is on node %d, outside the cluster",
							 t, r, s, g->node);
				}
				for (int k = 0; k < st->tp; k++) {
					if (n == cap) {
						int c = cap ? 2 * cap : 64;
						struct role *v = realloc(roles,
							c * sizeof(*v));

						if (!v) {
							free(roles);
							return -ENOMEM;
						}
						roles = v;
						cap = c;
					}
					roles[n++] = (struct role){
						.node = g->node,
						.gpu = g->gpu[k],
						.pipe = pipe,
						.stage = st,
						.tp_rank = k,
						.replica = r,
						.replicas = tm->replicas,
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

static int shard_cmp(const void *a, const void *b)
{
	const struct migrate_shard *x = a, *y = b;

	if (x->layer != y->layer)
		return x->layer < y->layer ? -1 : 1;
	if (x->tensor != y->tensor)
		return x->tensor < y->tensor ? -1 : 1;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

enum migrate_link migrate_link_of(const struct migrate *m, int a, int b)
{
	if (a == b)
		return MIGRATE_LINK_LOCAL;
	if (m->ranks[a].node == m->ranks[b].node)
		return MIGRATE_LINK_INTRA;
	return MIGRATE_LINK_NET;
}

double migrate_link_Bps(const struct migrate *m, int a, int b)
{
	const struct migrate_node *na = &m->topo->nodes[m->ranks[a].node];
	const struct migrate_node *nb = &m->topo->nodes[m->ranks[b].node];

	switch (migrate_link_of(m, a, b)) {
	case MIGRATE_LINK_LOCAL:
		return 0.0;
	case MIGRATE_LINK_INTRA:
		return na->intra_GBps * 1e9;
	default:
		return (na->nic_GBps < nb->nic_GBps ? na->nic_GBps :
						      nb->nic_GBps) * 1e9;
	}
}

/* Assigns the ranks of both plans and their shard lists. */
static int build_ranks(struct migrate *m, const struct role *old_roles,
		       int nold, const struct role *new_roles, int nnew)
{
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

	for (int pass = 0; pass < 2; pass++) {
		const struct role *roles = pass ? new_roles : old_roles;
		int nroles = pass ? nnew : nold;

		for (int i = 0; i < nroles; i++) {
			int r = migrate_rank_find(m, roles[i].node,
						  roles[i].gpu);
			struct migrate_rank *rk = &m->ranks[r];
			int *pipe = pass ? &rk->new_pipe : &rk->old_pipe;
			struct shard_vec sv = { 0 };

			if (*pipe >= 0)
				return ar_seterr(-AR_EINVAL,
						 "migrate: GPU %d of node %s is used twice in the %s plan",
						 rk->gpu,
						 m->topo->nodes[rk->node].name,
						 pass ? "new" : "old");
			*pipe = roles[i].pipe;
			rc = role_shards(m->layout, &roles[i], &sv);
			if (rc < 0) {
				free(sv.v);
				return rc;
			}
			qsort(sv.v, sv.n, sizeof(*sv.v), shard_cmp);
			migrate_shards_place(sv.v, sv.n);
			if (pass) {
				m->new_shards[r] = sv.v;
				m->n_new[r] = sv.n;
			} else {
				m->old_shards[r] = sv.v;
				m->n_old[r] = sv.n;
			}
		}
	}
	return 0;
}

/* Old holders of one tensor of one layer. */
struct holder {
	int rank;
	uint64_t lo, hi;
	uint64_t offset;		/* in the holder's old buffer */
};

/*
 * Holders of one range: the replicas (and EDP ranks) that hold the same
 * bytes, ordered by rank, hence by node.  @cursor rotates the network
 * senders so that sender choice looks at a few of them, not all.
 */
struct group {
	uint64_t lo, hi;
	int start, n;			/* into holder_index.v */
	int cursor;
};

struct holder_index {
	int nkeys;
	int *start;			/* [nkeys + 1] into v */
	struct holder *v;
	int *gstart;			/* [nkeys + 1] into g */
	struct group *g;
};

static int holder_cmp(const void *a, const void *b)
{
	const struct holder *x = a, *y = b;

	if (x->lo != y->lo)
		return x->lo < y->lo ? -1 : 1;
	if (x->hi != y->hi)
		return x->hi < y->hi ? -1 : 1;
	return x->rank < y->rank ? -1 : x->rank > y->rank;
}

static int holder_index_build(const struct migrate *m, struct holder_index *hi)
{
	int nkeys = m->layout->nlayers * MIGRATE_NUM_TENSORS;
	int *fill;

	hi->nkeys = nkeys;
	hi->start = calloc(nkeys + 1, sizeof(*hi->start));
	fill = calloc(nkeys, sizeof(*fill));
	if (!hi->start || !fill) {
		free(fill);
		return -ENOMEM;
	}
	for (int r = 0; r < m->nranks; r++)
		for (int i = 0; i < m->n_old[r]; i++) {
			const struct migrate_shard *s = &m->old_shards[r][i];

			int k = s->layer * MIGRATE_NUM_TENSORS + s->tensor;

			hi->start[k + 1]++;
		}
	for (int k = 0; k < nkeys; k++)
		hi->start[k + 1] += hi->start[k];
	hi->v = malloc((hi->start[nkeys] + 1) * sizeof(*hi->v));
	if (!hi->v) {
		free(fill);
		return -ENOMEM;
	}
	for (int r = 0; r < m->nranks; r++)
		for (int i = 0; i < m->n_old[r]; i++) {
			const struct migrate_shard *s = &m->old_shards[r][i];
			int k = s->layer * MIGRATE_NUM_TENSORS + s->tensor;

			hi->v[hi->start[k] + fill[k]++] = (struct holder){
				.rank = r, .lo = s->lo, .hi = s->hi,
				.offset = s->offset,
			};
		}
	free(fill);
	/* Same ranges side by side, then one group per distinct range. */
	for (int k = 0; k < nkeys; k++)
		qsort(&hi->v[hi->start[k]], hi->start[k + 1] - hi->start[k],
		      sizeof(*hi->v), holder_cmp);
	hi->gstart = calloc(nkeys + 1, sizeof(*hi->gstart));
	hi->g = malloc((hi->start[nkeys] + 1) * sizeof(*hi->g));
	if (!hi->gstart || !hi->g)
		return -ENOMEM;
	for (int k = 0, ng = 0; k < nkeys; k++) {
		hi->gstart[k] = ng;
		for (int i = hi->start[k]; i < hi->start[k + 1]; i++) {
			if (i > hi->start[k] &&
			    hi->v[i].lo == hi->v[i - 1].lo &&
			    hi->v[i].hi == hi->v[i - 1].hi) {
				hi->g[ng - 1].n++;
				continue;
			}
			hi->g[ng++] = (struct group){
				.lo = hi->v[i].lo, .hi = hi->v[i].hi,
				.start = i, .n = 1,
			};
		}
		hi->gstart[k + 1] = ng;
	}
	return 0;
}

static void holder_index_free(struct holder_index *hi)
{
	free(hi->start);
	free(hi->v);
	free(hi->gstart);
	free(hi->g);
}

/* Load per link resource so far, in seconds, for balancing senders. */
struct loads {
	double *intra_out;		/* [nranks] */
	double *net_out;		/* [nranks] */
	double *nic_out;		/* [nnodes] */
};

struct tuple_vec {
	struct migrate_tuple *v;
	long n, cap;
};

static int tuple_push(struct tuple_vec *tv, const struct migrate_tuple *t)
{
	struct migrate_tuple *last = tv->n ? &tv->v[tv->n - 1] : NULL;

	if (last && last->from == t->from && last->to == t->to &&
	    last->layer == t->layer && last->tensor == t->tensor &&
	    last->hi == t->lo &&
	    last->src_offset + (last->hi - last->lo) == t->src_offset &&
	    last->dst_offset + (last->hi - last->lo) == t->dst_offset) {
		last->hi = t->hi;
		return 0;
	}
	if (tv->n == tv->cap) {
		long cap = tv->cap ? 2 * tv->cap : 256;
		struct migrate_tuple *v = realloc(tv->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		tv->v = v;
		tv->cap = cap;
	}
	tv->v[tv->n++] = *t;
	return 0;
}

/*
 * The cost of giving @bytes more to sender @h on its link to @to: the
 * busiest resource on the way after the addition.  Lower is better.
 */
static double sender_cost(const struct migrate *m, const struct loads *ld,
			  int h, int to, uint64_t bytes)
{
	double bps = migrate_link_Bps(m, h, to);
	double t = (double)bytes / bps;

	if (migrate_link_of(m, h, to) == MIGRATE_LINK_INTRA)
		return ld->intra_out[h] + t;
	/* The node's GPUs share its NIC; the GPU's own share breaks ties. */
	return ld->nic_out[m->ranks[h].node] + t + 1e-3 * ld->net_out[h];
}

static void sender_charge(const struct migrate *m, struct loads *ld, int h,
			  int to, uint64_t bytes)
{
	double t = (double)bytes / migrate_link_Bps(m, h, to);

	if (migrate_link_of(m, h, to) == MIGRATE_LINK_INTRA) {
		ld->intra_out[h] += t;
	} else {
		ld->nic_out[m->ranks[h].node] += t;
		ld->net_out[h] += t;
	}
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Scratch space of shard_sources(), reused from shard to shard. */
struct scratch {
	uint64_t *cuts;
	struct group **over;		/* groups overlapping the shard */
	const struct holder **best;	/* candidates of the best class */
	int cap, bcap;
};

static void scratch_free(struct scratch *sc)
{
	free(sc->cuts);
	free(sc->over);
	free(sc->best);
}

static int scratch_reserve(struct scratch *sc, int ngroups)
{
	int cap = 2 * ngroups + 2;

	if (sc->cap >= cap)
		return 0;
	free(sc->cuts);
	free(sc->over);
	sc->cuts = malloc(cap * sizeof(*sc->cuts));
	sc->over = malloc(cap * sizeof(*sc->over));
	if (!sc->cuts || !sc->over) {
		sc->cap = 0;
		return -ENOMEM;
	}
	sc->cap = cap;
	return 0;
}

static int best_push(struct scratch *sc, int *n, const struct holder *h)
{
	if (*n == sc->bcap) {
		int cap = sc->bcap ? 2 * sc->bcap : 64;
		const struct holder **v = realloc(sc->best, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		sc->best = v;
		sc->bcap = cap;
	}
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
		.src_offset = h->offset + (a - h->lo),
		.dst_offset = s->offset + (a - s->lo),
	};

	if (h->rank == to) {
		m->stats.bytes_local += e - a;
	} else {
		m->stats.bytes_min += e - a;
		sender_charge(m, ld, h->rank, to, e - a);
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
			 const struct group *g, int node, int *first)
{
	int a = g->start, b = g->start + g->n, end;

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
	*first = a;
	return end - a;
}

/*
 * Candidates for piece [@a, @b) of a shard of rank @to: every holder on
 * @to's node if any (the intra-node class), else up to NET_CANDIDATES
 * holders per covering group from its rotating cursor.  Returns how many.
 */
static int piece_candidates(struct migrate *m, struct holder_index *hx,
			    struct scratch *sc, int nover, int to, uint64_t a,
			    uint64_t b)
{
	int node = m->ranks[to].node, n = 0;

	for (int i = 0; i < nover; i++) {
		const struct group *g = sc->over[i];
		int first, k;

		if (g->lo > a || g->hi < b)
			continue;
		k = group_on_node(m, hx->v, g, node, &first);
		for (int j = 0; j < k; j++)
			if (best_push(sc, &n, &hx->v[first + j]) < 0)
				return -ENOMEM;
	}
	if (n)
		return n;
	for (int i = 0; i < nover; i++) {
		struct group *g = sc->over[i];
		int k = g->n < NET_CANDIDATES ? g->n : NET_CANDIDATES;

		if (g->lo > a || g->hi < b)
			continue;
		for (int j = 0; j < k; j++)
			if (best_push(sc, &n, &hx->v[g->start +
				      (g->cursor + j) % g->n]) < 0)
				return -ENOMEM;
		g->cursor = (g->cursor + 1) % g->n;
	}
	return n;
}

/*
 * Sources for one new shard @s of rank @to: the GPU's own old bytes where
 * it has them; elsewhere the shard is cut at the boundaries of the old
 * ranges that overlap it and each piece goes to a holder of the fastest
 * link class, the least loaded among those looked at, in BALANCE_GRANULE
 * steps so that big shards spread over the replicas that hold them.
 */
static int shard_sources(struct migrate *m, struct holder_index *hx,
			 struct loads *ld, int to,
			 const struct migrate_shard *s, struct tuple_vec *tv,
			 struct scratch *sc)
{
	int k = s->layer * MIGRATE_NUM_TENSORS + s->tensor;
	struct group *gs = &hx->g[hx->gstart[k]];
	int ng = hx->gstart[k + 1] - hx->gstart[k];
	const struct migrate_shard *own;
	int nover = 0, ncuts = 0, rc;

	own = migrate_shard_find(m->old_shards[to], m->n_old[to], s->layer,
				 s->tensor, s->lo, s->hi);
	if (own) {
		struct holder h = {
			.rank = to, .lo = own->lo, .hi = own->hi,
			.offset = own->offset,
		};

		return emit(m, ld, tv, s, to, &h, s->lo, s->hi);
	}

	rc = scratch_reserve(sc, ng);
	if (rc < 0)
		return rc;
	sc->cuts[ncuts++] = s->lo;
	sc->cuts[ncuts++] = s->hi;
	for (int i = 0; i < ng; i++) {
		if (gs[i].hi <= s->lo || gs[i].lo >= s->hi)
			continue;
		sc->over[nover++] = &gs[i];
		if (gs[i].lo > s->lo)
			sc->cuts[ncuts++] = gs[i].lo;
		if (gs[i].hi < s->hi)
			sc->cuts[ncuts++] = gs[i].hi;
	}
	/* The GPU's own ranges are groups too, so the cuts include them. */
	qsort(sc->cuts, ncuts, sizeof(*sc->cuts), u64_cmp);

	for (int c = 0; c + 1 < ncuts; c++) {
		uint64_t a = sc->cuts[c], b = sc->cuts[c + 1];
		int nbest;

		if (a == b)
			continue;
		own = migrate_shard_find(m->old_shards[to], m->n_old[to],
					 s->layer, s->tensor, a, b);
		if (own) {
			struct holder h = {
				.rank = to, .lo = own->lo, .hi = own->hi,
				.offset = own->offset,
			};

			rc = emit(m, ld, tv, s, to, &h, a, b);
			if (rc < 0)
				return rc;
			continue;
		}
		while (a < b) {
			uint64_t e = b - a > BALANCE_GRANULE ?
				     a + BALANCE_GRANULE : b;
			const struct holder *pick;
			double pick_cost;

			nbest = piece_candidates(m, hx, sc, nover, to, a, e);
			if (nbest < 0)
				return nbest;
			if (nbest == 0)
				return ar_seterr(-AR_EINFEASIBLE,
						 "migrate: no GPU of the old plan holds bytes [%llu, %llu) of tensor %d of layer %d",
						 (unsigned long long)a,
						 (unsigned long long)b,
						 s->tensor, s->layer);
			/* One candidate: it takes the whole piece at once. */
			if (nbest == 1)
				e = b;
			pick = sc->best[0];
			pick_cost = sender_cost(m, ld, pick->rank, to, e - a);
			for (int i = 1; i < nbest; i++) {
				double cost = sender_cost(m, ld,
							  sc->best[i]->rank,
							  to, e - a);

				if (cost < pick_cost) {
					pick = sc->best[i];
					pick_cost = cost;
				}
			}
			rc = emit(m, ld, tv, s, to, pick, a, e);
			if (rc < 0)
				return rc;
			a = e;
		}
	}
	return 0;
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
	struct loads ld = { 0 };
	struct tuple_vec tv = { 0 };
	struct scratch sc = { 0 };
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
	ld.intra_out = calloc((size_t)m->nranks + 1, sizeof(double));
	ld.net_out = calloc((size_t)m->nranks + 1, sizeof(double));
	ld.nic_out = calloc(topo->nnodes, sizeof(double));
	if (!ld.intra_out || !ld.net_out || !ld.nic_out) {
		rc = -ENOMEM;
		goto out;
	}

	for (int r = 0; r < m->nranks; r++) {
		for (int i = 0; i < m->n_new[r]; i++) {
			rc = shard_sources(m, &hx, &ld, r, &m->new_shards[r][i],
					   &tv, &sc);
			if (rc < 0)
				goto out;
		}
	}
	m->tuples = tv.v;
	m->ntuples = tv.n;
	tv.v = NULL;
	rc = migrate_schedule(m, opts);

out:
	scratch_free(&sc);
	free(tv.v);
	free(ld.intra_out);
	free(ld.net_out);
	free(ld.nic_out);
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

void migrate_free(struct migrate *m)
{
	if (!m)
		return;
	for (int r = 0; r < m->nranks; r++) {
		if (m->old_shards)
			free(m->old_shards[r]);
		if (m->new_shards)
			free(m->new_shards[r]);
	}
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
