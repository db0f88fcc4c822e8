/*
 * baseline.h - what the five baseline planners of baselines/ share
 * (private to libarpolicy): the budget and best-plan bookkeeping of one
 * search, the node-size view of planners that need uniform nodes, and the
 * per-layer profile sums that the baselines' own heuristics read (layer
 * time, state and activation bytes).  Every plan a baseline returns is priced by
 * libarachne; these estimates only steer the searches, as each original
 * planner steers its search with its own model.
 */
#ifndef AR_POLICY_BASELINE_H
#define AR_POLICY_BASELINE_H

#include <stdbool.h>

#include "costmodel.h"
#include "policy_private.h"

/* Micro-batch sizes the profiles hold: 1, 2, 4, 8, 16. */
#define BASELINE_NUM_MBS		COSTMODEL_NUM_MBS
/* Runtime memory every GPU loses to the framework (the cost model's default). */
#define BASELINE_RUNTIME_OVERHEAD_GIB	1.5

/* One search: its deadline, the plans it priced and the best plan so far. */
struct baseline_search {
	const struct costmodel *cm;		/* borrowed */
	const struct costmodel_cluster *cl;	/* borrowed */
	const char *name;			/* "sailor" */
	struct planner_deadline deadline;	/* the request's budget */
	long plans_priced;			/* every fill or price call */
	bool expired;				/* the deadline passed */
	struct costmodel_plan *best;		/* owned; NULL until one prices */
};

int baseline_search_init(struct baseline_search *bs,
			 const struct policy_request *req, const char *name);
void baseline_search_fini(struct baseline_search *bs);
/* True once the budget is spent (sticky, so nested loops unwind fast). */
bool baseline_search_expired(struct baseline_search *bs);
/* Keep a copy of @plan when it is the fastest so far.  0 or -ENOMEM. */
int baseline_search_offer(struct baseline_search *bs,
			  const struct costmodel_plan *plan);
/*
 * baseline_search_finish() - hand the best plan to *@planp with the
 * planner's name, planning time and plans priced; -AR_EINFEASIBLE with a
 * message when nothing priced.
 */
int baseline_search_finish(struct baseline_search *bs, bool complete,
			   struct costmodel_plan **planp);
/* A pricing error that only rejects a candidate (memory, missing profile). */
bool baseline_rc_rejects(int rc);

/*
 * baseline_node_gpus() - the node size a planner that needs uniform nodes
 * sees: the common size when every node has the same number of GPUs, else
 * 1 (every GPU its own node, as the paper ran Sailor, AMP and Espresso on
 * non-uniform clusters), so that no TP group spans what it cannot see.
 */
int baseline_node_gpus(const struct costmodel_cluster *cl);

/* The global batch plans for @cm carry (the model's, or the override). */
int baseline_global_batch(const struct costmodel *cm);

/* GPUs of each type in @cl, into @count[COSTMODEL_MAX_GPU_TYPES]. */
void baseline_count_gpus(const struct costmodel *cm,
			 const struct costmodel_cluster *cl, int *count);
/* Largest node of @type in @cl (0 when none). */
int baseline_largest_node(const struct costmodel_cluster *cl, int type);

/*
 * Per-layer profile sums, by layer index (0 the embedding, 1..blocks the
 * blocks, blocks+1 the head); an MoE block is its attention and expert
 * entries with ETP = TP and EP = 1, as every baseline lays experts out.
 * The time is forward + backward + TP communication of one micro-batch;
 * it is negative when the profiles lack an entry.
 */
double baseline_layer_time(const struct costmodel *cm, int gpu, int tp,
			   int mbs, int layer);
double baseline_layer_state_bytes(const struct costmodel *cm, int gpu, int tp,
				  int layer);
double baseline_layer_act_bytes(const struct costmodel *cm, int gpu, int tp,
				int mbs, int layer);
/* Sum of baseline_layer_time() over [@first, @last]; negative if one lacks. */
double baseline_range_time(const struct costmodel *cm, int gpu, int tp,
			   int mbs, int first, int last);

/*
 * baseline_stage_fits() - whether layers [@first, @last] fit one GPU of
 * @gpu at @tp with @inflight micro-batches of @mbs held (1F1B: a stage
 * @k stages before the end holds k + 1), by the profiles' bytes plus the
 * runtime overhead.  @headroom (may be NULL) gets free/total memory.
 */
bool baseline_stage_fits(const struct costmodel *cm, int gpu, int tp, int mbs,
			 int first, int last, int inflight, double *headroom);

/* The profiled micro-batch size with index @i (1, 2, 4, ...). */
int baseline_mbs(int i);

/*
 * baseline_split_even() - Sailor's even split, as the fill's
 * uniform_layers does it: the blocks evenly, the remainder to the first
 * stages, the embedding with the first stage and the head with the last.
 */
int baseline_split_even(const struct costmodel *cm, int depth, int *first,
			int *last);
/*
 * baseline_split_share() - blocks in proportion to @share[0..@depth)
 * (largest remainder, at least one layer a stage), the embedding with the
 * first stage and the head with the last.
 */
int baseline_split_share(const struct costmodel *cm, int depth,
			 const double *share, int *first, int *last);

/* Options every baseline's fill starts from: experts stay ETP = TP, EP = 1. */
void baseline_fill_opts(struct costmodel_fill_opts *opts);

/*
 * baseline_template_alloc() - append an empty template of @nstages stages
 * and @replicas replicas (placement allocated, zeroed) to @plan; returns
 * it, or NULL on ENOMEM.
 */
struct costmodel_template *baseline_template_alloc(struct costmodel_plan *plan,
						   int nstages, int replicas);

/*
 * baseline_pool_restrict() - keep free in @pool only the GPUs of the nodes
 * with @keep[node] set, so that a fill cannot reach past them.
 */
void baseline_pool_restrict(struct costmodel_pool *pool,
			    const struct costmodel_cluster *cl,
			    const bool *keep);

#endif /* AR_POLICY_BASELINE_H */
