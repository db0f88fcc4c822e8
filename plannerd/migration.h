/*
 * migration.h - what moving a job from its old plan to a new one costs,
 * from the migrate module (migrate/migrate.h): the migration (tuples and
 * schedule) and its predicted stop.
 */
#ifndef PLANNERD_MIGRATION_H
#define PLANNERD_MIGRATION_H

#include <jansson.h>

#include "costmodel.h"

struct migration {
	double bytes;			/* model state moved over links */
	double stop_s;			/* predicted training stop */
	json_t *json;			/* migrate_to_json(): docs/migrate.md */
};

/*
 * migration_estimate() - the migration from @old on @old_cl to @new on
 * @new_cl.  Both plans are placed on one cluster holding the nodes of
 * either (migrate_diff_costmodel() needs that).  @mig is released with
 * migration_fini().
 */
int migration_estimate(const struct costmodel *cm,
		       const struct costmodel_cluster *old_cl,
		       const struct costmodel_plan *old,
		       const struct costmodel_cluster *new_cl,
		       const struct costmodel_plan *new,
		       struct migration *mig);
void migration_fini(struct migration *mig);

#endif /* PLANNERD_MIGRATION_H */
