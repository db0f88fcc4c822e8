/*
 * planner.h - plannerd's use of libarachne and libarpolicy: loaded models
 * (kept per generation, shared read-only by the workers), planning a
 * normalized request, and replanning with the keep-or-move decision.
 *
 * A normalized request is {"model": {"name", "global_batch", "seq_len",
 * "planner", "budget_s"}, "cluster": {...}}: every choice the answer
 * depends on is in it, so equal requests may share an answer.
 */
#ifndef PLANNERD_PLANNER_H
#define PLANNERD_PLANNER_H

#include <jansson.h>

#include "conf.h"

struct planner;

/*
 * planner_create() - a planner for @conf (borrowed; it must outlive the
 * planner).  -AR_EINVAL when conf->planner names no planner of this build.
 */
int planner_create(const struct conf *conf, struct planner **plannerp);
void planner_destroy(struct planner *planner);

/* planner_plan() - plan @request; *@planp is the plan JSON (caller owns). */
int planner_plan(struct planner *planner, const json_t *request,
		 json_t **planp);

/*
 * planner_replan() - plan @new_request (the old model spec with the new
 * composition), price the old plan @old_plan (made for @old_request) on
 * the new composition when it still fits there, estimate the migration
 * between the two, and decide: keep the old plan when the time the new
 * one saves within @horizon_s does not exceed the predicted migration
 * stop.  *@answerp is {"plan", "kept", "reason", "gain_s",
 * "migration_s", "horizon_s", "old_samples_per_s", "new_samples_per_s",
 * "migration": {...}} (caller owns).
 */
int planner_replan(struct planner *planner, const json_t *old_request,
		   const json_t *old_plan, const json_t *new_request,
		   double horizon_s, json_t **answerp);

#endif /* PLANNERD_PLANNER_H */
