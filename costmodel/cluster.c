/* cluster.c - cluster compositions from and to JSON. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AR_INTERNAL
#include "costmodel_private.h"

#define CLUSTER_MAX_NODES AR_LIMIT_HOSTS	/* docs/limits.md */
#define CLUSTER_MIN_GBPS 0.1
#define CLUSTER_MAX_GBPS 1e5

void costmodel_cluster_free(struct costmodel_cluster *cl)
{
	if (!cl)
		return;
	for (size_t i = 0; i < cl->nnodes; i++)
		free(cl->nodes[i].name);
	free(cl->nodes);
	free(cl->by_name);
	free(cl->by_type);
	free(cl->type_pos);
	free(cl->name);
	free(cl);
}

/* A group's network and intra-node link, as it gives them (0: not given). */
struct node_links {
	int nics;
	double nic_gbps;
	double intra_node_GBps;
};

static int add_node(struct costmodel_cluster *cl, size_t *cap, const char *name,
		    int gpu, int gpus, const struct node_links *links)
{
	if (cl->nnodes >= CLUSTER_MAX_NODES)
		return ar_seterr(-AR_EINVAL, "cluster: more than %d nodes",
				 CLUSTER_MAX_NODES);
	if (AR_GROW(cl->nodes, *cap, cl->nnodes + 1, 16) < 0)
		return -ENOMEM;
	cl->nodes[cl->nnodes].name = strdup(name);
	if (!cl->nodes[cl->nnodes].name)
		return -ENOMEM;
	cl->nodes[cl->nnodes].gpu = gpu;
	cl->nodes[cl->nnodes].gpus = gpus;
	cl->nodes[cl->nnodes].nics = links->nics;
	cl->nodes[cl->nnodes].nic_gbps = links->nic_gbps;
	cl->nodes[cl->nnodes].intra_node_GBps = links->intra_node_GBps;
	cl->nnodes++;
	return 0;
}

static int by_name_cmp(const void *a, const void *b, void *arg)
{
	const struct costmodel_cluster *cl = arg;

	return strcmp(cl->nodes[*(const int *)a].name,
		      cl->nodes[*(const int *)b].name);
}

/* Sort the node names for lookups; a name given twice is an error. */
static int index_names(struct costmodel_cluster *cl)
{
	cl->by_name = malloc((cl->nnodes ? cl->nnodes : 1) * sizeof(int));
	if (!cl->by_name)
		return -ENOMEM;
	for (size_t i = 0; i < cl->nnodes; i++)
		cl->by_name[i] = (int)i;
	qsort_r(cl->by_name, cl->nnodes, sizeof(int), by_name_cmp, cl);
	for (size_t i = 1; i < cl->nnodes; i++)
		if (strcmp(cl->nodes[cl->by_name[i - 1]].name,
			   cl->nodes[cl->by_name[i]].name) == 0)
			return ar_seterr(-AR_EINVAL, "cluster: host \"%s\" appears twice",
					 cl->nodes[cl->by_name[i]].name);
	return 0;
}

int costmodel_cluster_index(struct costmodel_cluster *cl)
{
	size_t n = cl->nnodes ? cl->nnodes : 1;
	int next[COSTMODEL_MAX_GPU_TYPES];

	free(cl->by_type);
	free(cl->type_pos);
	cl->by_type = malloc(n * sizeof(int));
	cl->type_pos = malloc(n * sizeof(int));
	if (!cl->by_type || !cl->type_pos)
		return -ENOMEM;
	memset(cl->type_first, 0, sizeof(cl->type_first));
	for (size_t i = 0; i < cl->nnodes; i++) {
		int g = cl->nodes[i].gpu;

		if (g < 0 || g >= COSTMODEL_MAX_GPU_TYPES)
			return ar_seterr(-AR_EINVAL, "cluster: node \"%s\" has no valid GPU type",
					 cl->nodes[i].name);
		cl->type_first[g + 1]++;
	}
	for (int g = 0; g < COSTMODEL_MAX_GPU_TYPES; g++) {
		cl->type_first[g + 1] += cl->type_first[g];
		next[g] = cl->type_first[g];
	}
	for (size_t i = 0; i < cl->nnodes; i++) {
		int p = next[cl->nodes[i].gpu]++;

		cl->by_type[p] = (int)i;
		cl->type_pos[i] = p;
	}
	return 0;
}

/* The optional network and intra-node link of a node group. */
static int parse_links(const json_t *entry, const char *what,
		       struct node_links *links)
{
	json_t *v;
	int rc;

	memset(links, 0, sizeof(*links));
	/* nic_gbps: the range of inter_node_gbps */
	if ((rc = ar_json_number(entry, "nic_gbps", what, CLUSTER_MIN_GBPS,
				 CLUSTER_MAX_GBPS, false, &links->nic_gbps)) < 0 ||
	    (rc = ar_json_number(entry, "intra_node_GBps", what, 1, 1e4, false,
				 &links->intra_node_GBps)) < 0 ||
	    (rc = ar_json_int(entry, "nics", what, 1, 64, false,
			      &links->nics)) < 0)
		return rc;
	v = json_object_get(entry, "intra_node");
	if (v) {
		if (links->intra_node_GBps > 0)
			return ar_seterr(-AR_EINVAL, "%s: give \"intra_node\" or \"intra_node_GBps\", not both",
					 what);
		if (!json_is_string(v) ||
		    !(links->intra_node_GBps = costmodel_link_class_GBps(json_string_value(v)))) {
			return ar_seterr(-AR_EINVAL, "%s: \"intra_node\" must be one of %s",
					 what, costmodel_link_class_names());
		}
	}
	return 0;
}

int costmodel_cluster_from_json(const struct costmodel *cm, const json_t *root,
				struct costmodel_cluster **clp)
{
	static const char *const top_keys[] = {
		"name", "nodes", "inter_node_gbps", NULL
	};
	static const char *const node_keys[] = {
		"gpu", "gpus_per_node", "count", "hosts", "nics", "nic_gbps",
		"intra_node", "intra_node_GBps", NULL
	};
	struct costmodel_cluster *cl;
	size_t cap = 0, i;
	json_t *nodes, *entry, *v;
	int rc;

	*clp = NULL;
	if (!json_is_object(root))
		return ar_seterr(-AR_EINVAL, "cluster: not a JSON object");
	rc = ar_json_check_keys(root, top_keys, "cluster");
	if (rc < 0)
		return rc;
	cl = calloc(1, sizeof(*cl));
	if (!cl)
		return -ENOMEM;
	v = json_object_get(root, "name");
	if (v && !json_is_string(v)) {
		rc = ar_seterr(-AR_EINVAL, "cluster: \"name\" must be a string");
		goto err;
	}
	cl->name = strdup(v ? json_string_value(v) : "cluster");
	if (!cl->name) {
		rc = -ENOMEM;
		goto err;
	}
	/* The range GPU profiles' network_gbps has: a link, not a rounding. */
	rc = ar_json_number(root, "inter_node_gbps", "cluster", CLUSTER_MIN_GBPS,
			    CLUSTER_MAX_GBPS, false, &cl->inter_node_gbps);
	if (rc < 0)
		goto err;
	nodes = json_object_get(root, "nodes");
	if (!json_is_array(nodes) || json_array_size(nodes) == 0) {
		rc = ar_seterr(-AR_EINVAL, "cluster: \"nodes\" must be a non-empty array");
		goto err;
	}
	json_array_foreach(nodes, i, entry) {
		char what[64];
		const char *gpu_name;
		int64_t per_node, count;
		struct node_links links;
		int gpu;

		snprintf(what, sizeof(what), "cluster: nodes[%zu]", i);
		if (!json_is_object(entry)) {
			rc = ar_seterr(-AR_EINVAL, "%s: not an object", what);
			goto err;
		}
		if ((rc = ar_json_check_keys(entry, node_keys, what)) < 0)
			goto err;
		v = json_object_get(entry, "gpu");
		if (!json_is_string(v)) {
			rc = ar_seterr(-AR_EINVAL, "%s: \"gpu\" must name a GPU profile",
				       what);
			goto err;
		}
		gpu_name = json_string_value(v);
		gpu = costmodel_gpu_find(cm, gpu_name);
		if (gpu < 0) {
			rc = ar_seterr(-AR_EINVAL, "%s: unknown GPU \"%s\" (no %s/gpus/%s.ini)",
				       what, gpu_name, cm->profiles_dir, gpu_name);
			goto err;
		}
		if ((rc = ar_json_int64(entry, "gpus_per_node", what, 1,
					COSTMODEL_MAX_NODE_GPUS, true, &per_node)) < 0)
			goto err;
		if ((rc = parse_links(entry, what, &links)) < 0)
			goto err;
		if (json_object_get(entry, "count") && json_object_get(entry, "hosts")) {
			rc = ar_seterr(-AR_EINVAL, "%s: give \"count\" or \"hosts\", not both",
				       what);
			goto err;
		}
		v = json_object_get(entry, "hosts");
		if (v) {
			char **hosts;
			size_t nhosts;

			if (!json_is_string(v)) {
				rc = ar_seterr(-AR_EINVAL, "%s: \"hosts\" must be a Slurm hostlist string",
					       what);
				goto err;
			}
			rc = ar_hostlist_expand(json_string_value(v), &hosts, &nhosts);
			if (rc < 0) {
				ar_seterr(rc, "%s: %s", what, ar_errmsg());
				goto err;
			}
			for (size_t h = 0; h < nhosts && rc == 0; h++)
				rc = add_node(cl, &cap, hosts[h], gpu,
					      (int)per_node, &links);
			ar_hostlist_free(hosts);
			if (rc < 0)
				goto err;
			continue;
		}
		if ((rc = ar_json_int64(entry, "count", what, 1, CLUSTER_MAX_NODES,
					true, &count)) < 0)
			goto err;
		for (int64_t c = 0; c < count; c++) {
			char name[96];

			/* Anonymous nodes: entry index keeps names unique. */
			snprintf(name, sizeof(name), "%s-%zu-%04" PRId64, gpu_name, i, c);
			if ((rc = add_node(cl, &cap, name, gpu, (int)per_node,
					   &links)) < 0)
				goto err;
		}
	}
	if ((rc = index_names(cl)) < 0 || (rc = costmodel_cluster_index(cl)) < 0)
		goto err;
	*clp = cl;
	return 0;
err:
	costmodel_cluster_free(cl);
	return rc;
}

int costmodel_cluster_load(const struct costmodel *cm, const char *path,
			   struct costmodel_cluster **clp)
{
	json_t *root = ar_json_load_file(path);
	int rc;

	*clp = NULL;
	if (!root)
		return -AR_EINVAL;
	rc = costmodel_cluster_from_json(cm, root, clp);
	if (rc < 0 && rc != -ENOMEM)
		ar_seterr(rc, "%s: %s", path, ar_errmsg());
	json_decref(root);
	return rc;
}

json_t *costmodel_cluster_to_json(const struct costmodel *cm,
				  const struct costmodel_cluster *cl)
{
	json_t *root = json_object(), *nodes = json_array();

	if (!root || !nodes)
		goto err;
	json_object_set_new(root, "name", json_string(cl->name));
	for (size_t i = 0; i < cl->nnodes; i++) {
		const struct costmodel_node *n = &cl->nodes[i];
		json_t *e = json_pack("{s:s, s:i, s:s}",
				      "gpu", cm->gpus[n->gpu].name,
				      "gpus_per_node", n->gpus,
				      "hosts", n->name);

		if (e && n->nics > 0)
			json_object_set_new(e, "nics", json_integer(n->nics));
		if (e && n->nic_gbps > 0)
			json_object_set_new(e, "nic_gbps", json_real(n->nic_gbps));
		if (e && n->intra_node_GBps > 0)
			json_object_set_new(e, "intra_node_GBps",
					    json_real(n->intra_node_GBps));
		if (!e || json_array_append_new(nodes, e) < 0)
			goto err;
	}
	json_object_set_new(root, "nodes", nodes);
	nodes = NULL;
	if (cl->inter_node_gbps > 0)
		json_object_set_new(root, "inter_node_gbps",
				    json_real(cl->inter_node_gbps));
	return root;
err:
	json_decref(nodes);
	json_decref(root);
	return NULL;
}

int costmodel_cluster_total_gpus(const struct costmodel_cluster *cl)
{
	int n = 0;

	for (size_t i = 0; i < cl->nnodes; i++)
		n += cl->nodes[i].gpus;
	return n;
}

int costmodel_cluster_node_find(const struct costmodel_cluster *cl,
				const char *name)
{
	if (cl->by_name) {
		size_t lo = 0, hi = cl->nnodes;

		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			int c = strcmp(cl->nodes[cl->by_name[mid]].name, name);

			if (c == 0)
				return cl->by_name[mid];
			if (c < 0)
				lo = mid + 1;
			else
				hi = mid;
		}
		return -1;
	}
	for (size_t i = 0; i < cl->nnodes; i++)
		if (strcmp(cl->nodes[i].name, name) == 0)
			return (int)i;
	return -1;
}

double costmodel_node_network_gbps(const struct costmodel *cm,
				   const struct costmodel_cluster *cl, int node)
{
	const struct costmodel_node *n = &cl->nodes[node];
	double link = n->nic_gbps > 0 ? n->nic_gbps :
		      cl->inter_node_gbps > 0 ? cl->inter_node_gbps :
		      cm->gpus[n->gpu].network_gbps;

	return (n->nics > 0 ? n->nics : 1) * link;
}

double costmodel_node_intra_GBps(const struct costmodel *cm,
				 const struct costmodel_cluster *cl, int node)
{
	const struct costmodel_node *n = &cl->nodes[node];

	return n->intra_node_GBps > 0 ? n->intra_node_GBps :
	       cm->gpus[n->gpu].intra_node_GBps;
}

