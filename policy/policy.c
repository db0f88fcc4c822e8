/*
 * policy.c - policy_plan(): the table of planners, and the deadline,
 * thread count and TP options every planner shares (policy_private.h).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "policy_private.h"

static const struct {
	const char *name;
	planner_f plan;		/* NULL: named by the paper, not built yet */
} planners[] = {
	{ "arachne", planner_arachne },
	{ "exhaustive", planner_exhaustive },
	{ "amp", planner_amp },
	{ "sailor", planner_sailor },
	{ "metis", planner_metis },
	{ "hexiscale", planner_hexiscale },
	{ "espresso", planner_espresso },
};

#define NPLANNERS ARRAY_SIZE(planners)

const char *const *policy_planner_names(void)
{
	static const char *names[NPLANNERS + 1];

	for (size_t i = 0; i < NPLANNERS; i++)
		names[i] = planners[i].name;
	names[NPLANNERS] = NULL;
	return names;
}

int policy_plan(const struct policy_request *req, struct costmodel_plan **planp)
{
	const char *name = req->planner ? req->planner : "arachne";
	double start = ar_now();
	int rc;

	*planp = NULL;
	ar_clearerr();
	for (size_t i = 0; i < NPLANNERS; i++) {
		if (strcmp(planners[i].name, name) != 0)
			continue;
		if (!planners[i].plan)
			return ar_seterr(-AR_ENOTBUILT, "planner \"%s\" is not built yet",
					 name);
		rc = planners[i].plan(req, planp);
		if (rc < 0)
			return rc;
		snprintf((*planp)->planner, sizeof((*planp)->planner), "%s", name);
		(*planp)->planning_s = ar_now() - start;
		return 0;
	}
	return ar_seterr(-AR_ENOTFOUND, "unknown planner \"%s\"", name);
}

void planner_deadline_init(struct planner_deadline *dl,
			   const struct policy_request *req)
{
	dl->start = ar_now();
	dl->end = dl->start + (req->budget_s > 0 ? req->budget_s :
						 PLANNER_DEFAULT_BUDGET_S);
}

bool planner_deadline_passed(const struct planner_deadline *dl)
{
	return ar_now() >= dl->end;
}

int planner_threads(const struct policy_request *req)
{
	long n;

	if (req->threads > 0)
		return req->threads;
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)(n > PLANNER_MAX_THREADS ? PLANNER_MAX_THREADS : n) : 1;
}

int planner_tp_options(const struct costmodel *cm,
		       const struct costmodel_cluster *cl, int gpu,
		       int tps[COSTMODEL_NUM_TP])
{
	int largest = 0, n = 0;

	for (size_t i = 0; i < cl->nnodes; i++)
		if (cl->nodes[i].gpu == gpu && cl->nodes[i].gpus > largest)
			largest = cl->nodes[i].gpus;
	for (int tp = 1; tp <= COSTMODEL_MAX_TP && tp <= largest; tp *= 2)
		if (costmodel_profile(cm, gpu, tp, 1, COSTMODEL_LAYER_HEAD))
			tps[n++] = tp;
	return n;
}
