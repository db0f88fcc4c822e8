/* gen.c - configuration generations, swapped whole on SIGHUP. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "ar.h"
#include "planner.h"
#include "plannerd.h"

int gen_create(const char *conf_path, struct gen **genp)
{
	struct gen *gen;
	int rc;

	*genp = NULL;
	gen = calloc(1, sizeof(*gen));
	if (!gen)
		return -ENOMEM;
	atomic_init(&gen->refs, 1);
	rc = conf_create(conf_path, &gen->conf);
	if (rc == 0)
		rc = planner_create(gen->conf, &gen->planner);
	if (rc < 0) {
		gen_put(gen);
		return rc;
	}
	*genp = gen;
	return 0;
}

/* A new reference to the current generation. */
struct gen *gen_get(struct daemon *d)
{
	struct gen *gen;

	pthread_mutex_lock(&d->gen_lock);
	gen = d->gen;
	atomic_fetch_add(&gen->refs, 1);
	pthread_mutex_unlock(&d->gen_lock);
	return gen;
}

void gen_put(struct gen *gen)
{
	if (!gen || atomic_fetch_sub(&gen->refs, 1) != 1)
		return;
	planner_destroy(gen->planner);
	conf_destroy(gen->conf);
	free(gen);
}
