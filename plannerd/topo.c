/* topo.c - hwloc: the local node's name and GPUs. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <hwloc.h>

#include "ar.h"
#include "topo.h"

/*
 * A GPU is a PCI 3D controller (class 0x0302, what data-centre GPUs are),
 * or a VGA/display controller from a GPU vendor; a server's BMC VGA chip
 * (ASPEED, Matrox) is neither.
 */
static bool topo_pci_is_gpu(const hwloc_obj_t obj)
{
	unsigned int cls = obj->attr->pcidev.class_id;
	unsigned int vendor = obj->attr->pcidev.vendor_id;

	if (cls == 0x0302)
		return true;
	return (cls >> 8) == 0x03 && (vendor == 0x10de || vendor == 0x1002);
}

/* The GPU model from an OS device child (CUDA/NVML/RSMI), else PCI name. */
static void topo_gpu_model(hwloc_obj_t pci, char *buf, size_t len)
{
	const char *name = NULL;

	for (hwloc_obj_t c = pci->io_first_child; c && !name; c = c->next_sibling)
		if (c->type == HWLOC_OBJ_OS_DEVICE)
			name = hwloc_obj_get_info_by_name(c, "GPUModel");
	if (!name)
		name = hwloc_obj_get_info_by_name(pci, "PCIDevice");
	snprintf(buf, len, "%s", name ? name : "");
}

static int topo_numa_of(hwloc_topology_t t, hwloc_obj_t obj)
{
	hwloc_obj_t parent = hwloc_get_non_io_ancestor_obj(t, obj);

	if (!parent || !parent->nodeset)
		return -1;
	if (hwloc_bitmap_weight(parent->nodeset) != 1)
		return -1;
	return hwloc_bitmap_first(parent->nodeset);
}

int topo_load(const char *xml_path, struct topo *topo)
{
	hwloc_topology_t t;
	hwloc_obj_t obj = NULL;
	const char *host;
	int rc = 0;

	memset(topo, 0, sizeof(*topo));
	snprintf(topo->source, sizeof(topo->source), "%s",
		 xml_path ? xml_path : "this system");
	if (hwloc_topology_init(&t) < 0)
		return ar_seterr(-errno, "hwloc: cannot initialize");
	hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
	if (xml_path && hwloc_topology_set_xml(t, xml_path) < 0) {
		rc = ar_seterr(-AR_EINVAL, "%s: not an hwloc XML topology: %s",
			       xml_path, strerror(errno));
		goto out;
	}
	if (hwloc_topology_load(t) < 0) {
		rc = ar_seterr(-AR_EINVAL, "%s: hwloc cannot load it: %s",
			       topo->source, strerror(errno));
		goto out;
	}
	host = xml_path ? hwloc_obj_get_info_by_name(hwloc_get_root_obj(t),
						     "HostName") : NULL;
	if (host)
		snprintf(topo->hostname, sizeof(topo->hostname), "%s", host);
	else if (gethostname(topo->hostname, sizeof(topo->hostname) - 1) < 0)
		snprintf(topo->hostname, sizeof(topo->hostname), "localhost");
	topo->hostname[strcspn(topo->hostname, ".")] = '\0';

	while ((obj = hwloc_get_next_pcidev(t, obj))) {
		struct topo_gpu *g;

		if (!topo_pci_is_gpu(obj) || topo->ngpus == TOPO_MAX_GPUS)
			continue;
		g = &topo->gpus[topo->ngpus++];
		snprintf(g->busid, sizeof(g->busid), "%04x:%02x:%02x.%01x",
			 obj->attr->pcidev.domain, obj->attr->pcidev.bus,
			 obj->attr->pcidev.dev, obj->attr->pcidev.func);
		topo_gpu_model(obj, g->model, sizeof(g->model));
		g->numa = topo_numa_of(t, obj);
	}
	/* hwloc names the adapters but not their link rate: plannerd.conf
	 * gives that (docs/plannerd.md). */
	for (obj = NULL; (obj = hwloc_get_next_osdev(t, obj));)
		if (obj->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS)
			topo->nics++;
out:
	hwloc_topology_destroy(t);
	return rc;
}

json_t *topo_to_json(const struct topo *topo)
{
	json_t *devs = json_array();

	for (int i = 0; devs && i < topo->ngpus; i++)
		json_array_append_new(devs, json_pack("{s:s, s:s, s:i}",
			"pci", topo->gpus[i].busid,
			"model", topo->gpus[i].model,
			"numa", topo->gpus[i].numa));
	return json_pack("{s:s, s:s, s:i, s:i, s:o}", "hostname", topo->hostname,
			 "source", topo->source, "gpus", topo->ngpus,
			 "nics", topo->nics, "devices", devs ? devs : json_array());
}
