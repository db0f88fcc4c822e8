/*
 * planner.h - what the planners of libarpolicy share: the signature every
 * planner has, the table policy_plan() dispatches on, and small helpers
 * for budgets.  Internal to policy/.
 */
#ifndef AR_PLANNER_H
#define AR_PLANNER_H

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
/* The baselines of the paper's §3.1 (docs/baselines.md). */
int planner_amp(const struct policy_request *req, struct costmodel_plan **planp);
int planner_espresso(const struct policy_request *req,
		     struct costmodel_plan **planp);
int planner_hexiscale(const struct policy_request *req,
		      struct costmodel_plan **planp);
int planner_metis(const struct policy_request *req,
		  struct costmodel_plan **planp);
int planner_sailor(const struct policy_request *req,
		   struct costmodel_plan **planp);

/* A wall-clock deadline for a planning call. */
struct planner_deadline {
	double start;
	double end;
};

void planner_deadline_init(struct planner_deadline *dl,
			   const struct policy_request *req);
bool planner_deadline_passed(const struct planner_deadline *dl);

/* Threads a planner may use for @req. */
int planner_threads(const struct policy_request *req);

/* The candidate TP degrees for GPU type @gpu in @cl: powers of two up to
 * the largest node of that type.  Returns how many, written to @tps. */
int planner_tp_options(const struct costmodel *cm,
		       const struct costmodel_cluster *cl, int gpu,
		       int tps[COSTMODEL_NUM_TP]);

#endif /* AR_PLANNER_H */
