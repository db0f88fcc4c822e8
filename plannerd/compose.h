/*
 * compose.h - the site's view of a composition: before a composition is
 * planned, GRES type names become GPU profiles (conf gres_map), entries
 * with hosts but no gpu get one from the node-name map (conf node_map),
 * the local node's entry is checked against or completed from hwloc, and
 * a missing inter_node_gbps takes the configured default.
 */
#ifndef PLANNERD_COMPOSE_H
#define PLANNERD_COMPOSE_H

#include <jansson.h>

#include "conf.h"
#include "topo.h"

/*
 * compose_normalize() - a normalized deep copy of the composition @in in
 * *@outp (caller owns the reference).  @topo may be NULL (no local node).
 * -AR_EINVAL with the entry and field named when the composition
 * disagrees with this node's hardware or cannot be mapped.
 */
int compose_normalize(const struct conf *conf, const struct topo *topo,
		      const json_t *in, json_t **outp);

#endif /* PLANNERD_COMPOSE_H */
