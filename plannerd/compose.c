/* compose.c - site map and local hardware applied to a composition. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>

#include "ar.h"
#include "compose.h"

/*
 * Host numbers longer than Slurm's (9 digits) are refused before the
 * hostlist is expanded: ar_hostlist_expand() overflows on them (a range
 * ending at ULONG_MAX never ends), and no request may make the daemon
 * allocate without bound.
 */
static int compose_hosts_check(const char *hosts, size_t entry)
{
	size_t run = 0;

	for (; *hosts; hosts++) {
		run = isdigit((unsigned char)*hosts) ? run + 1 : 0;
		if (run > 9)
			return ar_seterr(-AR_EINVAL, "cluster node entry %zu: hosts: a host number longer than 9 digits",
					 entry);
	}
	return 0;
}

/* The GPU profile every host of @hosts maps to, or NULL with the error. */
static const char *compose_node_gpu(const struct conf *conf, char **hosts,
				    size_t n, size_t entry)
{
	const char *gpu = NULL;

	for (size_t i = 0; i < n; i++) {
		const char *g = conf_map_node(conf, hosts[i]);

		if (!g) {
			ar_seterr(-AR_EINVAL, "cluster node entry %zu: no gpu given and no node_map rule matches host %s",
				  entry, hosts[i]);
			return NULL;
		}
		if (gpu && strcmp(gpu, g) != 0) {
			ar_seterr(-AR_EINVAL, "cluster node entry %zu: no gpu given and node_map maps its hosts to both %s and %s; split the entry",
				  entry, gpu, g);
			return NULL;
		}
		gpu = g;
	}
	return gpu;
}

/*
 * Check or complete the GPU count of an entry that holds this host, and
 * its count of network adapters where it has a rate but no count.
 */
static int compose_local(const struct topo *topo, json_t *node, size_t entry)
{
	json_t *per = json_object_get(node, "gpus_per_node");
	int rc = 0;

	if (!per) {
		if (topo->ngpus == 0)
			return ar_seterr(-AR_EINVAL, "cluster node entry %zu: no gpus_per_node given and hwloc finds no GPU on %s (%s)",
					 entry, topo->hostname, topo->source);
		rc = json_object_set_new(node, "gpus_per_node",
					 json_integer(topo->ngpus));
	} else if (topo->ngpus > 0 && json_is_integer(per) &&
		   json_integer_value(per) != topo->ngpus) {
		return ar_seterr(-AR_EINVAL, "cluster node entry %zu: gpus_per_node is %lld but hwloc finds %d GPUs on %s (%s)",
				 entry, (long long)json_integer_value(per),
				 topo->ngpus, topo->hostname, topo->source);
	}
	/* hwloc counts the adapters; their rate must come from elsewhere. */
	if (rc == 0 && topo->nics > 0 && json_object_get(node, "nic_gbps") &&
	    !json_object_get(node, "nics"))
		rc = json_object_set_new(node, "nics", json_integer(topo->nics));
	return rc < 0 ? -ENOMEM : 0;
}

/*
 * The network and intra-node link that node_map gives @hosts, into the
 * entry where it gives none of its own; every host must get the same.
 */
static int compose_links(const struct conf *conf, char **hosts, size_t n,
			 json_t *node, size_t entry)
{
	const struct conf_map *first = NULL;

	for (size_t i = 0; i < n; i++) {
		const struct conf_map *m = conf_map_node_links(conf, hosts[i]);

		if (i == 0) {
			first = m;
		} else if ((m == NULL) != (first == NULL) ||
			   (m && (m->nics != first->nics || m->nic_gbps != first->nic_gbps ||
				  (m->intra_node == NULL) != (first->intra_node == NULL) ||
				  (m->intra_node && strcmp(m->intra_node, first->intra_node))))) {
			return ar_seterr(-AR_EINVAL, "cluster node entry %zu: node_map gives its hosts %s and %s different links; split the entry",
					 entry, hosts[0], hosts[i]);
		}
	}
	if (!first)
		return 0;
	if (first->nics && !json_object_get(node, "nics"))
		json_object_set_new(node, "nics", json_integer(first->nics));
	if (first->nic_gbps > 0 && !json_object_get(node, "nic_gbps"))
		json_object_set_new(node, "nic_gbps", json_real(first->nic_gbps));
	if (first->intra_node && !json_object_get(node, "intra_node") &&
	    !json_object_get(node, "intra_node_GBps"))
		json_object_set_new(node, "intra_node", json_string(first->intra_node));
	return 0;
}

static int compose_entry(const struct conf *conf, const struct topo *topo,
			 json_t *node, size_t entry)
{
	json_t *gpu = json_object_get(node, "gpu");
	json_t *hosts = json_object_get(node, "hosts");
	char **names = NULL;
	size_t n = 0;
	int rc = 0;

	if (!json_is_object(node))
		return ar_seterr(-AR_EINVAL, "cluster node entry %zu: expected an object",
				 entry);
	if (json_is_string(gpu)) {
		const char *mapped = conf_map_gres(conf, json_string_value(gpu));

		if (mapped)
			json_object_set_new(node, "gpu", json_string(mapped));
	}
	if (!json_is_string(hosts))
		return gpu ? 0 : ar_seterr(-AR_EINVAL, "cluster node entry %zu: no gpu and no hosts to map one from",
					   entry);
	rc = compose_hosts_check(json_string_value(hosts), entry);
	if (rc < 0)
		return rc;
	rc = ar_hostlist_expand(json_string_value(hosts), &names, &n);
	if (rc < 0)
		return ar_seterr(rc, "cluster node entry %zu: hosts: %s", entry,
				 ar_errmsg());
	if (!gpu) {
		const char *g = compose_node_gpu(conf, names, n, entry);

		if (!g) {
			rc = -AR_EINVAL;
			goto out;
		}
		json_object_set_new(node, "gpu", json_string(g));
	}
	rc = compose_links(conf, names, n, node, entry);
	if (rc < 0)
		goto out;
	for (size_t i = 0; topo && i < n; i++) {
		if (strcmp(names[i], topo->hostname) == 0) {
			rc = compose_local(topo, node, entry);
			break;
		}
	}
out:
	ar_hostlist_free(names);
	return rc;
}

int compose_normalize(const struct conf *conf, const struct topo *topo,
		      const json_t *in, json_t **outp)
{
	json_t *out, *nodes;
	size_t i;
	int rc = 0;

	*outp = NULL;
	out = json_deep_copy(in);
	if (!out)
		return -ENOMEM;
	nodes = json_object_get(out, "nodes");
	if (!json_is_array(nodes) || json_array_size(nodes) == 0) {
		rc = ar_seterr(-AR_EINVAL, "cluster: \"nodes\" must be a non-empty array");
		goto err;
	}
	for (i = 0; i < json_array_size(nodes); i++) {
		rc = compose_entry(conf, topo, json_array_get(nodes, i), i + 1);
		if (rc < 0)
			goto err;
	}
	if (!json_object_get(out, "inter_node_gbps") &&
	    conf->inter_node_gbps > 0)
		json_object_set_new(out, "inter_node_gbps",
				    json_real(conf->inter_node_gbps));
	*outp = out;
	return 0;
err:
	json_decref(out);
	return rc;
}
