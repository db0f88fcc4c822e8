/*
 * migration.h - what moving a job from one plan to another costs: the
 * transfer tuples and the predicted stop.
 *
 * This is the one call site of a replan's migration.  Until the migrate
 * module (migrate/migrate.h) lands, migration.c computes a layer-level
 * estimate itself; once it lands, migration_estimate() calls migrate_
 * for the tuples and their schedule and nothing else in plannerd changes.
 */
#ifndef PLANNERD_MIGRATION_H
#define PLANNERD_MIGRATION_H

#include <jansson.h>

#include "costmodel.h"

struct migration {
	double bytes;			/* model state moved */
	double stop_s;			/* predicted training stop */
	json_t *json;			/* {"tuples":[...], "bytes", "stop_s",
					 *  "source"} */
};

/*
 * migration_estimate() - tuples and stop time to go from @old on @old_cl
 * to @new on @new_cl.  @mig is released with migration_fini().
 */
int migration_estimate(const struct costmodel *cm,
		       const struct costmodel_cluster *old_cl,
		       const struct costmodel_plan *old,
		       const struct costmodel_cluster *new_cl,
		       const struct costmodel_plan *new,
		       struct migration *mig);
void migration_fini(struct migration *mig);

#endif /* PLANNERD_MIGRATION_H */
