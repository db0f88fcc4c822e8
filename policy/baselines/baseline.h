/*
 * baseline.h - what the five baseline planners of baselines/ share
 * (private to libarpolicy): the bookkeeping of one search under either
 * steering, the node-size view of planners that need uniform nodes, the
 * per-layer profile sums and links that the baselines' own estimators
 * read, and the layer splits they use.
 *
 * Steering (docs/baselines.md): under "shared" every candidate a baseline
 * considers is completed by the fill and priced by libarachne, and the
 * best priced one wins.  Under "published" each baseline ranks complete
 * candidates (layers, micro-batch, placement) with its own published
 * estimator and memory model, and only the candidate it chose is priced,
 * at the end; one that does not fit the cost model's memory is its
 * failure on the cluster.
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

/* One search: its deadline, what it looked at and the best plan so far. */
struct baseline_search {
	const struct policy_request *req;	/* borrowed */
	const struct costmodel *cm;		/* borrowed */
	const struct costmodel_cluster *cl;	/* borrowed */
	const char *name;			/* "sailor" */
	struct planner_deadline deadline;	/* the request's budget */
	long plans_priced;			/* every fill or price call */
	long states;				/* points of its space looked at */
	bool expired;				/* the deadline passed */
	struct costmodel_plan *best;		/* owned; NULL until one is kept */
	double best_score;			/* planner_score() terms of best */
	double best_estimate_s;			/* published: its own iteration time */
};

int baseline_search_init(struct baseline_search *bs,
			 const struct policy_request *req, const char *name);
void baseline_search_fini(struct baseline_search *bs);
/* True once the budget is spent (sticky, so nested loops unwind fast). */
bool baseline_search_expired(struct baseline_search *bs);
/* True under the published steering. */
bool baseline_published(const struct baseline_search *bs);
/* Shared steering: keep a copy of priced @plan when it scores best so far.
 * 0 or -ENOMEM. */
int baseline_search_offer(struct baseline_search *bs,
			  const struct costmodel_plan *plan);
/*
 * baseline_search_offer_estimate() - published steering: keep a copy of
 * the complete, unpriced @plan when the baseline's own estimate of its
 * iteration, @iter_s, scores best so far under the request's objective.
 */
int baseline_search_offer_estimate(struct baseline_search *bs,
				   const struct costmodel_plan *plan,
				   double iter_s);
/*
 * baseline_search_finish() - hand the best plan to *@planp with the
 * planner's name, planning time, plans priced and states explored; under
 * the published steering price it first.  -AR_EINFEASIBLE with a message
 * when nothing was kept or the chosen plan does not fit.
 */
int baseline_search_finish(struct baseline_search *bs, bool complete,
			   struct costmodel_plan **planp);
/* A pricing error that only rejects a candidate (memory, missing profile). */
bool baseline_rc_rejects(int rc);
/*
 * baseline_price_choosing() - shared steering, for a plan a baseline built
 * whole: price it with the plan options the fill would choose, the
 * distributed optimizer and the least recomputation that fits (none, then
 * selective, then full: in the cost model recomputation only buys memory).
 * costmodel_plan_price()'s return of the last try.
 */
int baseline_price_choosing(struct baseline_search *bs,
			    struct costmodel_plan *plan);

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
 * baseline_split_even() - Sailor's even split (its get_stages()): every
 * layer of the list, the embedding and head included, dealt evenly, the
 * remainder to the last stages "to alleviate memory pressure".
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

/* USD per hour of the GPUs @plan uses, at the GPU profiles' prices. */
double baseline_plan_usd_per_hour(const struct costmodel *cm,
				  const struct costmodel_plan *plan);

/*
 * The links the originals' estimators read, nominal (no efficiency
 * factor), in bytes/s, as the cluster gives them (docs/costmodel.md): a
 * node's network (its group's nics x nic_gbps, else the cluster's
 * inter_node_gbps, else its GPU profile's network_gbps).
 */
double baseline_node_link_Bps(const struct costmodel *cm,
			      const struct costmodel_cluster *cl, int node);
/*
 * For estimators that see GPU types only: the slowest network, and the
 * slowest intra-node link, of the nodes of type @gpu in @cl (the GPU
 * profile's when the cluster has none of that type).
 */
double baseline_type_link_Bps(const struct costmodel *cm,
			      const struct costmodel_cluster *cl, int gpu);
double baseline_intra_Bps(const struct costmodel *cm,
			  const struct costmodel_cluster *cl, int gpu);
/* Ring all-reduce of @bytes over @n members at @Bps: 2 (n-1)/n bytes/Bps. */
double baseline_ring_s(double bytes, int n, double Bps);
/* Bytes of one sample's activations crossing a stage boundary (BF16). */
double baseline_boundary_bytes(const struct costmodel *cm);
/* BF16 weight bytes of layers [@first, @last] at TP 1 (0 when missing). */
double baseline_range_weight_bytes(const struct costmodel *cm, int gpu,
				   int first, int last);

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
