/*
 * scenario.h - plan transitions built in memory for the unit tests, the
 * system tests' fixture and bench/: layouts, topologies and plans filled
 * by hand, so none of them needs the cost model's profiles.
 */
#ifndef AR_MIGRATE_TEST_SCENARIO_H
#define AR_MIGRATE_TEST_SCENARIO_H

#include "migrate.h"

struct scenario {
	const char *name;
	struct migrate_layout *layout;
	struct migrate_topo *topo;
	struct costmodel_plan *old_plan;	/* NULL: the job starts */
	struct costmodel_plan *new_plan;
};

/* Names scenario_build() knows, NULL-terminated. */
extern const char *const scenario_names[];

/* Fills @sc for @name; 0, or -AR_ENOTFOUND for an unknown name. */
int scenario_build(const char *name, struct scenario *sc);
void scenario_fini(struct scenario *sc);

/* Building blocks, also for bench/. */
struct costmodel_plan *scenario_plan_new(void);
struct costmodel_template *scenario_template_add(struct costmodel_plan *p,
						 int nstages, int replicas);
void scenario_stage_set(struct costmodel_template *tm, int s, int tp,
			int first, int last);
void scenario_stage_experts(struct costmodel_template *tm, int s, int ep,
			    int etp, int edp);
/* Places replica @r's stage @s on GPUs gpu0 .. gpu0 + tp - 1 of @node. */
void scenario_place(struct costmodel_template *tm, int r, int s, int node,
		    int gpu0);
void scenario_plan_free(struct costmodel_plan *p);

/*
 * A dense layout with uneven sizes, one with 8-expert MoE blocks, and one
 * whose experts and their halves are all the same size.
 */
struct migrate_layout *scenario_layout_dense(int nlayers, uint64_t scale);
struct migrate_layout *scenario_layout_moe(int nlayers, uint64_t scale);
struct migrate_layout *scenario_layout_moe_even(int nlayers, uint64_t scale);
/* @nnodes nodes of @gpus GPUs: 25 GB/s inside, 12.5 GB/s NICs. */
struct migrate_topo *scenario_topo(int nnodes, int gpus);

/* The deterministic byte of (layer, tensor, offset) the fixtures use. */
static inline unsigned char scenario_byte(int layer, int tensor, uint64_t x)
{
	uint32_t h = (uint32_t)x * 0x9E3779B1u ^
		     (uint32_t)(layer * 8 + tensor + 1) * 0x85EBCA77u;

	h ^= h >> 15;
	return (unsigned char)(h >> 24);
}

#endif /* AR_MIGRATE_TEST_SCENARIO_H */
