/*
 * topo.h - the local node as hwloc sees it: its name, its GPUs (PCI
 * display and 3D controllers of GPU vendors, with their NUMA node) and its
 * network adapters (OpenFabrics devices), read once at start from the
 * running system or from an XML topology file.
 */
#ifndef PLANNERD_TOPO_H
#define PLANNERD_TOPO_H

#include <jansson.h>

#define TOPO_MAX_GPUS	64

struct topo_gpu {
	char busid[16];			/* "0000:01:00.0" */
	char model[64];			/* "NVIDIA H100 80GB HBM3", or "" */
	int numa;			/* NUMA node, -1 when unknown */
};

struct topo {
	char hostname[256];		/* short name: up to the first '.' */
	int nics;			/* InfiniBand/RoCE HCAs (OpenFabrics devices) */
	int ngpus;
	struct topo_gpu gpus[TOPO_MAX_GPUS];
	char source[256];		/* "this system" or the XML path */
};

/*
 * topo_load() - fill @topo from @xml_path (NULL: this system).  The host
 * name is the XML's HostName, else gethostname().  Returns 0 or -AR_EINVAL
 * naming the file.
 */
int topo_load(const char *xml_path, struct topo *topo);

/* topo_to_json() - {"hostname":..., "gpus":N, "devices":[...]}. */
json_t *topo_to_json(const struct topo *topo);

#endif /* PLANNERD_TOPO_H */
