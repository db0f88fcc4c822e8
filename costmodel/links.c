/*
 * links.c - intra-node link classes.  A file of its own, without the
 * rest of the library, so that plannerd's fuzz target can link it.
 */
#include "config.h"

#include <string.h>

#include "ar.h"
#include "costmodel.h"

/*
 * Intra-node link classes, per direction.  NVLink: half of the total
 * NVIDIA's datasheets give per GPU (V100 300 GB/s, A100 600, H100 900,
 * B200 1800).  PCIe x16: about 80 % of the raw rate (15.75, 31.5 and
 * 63 GB/s for generations 3 to 5), as the shipped GPU profiles take it
 * (docs/profiles.md).
 */
static const struct {
	const char *name;
	double GBps;
} link_classes[] = {
	{ "nvlink2", 150 }, { "nvlink3", 300 }, { "nvlink4", 450 },
	{ "nvlink5", 900 }, { "pcie3", 12.5 }, { "pcie4", 25 },
	{ "pcie5", 50 },
};

double costmodel_link_class_GBps(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(link_classes); i++)
		if (strcmp(name, link_classes[i].name) == 0)
			return link_classes[i].GBps;
	return 0;
}

const char *costmodel_link_class_names(void)
{
	return "nvlink2, nvlink3, nvlink4, nvlink5, pcie3, pcie4, pcie5";
}
