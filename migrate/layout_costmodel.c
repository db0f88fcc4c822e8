/*
 * layout_costmodel.c - the state layout and the topology derived from the
 * cost model's profiles and a cluster composition.  The only file of the
 * library that calls into libarachne.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define AR_INTERNAL
#include "migrate_private.h"

/*
 * Achieved over nominal link bandwidth: the cost model's factor
 * (docs/costmodel.md), so migration times and iteration times agree.
 */
#define LINK_EFFICIENCY		0.8

/* Bytes of state per parameter that are weights and gradients. */
#define WEIGHT_BYTES_PER_PARAM	2.0	/* BF16 */

/*
 * Parameters of one layer type: BF16 weight bytes at TP 1 over 2, or at
 * the smallest TP degree any GPU profiles times that degree.  The count
 * does not depend on the GPU, so the first GPU with an entry answers.
 */
static int layer_params(const struct costmodel *cm,
			enum costmodel_layer_type type, double *params)
{
	static const int tps[COSTMODEL_NUM_TP] = { 1, 2, 4, 8 };
	static const int mbss[COSTMODEL_NUM_MBS] = { 1, 2, 4, 8, 16 };
	int ngpus = costmodel_num_gpus(cm);

	for (int t = 0; t < COSTMODEL_NUM_TP; t++) {
		for (int g = 0; g < ngpus; g++) {
			for (int b = 0; b < COSTMODEL_NUM_MBS; b++) {
				const struct costmodel_layer_profile *p =
					costmodel_profile(cm, g, tps[t],
							  mbss[b], type);

				if (p && p->present) {
					*params = p->param_bytes * tps[t] /
						  WEIGHT_BYTES_PER_PARAM;
					return 0;
				}
			}
		}
	}
	return ar_seterr(-AR_ENOPROFILE,
			 "migrate: no layer profile of type %d gives the parameter count",
			 (int)type);
}

/* Weight, gradient and optimizer bytes as the model profile counts them. */
static void set_kinds(uint64_t *bytes, double params,
		      const struct costmodel_model *model)
{
	bytes[MIGRATE_KIND_WEIGHT] =
		(uint64_t)(params * WEIGHT_BYTES_PER_PARAM);
	bytes[MIGRATE_KIND_GRAD] = (uint64_t)(params * model->grad_bytes_per_param);
	bytes[MIGRATE_KIND_OPTIM] =
		(uint64_t)(params * model->optimizer_bytes_per_param);
}

int migrate_layout_from_costmodel(const struct costmodel *cm,
				  struct migrate_layout **layoutp)
{
	const struct costmodel_model *model = costmodel_model(cm);
	int nlayers = costmodel_num_layers(cm);
	struct migrate_layout *layout;
	int rc;

	*layoutp = NULL;
	layout = migrate_layout_create(nlayers);
	if (!layout)
		return -errno;

	for (int l = 0; l < nlayers; l++) {
		struct migrate_layer *ly = &layout->layers[l];
		enum costmodel_layer_type type;
		double params;

		if (l == 0)
			type = COSTMODEL_LAYER_EMBED;
		else if (l == nlayers - 1)
			type = COSTMODEL_LAYER_HEAD;
		else if (costmodel_layer_is_moe(cm, l))
			type = COSTMODEL_LAYER_ATTN;
		else
			type = COSTMODEL_LAYER_BLOCK;

		rc = layer_params(cm, type, &params);
		if (rc < 0)
			goto err;
		set_kinds(&ly->bytes[MIGRATE_PART_DENSE * MIGRATE_NUM_KINDS],
			  params, model);

		if (type != COSTMODEL_LAYER_ATTN || model->experts <= 0)
			continue;
		rc = layer_params(cm, COSTMODEL_LAYER_EXPERT, &params);
		if (rc < 0)
			goto err;
		set_kinds(&ly->bytes[MIGRATE_PART_EXPERT * MIGRATE_NUM_KINDS],
			  params, model);
		ly->experts = model->experts;
	}
	*layoutp = layout;
	return 0;

err:
	migrate_layout_free(layout);
	return rc;
}

int migrate_topo_from_cluster(const struct costmodel *cm,
			      const struct costmodel_cluster *cl,
			      struct migrate_topo **topop)
{
	struct migrate_topo *topo;

	*topop = NULL;
	topo = migrate_topo_create((int)cl->nnodes);
	if (!topo)
		return -errno;

	for (size_t n = 0; n < cl->nnodes; n++) {
		const struct costmodel_node *cn = &cl->nodes[n];
		const struct costmodel_gpu *gpu = costmodel_gpu(cm, cn->gpu);
		struct migrate_node *mn = &topo->nodes[n];

		if (!gpu) {
			migrate_topo_free(topo);
			return ar_seterr(-AR_EINVAL,
					 "migrate: node %s has unknown GPU type %d",
					 cn->name, cn->gpu);
		}
		snprintf(mn->name, sizeof(mn->name), "%s", cn->name);
		mn->gpus = cn->gpus;
		mn->intra_GBps = costmodel_node_intra_GBps(cm, cl, (int)n) *
				 LINK_EFFICIENCY;
		mn->nic_GBps = costmodel_node_network_gbps(cm, cl, (int)n) / 8.0 *
			       LINK_EFFICIENCY;
	}
	*topop = topo;
	return 0;
}

int migrate_diff_costmodel(const struct costmodel *cm,
			   const struct costmodel_cluster *cl,
			   const struct costmodel_plan *old_plan,
			   const struct costmodel_plan *new_plan,
			   const struct migrate_opts *opts, struct migrate **mp)
{
	struct migrate_layout *layout = NULL;
	struct migrate_topo *topo = NULL;
	int rc;

	*mp = NULL;
	rc = migrate_layout_from_costmodel(cm, &layout);
	if (!rc)
		rc = migrate_topo_from_cluster(cm, cl, &topo);
	if (!rc)
		rc = migrate_diff(layout, topo, old_plan, new_plan, opts, mp);
	migrate_layout_free(layout);
	migrate_topo_free(topo);
	return rc;
}
