/*
 * migration.c - a layer-level estimate of a plan change.
 *
 * Every GPU group of the new plan needs the state (weights, gradients,
 * optimizer) of its layers at its TP degree.  A layer it already held in
 * the old plan (same node, same GPUs, same TP) stays; any other layer
 * comes from an old holder, one on the same node when there is one.  The
 * stop is the busiest node's transfer time: network bytes in or out at
 * the node's network bandwidth, plus intra-node bytes at the GPUs' link
 * bandwidth.  Consecutive layers between the same groups form one tuple.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ar.h"
#include "migration.h"

struct migration_holder {
	const struct costmodel_stage *stage;
	const struct costmodel_group *group;
};

static bool migration_same_group(const struct costmodel_cluster *a_cl,
				  const struct costmodel_group *a, int a_tp,
				  const struct costmodel_cluster *b_cl,
				  const struct costmodel_group *b, int b_tp)
{
	if (a_tp != b_tp || strcmp(a_cl->nodes[a->node].name,
				    b_cl->nodes[b->node].name) != 0)
		return false;
	return memcmp(a->gpu, b->gpu, (size_t)a_tp) == 0;
}

/* Bytes of state one GPU of a TP-@tp group holds for @layer. */
static double migration_layer_bytes(const struct costmodel *cm, int gpu,
				    int tp, int layer)
{
	const struct costmodel_model *m = costmodel_model(cm);
	const struct costmodel_layer_profile *p = NULL;

	if (layer == 0)
		p = costmodel_profile(cm, gpu, tp, 1, COSTMODEL_LAYER_EMBED);
	else if (layer == costmodel_num_layers(cm) - 1)
		p = costmodel_profile(cm, gpu, tp, 1, COSTMODEL_LAYER_HEAD);
	else
		return costmodel_block_state_bytes(cm, gpu, tp);
	/* profiles hold BF16 weights: 2 bytes a parameter */
	return p ? p->param_bytes / 2.0 * m->state_bytes_per_param : 0;
}

/* An old holder of @layer, preferring one on node @name. */
static bool migration_source(const struct costmodel_cluster *old_cl,
			     const struct costmodel_plan *old, int layer,
			     const char *name, struct migration_holder *h)
{
	bool found = false;

	for (int t = 0; t < old->ntemplates; t++) {
		const struct costmodel_template *tp = &old->templates[t];

		for (int r = 0; r < tp->replicas; r++) {
			for (int s = 0; s < tp->nstages; s++) {
				const struct costmodel_stage *st = &tp->stages[s];
				const struct costmodel_group *g =
					&tp->placement[r * tp->nstages + s];

				if (layer < st->first_layer ||
				    layer > st->last_layer)
					continue;
				if (!found || strcmp(old_cl->nodes[g->node].name,
						     name) == 0) {
					h->stage = st;
					h->group = g;
					found = true;
				}
				if (strcmp(old_cl->nodes[g->node].name, name) == 0)
					return true;
			}
		}
	}
	return found;
}

/* Layer @layer is already where group @g of stage @st needs it. */
static bool migration_is_held(const struct costmodel_cluster *old_cl,
			      const struct costmodel_plan *old,
			      const struct costmodel_cluster *new_cl,
			      const struct costmodel_stage *st,
			      const struct costmodel_group *g, int layer)
{
	for (int t = 0; t < old->ntemplates; t++) {
		const struct costmodel_template *tp = &old->templates[t];

		for (int r = 0; r < tp->replicas; r++)
			for (int s = 0; s < tp->nstages; s++) {
				const struct costmodel_stage *os = &tp->stages[s];

				if (layer >= os->first_layer &&
				    layer <= os->last_layer &&
				    migration_same_group(old_cl,
					&tp->placement[r * tp->nstages + s],
					os->tp, new_cl, g, st->tp))
					return true;
			}
	}
	return false;
}

static json_t *migration_group_json(const struct costmodel_cluster *cl,
				    const struct costmodel_group *g, int tp)
{
	json_t *gpus = json_array();

	for (int i = 0; gpus && i < tp; i++)
		json_array_append_new(gpus, json_integer(g->gpu[i]));
	return json_pack("{s:s, s:o}", "node", cl->nodes[g->node].name,
			 "gpus", gpus ? gpus : json_array());
}

struct migration_node {
	double net_in, net_out, local;	/* bytes */
};

int migration_estimate(const struct costmodel *cm,
		       const struct costmodel_cluster *old_cl,
		       const struct costmodel_plan *old,
		       const struct costmodel_cluster *new_cl,
		       const struct costmodel_plan *new,
		       struct migration *mig)
{
	struct migration_node *in_new = NULL, *in_old = NULL;
	json_t *tuples = json_array(), *last = NULL;
	const struct costmodel_group *last_from = NULL, *last_to = NULL;
	int rc = 0;

	memset(mig, 0, sizeof(*mig));
	in_new = calloc(new_cl->nnodes ? new_cl->nnodes : 1, sizeof(*in_new));
	in_old = calloc(old_cl->nnodes ? old_cl->nnodes : 1, sizeof(*in_old));
	if (!tuples || !in_new || !in_old) {
		rc = -ENOMEM;
		goto out;
	}
	for (int t = 0; t < new->ntemplates; t++) {
		const struct costmodel_template *tp = &new->templates[t];

		for (int r = 0; r < tp->replicas; r++) {
			for (int s = 0; s < tp->nstages; s++) {
				const struct costmodel_stage *st = &tp->stages[s];
				const struct costmodel_group *g =
					&tp->placement[r * tp->nstages + s];
				const char *name = new_cl->nodes[g->node].name;

				for (int l = st->first_layer; l <= st->last_layer; l++) {
					struct migration_holder h;
					double b;
					bool local;

					if (migration_is_held(old_cl, old, new_cl, st, g, l) ||
					    !migration_source(old_cl, old, l, name, &h))
						continue;
					b = migration_layer_bytes(cm, st->gpu, st->tp, l) *
					    st->tp;
					local = strcmp(old_cl->nodes[h.group->node].name,
						       name) == 0;
					mig->bytes += b;
					if (local) {
						in_new[g->node].local += b;
					} else {
						in_new[g->node].net_in += b;
						in_old[h.group->node].net_out += b;
					}
					if (last && last_from == h.group && last_to == g) {
						json_t *ls = json_object_get(last, "layers");

						json_array_set_new(ls, 1, json_integer(l));
						json_object_set_new(last, "bytes", json_real(
							json_real_value(json_object_get(last, "bytes")) + b));
						continue;
					}
					last = json_pack("{s:[i,i], s:o, s:o, s:f}",
							 "layers", l, l,
							 "from", migration_group_json(old_cl, h.group,
										      h.stage->tp),
							 "to", migration_group_json(new_cl, g, st->tp),
							 "bytes", b);
					if (!last || json_array_append_new(tuples, last) < 0) {
						rc = -ENOMEM;
						goto out;
					}
					last_from = h.group;
					last_to = g;
				}
			}
		}
	}
	for (size_t n = 0; n < new_cl->nnodes; n++) {
		const struct costmodel_gpu *gpu = costmodel_gpu(cm, new_cl->nodes[n].gpu);
		double gbps = new_cl->inter_node_gbps > 0 ?
			      new_cl->inter_node_gbps : gpu->network_gbps;
		double t = in_new[n].net_in / (gbps * 1e9 / 8) +
			   in_new[n].local / (gpu->intra_node_GBps * 1e9);

		if (t > mig->stop_s)
			mig->stop_s = t;
	}
	for (size_t n = 0; n < old_cl->nnodes; n++) {
		const struct costmodel_gpu *gpu = costmodel_gpu(cm, old_cl->nodes[n].gpu);
		double gbps = old_cl->inter_node_gbps > 0 ?
			      old_cl->inter_node_gbps : gpu->network_gbps;
		double t = in_old[n].net_out / (gbps * 1e9 / 8);

		if (t > mig->stop_s)
			mig->stop_s = t;
	}
	mig->json = json_pack("{s:O, s:f, s:f, s:s}", "tuples", tuples,
			      "bytes", mig->bytes, "stop_s", mig->stop_s,
			      "source", "plannerd layer estimate");
	if (!mig->json)
		rc = -ENOMEM;
out:
	json_decref(tuples);
	free(in_new);
	free(in_old);
	return rc;
}

void migration_fini(struct migration *mig)
{
	json_decref(mig->json);
	mig->json = NULL;
}
