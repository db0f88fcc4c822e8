/*
 * migration.c - a replan's migration through libarachne-migrate.
 *
 * The old plan lives on the old composition and the new plan on the new
 * one; migrate_diff_costmodel() wants both on one cluster, so the union
 * (every node of the new composition, then the nodes only the old one
 * had) is built and both plans are placed on it by node name.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "ar.h"
#include "migrate.h"
#include "migration.h"

static int migration_node_add(const struct costmodel *cm, json_t *nodes,
			      const struct costmodel_node *n)
{
	return json_array_append_new(nodes, json_pack("{s:s, s:i, s:s}",
		"gpu", costmodel_gpu(cm, n->gpu)->name,
		"gpus_per_node", n->gpus, "hosts", n->name));
}

/* The union of @a and @b (a's nodes first), in *@clp. */
static int migration_union(const struct costmodel *cm,
			   const struct costmodel_cluster *a,
			   const struct costmodel_cluster *b,
			   struct costmodel_cluster **clp)
{
	json_t *nodes = json_array(), *root;
	int rc = 0;

	for (size_t i = 0; nodes && rc == 0 && i < a->nnodes; i++)
		rc = migration_node_add(cm, nodes, &a->nodes[i]);
	for (size_t i = 0; nodes && rc == 0 && i < b->nnodes; i++)
		if (costmodel_cluster_node_find(a, b->nodes[i].name) < 0)
			rc = migration_node_add(cm, nodes, &b->nodes[i]);
	root = nodes && rc == 0 ? json_pack("{s:s, s:o}", "name", "replan",
					    "nodes", nodes) : NULL;
	if (!root) {
		json_decref(nodes);
		return -ENOMEM;
	}
	if (a->inter_node_gbps > 0)
		json_object_set_new(root, "inter_node_gbps",
				    json_real(a->inter_node_gbps));
	rc = costmodel_cluster_from_json(cm, root, clp);
	json_decref(root);
	return rc;
}

/* @plan (on @cl) placed on @onto by node name, in *@outp. */
static int migration_place(const struct costmodel *cm,
			   const struct costmodel_cluster *cl,
			   const struct costmodel_plan *plan,
			   const struct costmodel_cluster *onto,
			   struct costmodel_plan **outp)
{
	json_t *j = costmodel_plan_to_json(cm, cl, plan);
	int rc;

	if (!j)
		return -ENOMEM;
	rc = costmodel_plan_from_json(cm, onto, j, outp);
	json_decref(j);
	return rc;
}

int migration_estimate(const struct costmodel *cm,
		       const struct costmodel_cluster *old_cl,
		       const struct costmodel_plan *old,
		       const struct costmodel_cluster *new_cl,
		       const struct costmodel_plan *new,
		       struct migration *mig)
{
	struct costmodel_plan *old_u = NULL, *new_u = NULL;
	struct costmodel_cluster *all = NULL;
	struct migrate *m = NULL;
	int rc;

	memset(mig, 0, sizeof(*mig));
	rc = migration_union(cm, new_cl, old_cl, &all);
	if (rc == 0)
		rc = migration_place(cm, old_cl, old, all, &old_u);
	if (rc == 0)
		rc = migration_place(cm, new_cl, new, all, &new_u);
	if (rc == 0)
		rc = migrate_diff_costmodel(cm, all, old_u, new_u, NULL, &m);
	if (rc < 0) {
		ar_seterr(rc, "migration: %s", ar_errmsg());
		goto out;
	}
	mig->bytes = (double)m->stats.bytes_moved;
	mig->stop_s = m->stats.time_s;
	mig->json = migrate_to_json(m);
	if (!mig->json)
		rc = -ENOMEM;
out:
	migrate_free(m);
	costmodel_plan_free(old_u);
	costmodel_plan_free(new_u);
	costmodel_cluster_free(all);
	return rc;
}

void migration_fini(struct migration *mig)
{
	json_decref(mig->json);
	mig->json = NULL;
}
