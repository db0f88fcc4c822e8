/* layout.c - state layouts and topologies: create, copy, free. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define AR_INTERNAL
#include "migrate_private.h"

struct migrate_layout *migrate_layout_create(int nlayers)
{
	struct migrate_layout *layout;

	if (nlayers <= 0) {
		errno = EINVAL;
		return NULL;
	}
	layout = calloc(1, sizeof(*layout));
	if (!layout)
		return NULL;
	layout->layers = calloc(nlayers, sizeof(*layout->layers));
	if (!layout->layers) {
		free(layout);
		return NULL;
	}
	layout->nlayers = nlayers;
	return layout;
}

void migrate_layout_free(struct migrate_layout *layout)
{
	if (!layout)
		return;
	free(layout->layers);
	free(layout);
}

struct migrate_layout *migrate_layout_dup(const struct migrate_layout *l)
{
	struct migrate_layout *copy = migrate_layout_create(l->nlayers);

	if (copy)
		memcpy(copy->layers, l->layers,
		       l->nlayers * sizeof(*l->layers));
	return copy;
}

uint64_t migrate_layout_total_bytes(const struct migrate_layout *layout)
{
	uint64_t total = 0;

	for (int l = 0; l < layout->nlayers; l++)
		for (int t = 0; t < MIGRATE_NUM_TENSORS; t++)
			total += layout->layers[l].bytes[t];
	return total;
}

struct migrate_topo *migrate_topo_create(int nnodes)
{
	struct migrate_topo *topo;

	if (nnodes <= 0) {
		errno = EINVAL;
		return NULL;
	}
	topo = calloc(1, sizeof(*topo));
	if (!topo)
		return NULL;
	topo->nodes = calloc(nnodes, sizeof(*topo->nodes));
	if (!topo->nodes) {
		free(topo);
		return NULL;
	}
	topo->nnodes = nnodes;
	return topo;
}

void migrate_topo_free(struct migrate_topo *topo)
{
	if (!topo)
		return;
	free(topo->nodes);
	free(topo);
}

struct migrate_topo *migrate_topo_dup(const struct migrate_topo *t)
{
	struct migrate_topo *copy = migrate_topo_create(t->nnodes);

	if (copy)
		memcpy(copy->nodes, t->nodes, t->nnodes * sizeof(*t->nodes));
	return copy;
}
