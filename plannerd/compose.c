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

/* Check or complete the GPU count of an entry that holds this host. */
static int compose_local(const struct topo *topo, json_t *node, size_t entry)
{
	json_t *per = json_object_get(node, "gpus_per_node");

	if (!per) {
		if (topo->ngpus == 0)
			return ar_seterr(-AR_EINVAL, "cluster node entry %zu: no gpus_per_node given and hwloc finds no GPU on %s (%s)",
					 entry, topo->hostname, topo->source);
		return json_object_set_new(node, "gpus_per_node",
					   json_integer(topo->ngpus));
	}
	if (topo->ngpus > 0 && json_is_integer(per) &&
	    json_integer_value(per) != topo->ngpus)
		return ar_seterr(-AR_EINVAL, "cluster node entry %zu: gpus_per_node is %lld but hwloc finds %d GPUs on %s (%s)",
				 entry, (long long)json_integer_value(per),
				 topo->ngpus, topo->hostname, topo->source);
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
