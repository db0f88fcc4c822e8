/*
 * step.c - one rank's part of a training step under a plan: the 1F1B
 * schedule of its pipeline stage, the activations and gradients it
 * exchanges with the neighbouring stages (whatever their TP degree), the
 * gradient sums over the plan's synchronization groups, AdamW, and the
 * loss report.  Every collective runs on a communicator of one of the
 * plan's groups: a stage's TP group, or the ranks that hold the same units.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ar.h"
#include "gpt.h"

/* Tags on the job communicator: 2 i (activations) and 2 i + 1 (their
 * gradients) for micro-batch i, and the loss report. */
#define TAG_LOSS	32767
#define MAX_MICRO_BATCHES	16000

static void trace_comm(const struct gpt_trainer *tr, const char *what,
		       const int *ranks, int n)
{
	char buf[1024];
	int len = 0;

	if (!tr->job->trace)
		return;
	for (int i = 0; i < n && len < (int)sizeof(buf) - 16; i++)
		len += snprintf(buf + len, sizeof(buf) - len, "%s%d",
				i ? "," : "", ranks[i]);
	fprintf(stderr, "arachne-gpt: rank %d: comm %s %s\n", tr->job->rank,
		what, buf);
}

int gpt_trainer_create(struct gpt_trainer *tr, const struct gpt_job *job,
		       struct gpt_plan *gp, uint64_t seed,
		       const struct gpt_adamw *opt)
{
	const struct gpt_config *cfg = &job->cfg;
	int warm, m, rc;

	memset(tr, 0, sizeof(*tr));
	tr->job = job;
	tr->gp = gp;
	tr->seed = seed;
	tr->opt = *opt;
	tr->me = gp->place[job->rank];
	tr->shard.last = -1;
	if (tr->me.pipe < 0)
		return 0;
	tr->pipe = &gp->pipes[tr->me.pipe];
	tr->stage = &tr->pipe->stages[tr->me.stage];
	tr->tp = tr->stage->tp;
	tr->tp_rank = tr->me.tp_rank;
	if (tr->pipe->micro_batches > MAX_MICRO_BATCHES)
		return ar_seterr(-AR_EINVAL, "pipeline %d has %d micro-batches; at most %d",
				 tr->me.pipe, tr->pipe->micro_batches,
				 MAX_MICRO_BATCHES);
	rc = gpt_shard_alloc(&tr->shard, cfg, tr->stage->first,
			     tr->stage->last, tr->tp_rank * cfg->U / tr->tp,
			     cfg->U / tr->tp);
	if (rc < 0)
		return rc;
	/* 1F1B keeps at most (stages - stage) micro-batches in flight. */
	m = tr->pipe->micro_batches;
	warm = tr->pipe->nstages - tr->me.stage - 1;
	tr->nslots = warm + 1 < m ? warm + 1 : m;
	if (tr->nslots < 1)
		tr->nslots = 1;
	tr->slots = gpt_acts_alloc(tr, tr->nslots);
	tr->scratch = gpt_scratch_alloc(tr);
	tr->reqs = calloc((size_t)tr->nslots * 2 * COSTMODEL_MAX_TP,
			  sizeof(*tr->reqs));
	tr->nreqs = calloc((size_t)tr->nslots * 2, sizeof(*tr->nreqs));
	tr->drecv = malloc((size_t)gp->mbs * cfg->T * cfg->C * sizeof(float));
	tr->sync_buf = calloc(gp->ngroups, sizeof(*tr->sync_buf));
	if (!tr->slots || !tr->scratch || !tr->reqs || !tr->nreqs ||
	    !tr->drecv || !tr->sync_buf) {
		gpt_trainer_destroy(tr);
		return -ENOMEM;
	}
	for (int g = 0; g < gp->ngroups; g++) {
		const struct gpt_sync_group *sg = &gp->groups[g];

		if (!gpt_group_has(sg, job->rank))
			continue;
		tr->sync_buf[g] = malloc(sg->floats * sizeof(double));
		if (!tr->sync_buf[g]) {
			gpt_trainer_destroy(tr);
			return -ENOMEM;
		}
	}
	return 0;
}

void gpt_trainer_destroy(struct gpt_trainer *tr)
{
	if (tr->gp && tr->sync_buf)
		for (int g = 0; g < tr->gp->ngroups; g++) {
			free(tr->sync_buf[g]);
			if (gpt_group_has(&tr->gp->groups[g], tr->job->rank)) {
				gpt_comm_free(tr->gp->groups[g].comm);
				tr->gp->groups[g].comm = NULL;
			}
		}
	free(tr->sync_buf);
	gpt_comm_free(tr->tp_comm);
	gpt_acts_free(tr->slots, tr->nslots);
	gpt_scratch_free(tr->scratch);
	free(tr->reqs);
	free(tr->nreqs);
	free(tr->drecv);
	gpt_shard_free(&tr->shard);
	memset(tr, 0, sizeof(*tr));
	tr->shard.last = -1;
}

bool gpt_group_has(const struct gpt_sync_group *g, int rank)
{
	for (int i = 0; i < g->nmembers; i++)
		if (g->members[i] == rank)
			return true;
	return false;
}

/*
 * The TP communicator first, then the synchronization groups in the
 * plan's order: every rank makes the ones it belongs to in the same
 * order, so the making of each, collective over the group alone, cannot
 * deadlock.
 */
int gpt_trainer_comms(struct gpt_trainer *tr)
{
	struct gpt_plan *gp = tr->gp;
	int rc;

	if (tr->me.pipe < 0)
		return 0;
	if (tr->tp > 1) {
		trace_comm(tr, "tp", tr->stage->ranks, tr->tp);
		rc = gpt_comm_sub(tr->job->comm, tr->stage->ranks, tr->tp, 0,
				  &tr->tp_comm);
		if (rc < 0)
			return rc;
	}
	for (int g = 0; g < gp->ngroups; g++) {
		struct gpt_sync_group *sg = &gp->groups[g];

		if (!gpt_group_has(sg, tr->job->rank) || sg->nmembers < 2)
			continue;
		trace_comm(tr, "sync", sg->members, sg->nmembers);
		rc = gpt_comm_sub(tr->job->comm, sg->members, sg->nmembers,
				  1 + g, &sg->comm);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* ---------------------------------------------------------------------
 * The 1F1B schedule.
 * ------------------------------------------------------------------- */

static void wait_reqs(struct gpt_trainer *tr, int slot, int dir)
{
	int k = slot * 2 + dir;

	gpt_waitall(tr->nreqs[k], tr->reqs + (size_t)k * COSTMODEL_MAX_TP);
	tr->nreqs[k] = 0;
}

/* Send @buf to every rank of @to whose TP rank is ours modulo our TP degree. */
static void send_to_stage(struct gpt_trainer *tr, int slot, int dir,
			  const float *buf, int count,
			  const struct gpt_stage_info *to, int tag)
{
	int k = slot * 2 + dir;

	for (int r = 0; r < to->tp; r++)
		if (r % tr->tp == tr->tp_rank)
			gpt_isend(tr->job->comm, buf, (size_t)count, GPT_FLOAT,
				  to->ranks[r], tag,
				  &tr->reqs[(size_t)k * COSTMODEL_MAX_TP +
					    tr->nreqs[k]++]);
}

static int micro_batch_size(const struct gpt_trainer *tr, int i)
{
	int left = tr->pipe->samples - i * tr->gp->mbs;

	return left < tr->gp->mbs ? left : tr->gp->mbs;
}

static void forward_one(struct gpt_trainer *tr, const struct gpt_data *data,
			long step, int i)
{
	const struct gpt_config *cfg = &tr->job->cfg;
	const struct gpt_pipe *pp = tr->pipe;
	int s = tr->me.stage, slot = i % tr->nslots;
	struct gpt_acts *a = gpt_acts_slot(tr->slots, slot);
	int B = micro_batch_size(tr, i), count = B * cfg->T * cfg->C;

	wait_reqs(tr, slot, 0);
	gpt_acts_set_batch(a, tr, data, step, pp->sample0 + i * tr->gp->mbs,
			   B);
	if (s > 0) {
		const struct gpt_stage_info *prev = &pp->stages[s - 1];

		gpt_recv(tr->job->comm, gpt_acts_input(a), (size_t)count,
			 GPT_FLOAT, prev->ranks[tr->tp_rank % prev->tp], 2 * i);
	}
	gpt_stage_forward(tr, a);
	if (s < pp->nstages - 1)
		send_to_stage(tr, slot, 0, gpt_acts_output(a, tr), count,
			      &pp->stages[s + 1], 2 * i);
	else
		tr->loss_sum += gpt_acts_loss(a);
}

static void backward_one(struct gpt_trainer *tr, int i)
{
	const struct gpt_config *cfg = &tr->job->cfg;
	const struct gpt_pipe *pp = tr->pipe;
	int s = tr->me.stage, slot = i % tr->nslots;
	struct gpt_acts *a = gpt_acts_slot(tr->slots, slot);
	int count = micro_batch_size(tr, i) * cfg->T * cfg->C;

	if (s < pp->nstages - 1) {
		const struct gpt_stage_info *next = &pp->stages[s + 1];

		gpt_recv(tr->job->comm, tr->drecv, (size_t)count, GPT_FLOAT,
			 next->ranks[tr->tp_rank % next->tp], 2 * i + 1);
	}
	wait_reqs(tr, slot, 1);
	gpt_stage_backward(tr, a, s < pp->nstages - 1 ? tr->drecv : NULL);
	if (s > 0)
		send_to_stage(tr, slot, 1, gpt_acts_dinput(a), count,
			      &pp->stages[s - 1], 2 * i + 1);
}

/* ---------------------------------------------------------------------
 * Gradient synchronization.
 * ------------------------------------------------------------------- */

static double *unit_grad(const struct gpt_trainer *tr, int layer, int unit)
{
	const struct gpt_config *cfg = &tr->job->cfg;
	const struct gpt_shard *sh = &tr->shard;

	if (!gpt_shard_has_layer(sh, layer) || unit < sh->u0 ||
	    unit >= sh->u0 + sh->nu)
		return NULL;
	return sh->grad + sh->g_off[layer - sh->first] +
	       (unit - sh->u0) * cfg->unit_floats[gpt_layer_kind(cfg, layer)];
}

/* The tied rows: the embedding's copy first, then the head's. */
static void tied_grads(const struct gpt_trainer *tr, int unit, double **g)
{
	g[0] = unit_grad(tr, 0, unit);
	g[1] = unit_grad(tr, tr->job->cfg.nlayers - 1, unit);
}

static void pack_item(const struct gpt_trainer *tr,
		      const struct gpt_sync_item *it, double *buf)
{
	size_t n = it->hi - it->lo;

	if (it->layer >= 0) {
		memcpy(buf, unit_grad(tr, it->layer, it->unit) + it->lo,
		       n * sizeof(double));
		return;
	}
	double *g[2];
	bool first = true;

	tied_grads(tr, it->unit, g);
	for (int c = 0; c < 2; c++) {
		if (!g[c])
			continue;
		for (size_t i = 0; i < n; i++)
			buf[i] = first ? g[c][it->lo + i] :
					 buf[i] + g[c][it->lo + i];
		first = false;
	}
}

static void unpack_item(const struct gpt_trainer *tr,
			const struct gpt_sync_item *it, const double *buf)
{
	size_t n = it->hi - it->lo;
	double *g[2] = { NULL, NULL };

	if (it->layer >= 0)
		g[0] = unit_grad(tr, it->layer, it->unit);
	else
		tied_grads(tr, it->unit, g);
	for (int c = 0; c < 2; c++)
		if (g[c])
			memcpy(g[c] + it->lo, buf, n * sizeof(double));
}

/*
 * Sum every group's gradients over its members, in FP64: the terms are
 * FP32 products summed exactly, so the order the sum adds them in does not
 * change the result that AdamW rounds once.
 */
static int sync_grads(struct gpt_trainer *tr)
{
	struct gpt_plan *gp = tr->gp;
	struct gpt_req *req = malloc(gp->ngroups * sizeof(*req));
	int nreq = 0;

	if (!req)
		return -ENOMEM;
	gpt_shard_rep_grad_to_units(&tr->shard, &tr->job->cfg);
	for (int g = 0; g < gp->ngroups; g++) {
		struct gpt_sync_group *sg = &gp->groups[g];
		double *buf = tr->sync_buf[g];

		if (!buf)
			continue;
		for (int i = 0; i < sg->nitems; i++) {
			pack_item(tr, &sg->items[i], buf);
			buf += sg->items[i].hi - sg->items[i].lo;
		}
		if (sg->comm)
			gpt_iallreduce(sg->comm, tr->sync_buf[g], sg->floats,
				       GPT_DOUBLE, GPT_SUM, &req[nreq++]);
	}
	gpt_waitall(nreq, req);
	free(req);
	for (int g = 0; g < gp->ngroups; g++) {
		struct gpt_sync_group *sg = &gp->groups[g];
		const double *buf = tr->sync_buf[g];

		if (!buf)
			continue;
		for (int i = 0; i < sg->nitems; i++) {
			unpack_item(tr, &sg->items[i], buf);
			buf += sg->items[i].hi - sg->items[i].lo;
		}
	}
	return 0;
}

int gpt_trainer_sync_replicated(struct gpt_trainer *tr)
{
	const struct gpt_config *cfg = &tr->job->cfg;
	struct gpt_shard *sh = &tr->shard;
	size_t per_unit = 0, at;
	float *send, *recv;

	if (tr->me.pipe < 0)
		return 0;
	gpt_shard_units_to_rep(sh, cfg);
	if (tr->tp == 1)
		return 0;
	for (int l = sh->first; l <= sh->last; l++)
		for (int p = 0; p < GPT_NUM_PARAMS; p++)
			if (gpt_params[p].replicated &&
			    gpt_params[p].kind == gpt_layer_kind(cfg, l))
				per_unit += cfg->unit_size[p];
	send = malloc(per_unit * sh->nu * sizeof(float));
	recv = malloc(per_unit * cfg->U * sizeof(float));
	if (!send || !recv) {
		free(send);
		free(recv);
		return -ENOMEM;
	}
	/* Unit by unit: TP rank k's units come k-th, as the units go. */
	at = 0;
	for (int j = 0; j < sh->nu; j++)
		for (int l = sh->first; l <= sh->last; l++)
			for (int p = 0; p < GPT_NUM_PARAMS; p++) {
				if (!gpt_params[p].replicated ||
				    gpt_params[p].kind != gpt_layer_kind(cfg, l))
					continue;
				memcpy(send + at, gpt_weight(sh, cfg, l, j, p),
				       cfg->unit_size[p] * sizeof(float));
				at += cfg->unit_size[p];
			}
	gpt_allgather(tr->tp_comm, send, per_unit * sh->nu, GPT_FLOAT, recv);
	at = 0;
	for (int u = 0; u < cfg->U; u++)
		for (int l = sh->first; l <= sh->last; l++)
			for (int p = 0; p < GPT_NUM_PARAMS; p++) {
				size_t n = cfg->unit_size[p];

				if (!gpt_params[p].replicated ||
				    gpt_params[p].kind != gpt_layer_kind(cfg, l))
					continue;
				memcpy(gpt_rep(sh, cfg, l, p) + u * n, recv + at,
				       n * sizeof(float));
				at += n;
			}
	free(send);
	free(recv);
	return 0;
}

int gpt_trainer_step(struct gpt_trainer *tr, const struct gpt_data *data,
		     long step)
{
	int m, warm, rc;

	tr->loss_sum = 0;
	if (tr->me.pipe < 0)
		return 0;
	gpt_shard_zero_grad(&tr->shard, &tr->job->cfg);
	m = tr->pipe->micro_batches;
	warm = tr->pipe->nstages - tr->me.stage - 1;
	if (warm > m)
		warm = m;
	for (int i = 0; i < warm; i++)
		forward_one(tr, data, step, i);
	for (int i = warm; i < m; i++) {
		forward_one(tr, data, step, i);
		backward_one(tr, i - warm);
	}
	for (int i = m - warm; i < m; i++)
		backward_one(tr, i);
	for (int slot = 0; slot < tr->nslots; slot++) {
		wait_reqs(tr, slot, 0);
		wait_reqs(tr, slot, 1);
	}
	rc = sync_grads(tr);
	if (rc < 0)
		return rc;
	gpt_shard_adamw(&tr->shard, &tr->job->cfg, &tr->opt);
	return gpt_trainer_sync_replicated(tr);
}

/*
 * The loss of the step: each pipeline's last stage (its TP rank 0) sends
 * its sum to the reporter, job rank 0, which adds them in pipeline order.
 */
int gpt_trainer_report(struct gpt_trainer *tr, double *loss)
{
	const struct gpt_plan *gp = tr->gp;
	const struct gpt_job *job = tr->job;
	double total = 0;
	bool sender = tr->me.pipe >= 0 &&
		      tr->me.stage == tr->pipe->nstages - 1 &&
		      tr->tp_rank == 0;

	if (sender && job->rank != 0)
		gpt_send(job->comm, &tr->loss_sum, 1, GPT_DOUBLE, 0, TAG_LOSS);
	if (job->rank != 0)
		return 0;
	for (int p = 0; p < gp->npipes; p++) {
		const struct gpt_pipe *pp = &gp->pipes[p];
		int src = pp->stages[pp->nstages - 1].ranks[0];
		double v = tr->loss_sum;

		if (src != job->rank)
			gpt_recv(job->comm, &v, 1, GPT_DOUBLE, src, TAG_LOSS);
		total += v;
	}
	*loss = total / ((double)gp->global_batch * job->cfg.T);
	return 0;
}
