/*
 * policy.h - libarpolicy: the planners.  The learned planner of the paper
 * (template construction under feasibility masks by a trained policy) and
 * the search planners it is compared with (AMP, Sailor, Metis, HexiScale,
 * Espresso) and held to (exhaustive), all priced by libarachne.
 */
#ifndef AR_POLICY_H
#define AR_POLICY_H

#include <stdbool.h>

#include "costmodel.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * How a baseline chooses among its candidates (docs/baselines.md).  Only
 * the five baselines read it; the learned and exhaustive planners always
 * search with the cost model.
 */
enum policy_steering {
	/* each with its own published estimator, partitioner and memory
	 * model; only the plan it chose is priced by the cost model, and a
	 * choice the cost model finds out of memory is its failure */
	POLICY_STEERING_PUBLISHED,
	/* the cost model and its fill inside every baseline's search */
	POLICY_STEERING_SHARED,
	POLICY_NUM_STEERINGS
};

/* What a planner maximizes (docs/planners.md says which support which). */
enum policy_objective {
	POLICY_OBJECTIVE_THROUGHPUT,	/* samples per second */
	/* dollars per sample at the GPU profiles' prices, among plans of at
	 * least min_samples_per_s: Espresso's objective */
	POLICY_OBJECTIVE_COST,
	POLICY_NUM_OBJECTIVES
};

/*
 * Which plans a planning call may return: any plan, or only plans a stock
 * framework release runs (framework.c, docs/planners.md).
 */
enum policy_framework {
	POLICY_FRAMEWORK_ANY,
	/* stock Megatron-LM, core_v0.12.0 and later: one template, one TP
	 * degree, a split of the first and last stage and even ones between */
	POLICY_FRAMEWORK_MEGATRON,
	POLICY_NUM_FRAMEWORKS
};

/* What one planning call is asked to do. */
struct policy_request {
	const struct costmodel *cm;		/* borrowed */
	const struct costmodel_cluster *cl;	/* borrowed */
	const char *planner;			/* NULL: "arachne" */
	double budget_s;			/* <= 0: 60 s (the paper: 600) */
	const char *policy_path;		/* weights for "arachne"; NULL: shipped */
	int threads;				/* <= 0: all online CPUs */
	unsigned long seed;
	bool quiet;				/* no progress on stderr */
	/*
	 * "arachne" only (docs/policy.md), to measure what the learned part
	 * finds by itself: climb from the policy's own plans alone, without
	 * the structured starts; return the best of the policy's rollouts as
	 * they are, with no climb at all; or let the fast search planners'
	 * plans seed the climb and stand as answers (off by default, so that
	 * the planner's plans are its own).
	 */
	bool rollout_starts_only;
	bool no_climb;
	bool seed_planners;
	/*
	 * "random" only: build uniformly random feasible templates until this
	 * many have been priced (<= 0: as many constructions as the learned
	 * planner's rollouts).
	 */
	long evaluations;
	enum policy_steering steering;		/* zero: published */
	enum policy_objective objective;	/* zero: throughput */
	double min_samples_per_s;		/* cost objective's floor; 0: none */
	/*
	 * Not ANY: the best plan the framework runs, by a search of its own
	 * (one template of one TP degree, the framework's layer splits),
	 * whatever @planner names.
	 */
	enum policy_framework framework;
};

/*
 * policy_plan() - plan @req->cl for @req->cm with the named planner.  On
 * success *@planp is a priced plan (caller frees with
 * costmodel_plan_free()) with planner, planning_s, plans_priced and
 * search_complete set.  -AR_EINFEASIBLE when no plan fits (the reason in
 * ar_errmsg()) or, under the cost objective, none reaches
 * min_samples_per_s; -AR_ENOTFOUND for an unknown planner name,
 * -AR_ENOTBUILT for a planner this build does not have yet.
 */
int policy_plan(const struct policy_request *req, struct costmodel_plan **planp);

/* NULL-terminated list of planner names, for --help and errors. */
const char *const *policy_planner_names(void);

/*
 * policy_framework_check() - 0 when stock @fw runs @plan; -AR_EINFEASIBLE
 * naming the property that stops it otherwise ("several templates",
 * "per-stage TP", "a layer split it cannot express", ...).
 */
int policy_framework_check(const struct costmodel *cm,
			   const struct costmodel_plan *plan,
			   enum policy_framework fw);

/* How Megatron-LM's arguments express a template's layer split. */
struct policy_megatron_split {
	int first;		/* --decoder-first-pipeline-num-layers; 0: not given */
	int last;		/* --decoder-last-pipeline-num-layers; 0: not given */
	bool account_embedding;	/* --account-for-embedding-in-pipeline-split */
	bool account_loss;	/* --account-for-loss-in-pipeline-split */
};

/* The flags for @t's split; -AR_EINFEASIBLE when none express it. */
int policy_megatron_split(const struct costmodel *cm,
			  const struct costmodel_template *t,
			  struct policy_megatron_split *split);

/* "any", "megatron"; the framework called @name or -1. */
const char *policy_framework_name(enum policy_framework fw);
int policy_framework_find(const char *name);

/* "published", "shared"; "throughput", "cost"; NULL out of range. */
const char *policy_steering_name(enum policy_steering steering);
const char *policy_objective_name(enum policy_objective objective);
/* The value called @name, or -1. */
int policy_steering_find(const char *name);
int policy_objective_find(const char *name);

#ifdef __cplusplus
}
#endif
#endif /* AR_POLICY_H */
