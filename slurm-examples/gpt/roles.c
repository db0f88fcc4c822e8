/*
 * roles.c - an Arachne plan as the trainer runs it: the pipelines and
 * their stages' ranks, each rank's place, each pipeline's share of the
 * global batch, and the groups whose gradients are summed together.
 * Every rank derives the same structure from the same plan, without
 * talking to the others.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ar.h"
#include "gpt.h"

int gpt_job_rank_of(const struct gpt_job *job, int node, int gpu)
{
	for (int r = 0; r < job->size; r++)
		if (job->node_of[r] == node && job->gpu_of[r] == gpu)
			return r;
	return -1;
}

static struct gpt_plan *plan_alloc(const struct gpt_job *job, int npipes)
{
	struct gpt_plan *gp = calloc(1, sizeof(*gp));

	if (!gp)
		return NULL;
	gp->npipes = npipes;
	gp->pipes = calloc(npipes, sizeof(*gp->pipes));
	gp->place = calloc(job->size, sizeof(*gp->place));
	if (!gp->pipes || !gp->place) {
		gpt_plan_free(gp);
		return NULL;
	}
	for (int r = 0; r < job->size; r++)
		gp->place[r].pipe = -1;
	return gp;
}

void gpt_plan_free(struct gpt_plan *gp)
{
	if (!gp)
		return;
	for (int g = 0; g < gp->ngroups; g++) {
		free(gp->groups[g].members);
		free(gp->groups[g].items);
	}
	free(gp->groups);
	free(gp->pipes);
	free(gp->place);
	costmodel_plan_free(gp->plan);
	free(gp);
}

/* Give the pipelines, in order, consecutive shares of the global batch. */
static int split_batch(struct gpt_plan *gp, const int *mb_per_pipe)
{
	int next = 0;

	for (int p = 0; p < gp->npipes; p++) {
		struct gpt_pipe *pp = &gp->pipes[p];
		long want = (long)mb_per_pipe[p] * gp->mbs;

		pp->sample0 = next;
		pp->samples = (int)(want < gp->global_batch - next ?
					    want : gp->global_batch - next);
		pp->micro_batches = (pp->samples + gp->mbs - 1) / gp->mbs;
		next += pp->samples;
	}
	if (next < gp->global_batch)
		return ar_seterr(-AR_EINVAL, "the plan's micro-batches cover %d of the global batch of %d samples",
				 next, gp->global_batch);
	return 0;
}

/* ---------------------------------------------------------------------
 * Synchronization groups.
 * ------------------------------------------------------------------- */

/* The rank of pipeline @p that holds unit @u of @layer. */
static int holder(const struct gpt_config *cfg, const struct gpt_pipe *pp,
		  int layer, int u)
{
	for (int s = 0; s < pp->nstages; s++) {
		const struct gpt_stage_info *st = &pp->stages[s];

		if (layer >= st->first && layer <= st->last)
			return st->ranks[u * st->tp / cfg->U];
	}
	return -1;
}

static int int_cmp(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

/* Members of @item: one holder per pipeline (two for the tied rows). */
static int item_members(const struct gpt_plan *gp, const struct gpt_config *cfg,
			const struct gpt_sync_item *it, int *members)
{
	int n = 0;

	for (int p = 0; p < gp->npipes; p++) {
		if (it->layer >= 0) {
			members[n++] = holder(cfg, &gp->pipes[p], it->layer,
					      it->unit);
			continue;
		}
		members[n++] = holder(cfg, &gp->pipes[p], 0, it->unit);
		members[n++] = holder(cfg, &gp->pipes[p], cfg->nlayers - 1,
				      it->unit);
	}
	qsort(members, n, sizeof(*members), int_cmp);
	int k = 0;

	for (int i = 0; i < n; i++)
		if (k == 0 || members[k - 1] != members[i])
			members[k++] = members[i];
	return k;
}

static int add_item(struct gpt_plan *gp, const struct gpt_config *cfg,
		    int layer, int unit, size_t lo, size_t hi, int *members)
{
	struct gpt_sync_item it = { layer, unit, lo, hi };
	int n = item_members(gp, cfg, &it, members);
	struct gpt_sync_group *g = NULL;

	for (int i = 0; i < gp->ngroups && !g; i++)
		if (gp->groups[i].nmembers == n &&
		    !memcmp(gp->groups[i].members, members, n * sizeof(int)))
			g = &gp->groups[i];
	if (!g) {
		if (AR_GROW(gp->groups, gp->groups_cap, gp->ngroups + 1, 8) < 0)
			return -ENOMEM;
		g = &gp->groups[gp->ngroups++];
		memset(g, 0, sizeof(*g));
		g->comm = NULL;
		g->nmembers = n;
		g->members = malloc(n * sizeof(int));
		if (!g->members)
			return -ENOMEM;
		memcpy(g->members, members, n * sizeof(int));
	}
	if (AR_GROW(g->items, g->items_cap, g->nitems + 1, 16) < 0)
		return -ENOMEM;
	g->items[g->nitems++] = it;
	g->floats += hi - lo;
	return 0;
}

/*
 * Every unit of every layer is summed over the ranks that hold it, one
 * per pipeline whatever its template and TP degree; the token embedding's
 * rows over the holders of the embedding and of the head together (tied
 * weights).  Items with the same ranks share one group, in the order of
 * the layers, which is the order every rank creates their communicators.
 */
static int build_groups(struct gpt_plan *gp, const struct gpt_config *cfg)
{
	size_t wte = cfg->unit_size[P_WTE];
	int H = cfg->nlayers - 1, rc = 0;
	int *members = malloc(2 * gp->npipes * sizeof(int));

	if (!members)
		return -ENOMEM;
	for (int u = 0; u < cfg->U && rc == 0; u++)
		rc = add_item(gp, cfg, -1, u, 0, wte, members);
	for (int l = 0; l <= H && rc == 0; l++) {
		enum gpt_layer_kind k = gpt_layer_kind(cfg, l);
		size_t lo = k == GPT_BLOCK ? 0 : wte;

		for (int u = 0; u < cfg->U && rc == 0; u++)
			rc = add_item(gp, cfg, l, u, lo, cfg->unit_floats[k],
				      members);
	}
	free(members);
	return rc;
}

/* ---------------------------------------------------------------------
 * Plans.
 * ------------------------------------------------------------------- */

int gpt_plan_create(const struct gpt_job *job, struct costmodel_plan *plan,
		    struct gpt_plan **gpp)
{
	const struct gpt_config *cfg = &job->cfg;
	struct gpt_plan *gp;
	int npipes = 0, p = 0, rc;
	int *mb = NULL;

	*gpp = NULL;
	if (plan->seq_len != cfg->T)
		return ar_seterr(-AR_EINVAL, "the plan's seq_len is %d; the model's is %d",
				 plan->seq_len, cfg->T);
	if (plan->micro_batch < 1 || plan->global_batch < 1)
		return ar_seterr(-AR_EINVAL, "the plan has micro_batch %d and global_batch %d",
				 plan->micro_batch, plan->global_batch);
	for (int t = 0; t < plan->ntemplates; t++)
		npipes += plan->templates[t].replicas;
	if (npipes < 1)
		return ar_seterr(-AR_EINVAL, "the plan has no pipeline");
	gp = plan_alloc(job, npipes);
	mb = calloc(npipes, sizeof(*mb));
	if (!gp || !mb) {
		rc = -ENOMEM;
		goto fail;
	}
	gp->mbs = plan->micro_batch;
	gp->global_batch = plan->global_batch;
	for (int t = 0; t < plan->ntemplates; t++) {
		const struct costmodel_template *tm = &plan->templates[t];

		if (tm->micro_batches < 1) {
			rc = ar_seterr(-AR_EINVAL, "template %d has no micro_batches (price the plan with arachne-plan --evaluate first)",
				       t);
			goto fail;
		}
		for (int r = 0; r < tm->replicas; r++, p++) {
			struct gpt_pipe *pp = &gp->pipes[p];

			pp->template = t;
			pp->replica = r;
			pp->nstages = tm->nstages;
			mb[p] = tm->micro_batches;
			for (int s = 0; s < tm->nstages; s++) {
				const struct costmodel_stage *cs = &tm->stages[s];
				const struct costmodel_group *g =
					costmodel_template_group(tm, r, s, 0);
				struct gpt_stage_info *st = &pp->stages[s];

				if (costmodel_stage_dp(cs) > 1) {
					rc = ar_seterr(-AR_EINVAL, "template %d stage %d has data parallelism of its own (dp %d); arachne-gpt, like the migrator, runs one TP group per stage and replica",
						       t, s, costmodel_stage_dp(cs));
					goto fail;
				}
				if (cs->tp < 1 || cfg->U % cs->tp) {
					rc = ar_seterr(-AR_EINVAL, "template %d stage %d has TP %d; the model's %d heads allow TP degrees dividing %d",
						       t, s, cs->tp, cfg->NH,
						       cfg->U);
					goto fail;
				}
				st->tp = cs->tp;
				st->first = cs->first_layer;
				st->last = cs->last_layer;
				for (int k = 0; k < cs->tp; k++) {
					int rank = gpt_job_rank_of(job, g->node,
								   g->gpu[k]);

					if (rank < 0) {
						rc = ar_seterr(-AR_EINVAL, "template %d replica %d stage %d: GPU %d of node %s has no rank in this job",
							       t, r, s, g->gpu[k],
							       job->cl->nodes[g->node].name);
						goto fail;
					}
					st->ranks[k] = rank;
					gp->place[rank] = (struct gpt_place){
						.pipe = p, .stage = s, .tp_rank = k
					};
				}
			}
		}
	}
	rc = split_batch(gp, mb);
	if (rc == 0)
		rc = build_groups(gp, cfg);
	if (rc < 0)
		goto fail;
	free(mb);
	gp->plan = plan;
	*gpp = gp;
	return 0;
fail:
	free(mb);
	gpt_plan_free(gp);
	return rc;
}

int gpt_plan_single(const struct gpt_job *job, int mbs, struct gpt_plan **gpp)
{
	struct gpt_plan *gp = plan_alloc(job, 1);
	struct gpt_pipe *pp;
	int mb, rc;

	*gpp = NULL;
	if (!gp)
		return -ENOMEM;
	gp->mbs = mbs;
	gp->global_batch = job->cfg.global_batch;
	pp = &gp->pipes[0];
	pp->nstages = 1;
	pp->stages[0] = (struct gpt_stage_info){
		.tp = 1, .first = 0, .last = job->cfg.nlayers - 1, .ranks = { 0 }
	};
	gp->place[0] = (struct gpt_place){ .pipe = 0, .stage = 0, .tp_rank = 0 };
	mb = (gp->global_batch + mbs - 1) / mbs;
	rc = split_batch(gp, &mb);
	if (rc == 0)
		rc = build_groups(gp, &job->cfg);
	if (rc < 0) {
		gpt_plan_free(gp);
		return rc;
	}
	*gpp = gp;
	return 0;
}
