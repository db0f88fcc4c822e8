/*
 * policy_private.h - the planner framework of libarpolicy, what every
 * planner is written against: the signature of a planner and the table
 * policy_plan() dispatches on (policy.c), the one deadline of a planning
 * call, the one way a planner runs work on several threads (parallel.c),
 * and the TP degrees a cluster offers.  The exhaustive reference planner
 * (exhaustive.c) lives beside it; the learned planner is in arachne/ and
 * the baselines in baselines/, each with its own header.  Internal to
 * policy/ (docs/planners.md).
 */
#ifndef AR_POLICY_PRIVATE_H
#define AR_POLICY_PRIVATE_H

#include <stdbool.h>

#include "ar.h"
#include "policy.h"

/*
 * A planner fills *@planp with a priced plan (planner name, planning time
 * and the budget's outcome are set by policy_plan()) and returns 0, or
 * returns -AR_* with ar_errmsg() saying why.  It counts the plans it
 * priced in (*@planp)->plans_priced and sets search_complete when it ran
 * its search to the end within the budget.
 */
typedef int (*planner_f)(const struct policy_request *req,
			 struct costmodel_plan **planp);

int planner_exhaustive(const struct policy_request *req,
		       struct costmodel_plan **planp);
/* The learned planner (arachne/arachne.c, docs/policy.md). */
int planner_arachne(const struct policy_request *req,
		    struct costmodel_plan **planp);
/* Its ablation: uniformly random feasible templates (arachne/random.c). */
int planner_random(const struct policy_request *req,
		   struct costmodel_plan **planp);
/* The baselines of the paper's §3.1 (baselines/, docs/baselines.md). */
int planner_amp(const struct policy_request *req, struct costmodel_plan **planp);
int planner_espresso(const struct policy_request *req,
		     struct costmodel_plan **planp);
int planner_hexiscale(const struct policy_request *req,
		      struct costmodel_plan **planp);
int planner_metis(const struct policy_request *req,
		  struct costmodel_plan **planp);
int planner_sailor(const struct policy_request *req,
		   struct costmodel_plan **planp);

/* The best plan stock Megatron-LM runs (framework.c). */
int planner_megatron(const struct policy_request *req,
		     struct costmodel_plan **planp);

/*
 * A planning call's budget when the request gives none: a minute, what a
 * person at arachne-plan waits for.  The paper gave every planner 600 s,
 * and the benchmark (bench/plan-grid) passes that; the searches that use
 * any budget whole (Metis as published, exhaustive and Sailor on large
 * clusters) would otherwise keep a user waiting ten minutes.
 */
#define PLANNER_DEFAULT_BUDGET_S	60.0

/* The wall-clock deadline of a planning call, from its budget. */
struct planner_deadline {
	double start;		/* ar_now() when the planner started */
	double end;		/* ar_now() value the search stops at */
};

void planner_deadline_init(struct planner_deadline *dl,
			   const struct policy_request *req);
bool planner_deadline_passed(const struct planner_deadline *dl);

/* Threads a planner may use for @req (at most PLANNER_MAX_THREADS). */
#define PLANNER_MAX_THREADS	64
int planner_threads(const struct policy_request *req);

/*
 * planner_parallel() - run tasks 0..@n-1 of @fn on up to @threads threads
 * (parallel.c): task i always runs on thread i mod threads, the caller's
 * thread taking part, so a result never depends on the scheduling.
 */
typedef void (*planner_task_f)(void *ctx, int thread, int task);
void planner_parallel(planner_task_f fn, void *ctx, int n, int threads);

/*
 * planner_score() - the request's objective as one number to maximize:
 * samples/s for throughput; for cost, samples per dollar for a plan that
 * reaches min_samples_per_s, and below every such plan (in [-1, 0)) one
 * that does not.  planner_better(): @a scores above @b, or @b is NULL.
 */
double planner_score(const struct policy_request *req,
		     const struct costmodel_plan *plan);
bool planner_better(const struct policy_request *req,
		    const struct costmodel_plan *a, const struct costmodel_plan *b);

/* The candidate TP degrees for GPU type @gpu in @cl: powers of two up to
 * the largest node of that type.  Returns how many, written to @tps. */
int planner_tp_options(const struct costmodel *cm,
		       const struct costmodel_cluster *cl, int gpu,
		       int tps[COSTMODEL_NUM_TP]);

#endif /* AR_POLICY_PRIVATE_H */
