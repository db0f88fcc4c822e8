/*
 * policy.c - policy_plan(): the table of planners, and the deadline,
 * thread count and TP options every planner shares (policy_private.h).
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "policy_private.h"

static const struct {
	const char *name;
	planner_f plan;		/* NULL: named by the paper, not built yet */
	bool steered;		/* a baseline: reads req->steering */
	bool cost;		/* supports POLICY_OBJECTIVE_COST */
} planners[] = {
	/* its policy and climb maximize throughput (docs/planners.md) */
	{ "arachne", planner_arachne, false, false },
	{ "exhaustive", planner_exhaustive, false, true },
	{ "amp", planner_amp, true, true },
	{ "sailor", planner_sailor, true, true },
	{ "metis", planner_metis, true, true },
	{ "hexiscale", planner_hexiscale, true, true },
	{ "espresso", planner_espresso, true, true },
	{ "random", planner_random, false, false },
};

static const char *const steering_names[POLICY_NUM_STEERINGS] = {
	[POLICY_STEERING_PUBLISHED] = "published",
	[POLICY_STEERING_SHARED] = "shared",
};

static const char *const objective_names[POLICY_NUM_OBJECTIVES] = {
	[POLICY_OBJECTIVE_THROUGHPUT] = "throughput",
	[POLICY_OBJECTIVE_COST] = "cost",
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

const char *policy_steering_name(enum policy_steering steering)
{
	return (unsigned)steering < POLICY_NUM_STEERINGS ?
	       steering_names[steering] : NULL;
}

const char *policy_objective_name(enum policy_objective objective)
{
	return (unsigned)objective < POLICY_NUM_OBJECTIVES ?
	       objective_names[objective] : NULL;
}

int policy_steering_find(const char *name)
{
	for (int i = 0; i < POLICY_NUM_STEERINGS; i++)
		if (!strcmp(steering_names[i], name))
			return i;
	return -1;
}

int policy_objective_find(const char *name)
{
	for (int i = 0; i < POLICY_NUM_OBJECTIVES; i++)
		if (!strcmp(objective_names[i], name))
			return i;
	return -1;
}

double planner_score(const struct policy_request *req,
		     const struct costmodel_plan *plan)
{
	const struct costmodel_prediction *p = &plan->predicted;

	if (req->objective != POLICY_OBJECTIVE_COST)
		return p->samples_per_s;
	/* Every plan that reaches the floor above every plan that does not. */
	if (p->samples_per_s < req->min_samples_per_s)
		return p->samples_per_s / req->min_samples_per_s - 1.0;
	return p->usd_per_sample > 0 ? 1.0 / p->usd_per_sample : 0;
}

bool planner_better(const struct policy_request *req,
		    const struct costmodel_plan *a, const struct costmodel_plan *b)
{
	return !b || planner_score(req, a) > planner_score(req, b);
}

/* Whether the model has any layer profile entry on GPU type @gpu. */
static bool gpu_profiled(const struct costmodel *cm, int gpu)
{
	for (int ti = 0; ti < COSTMODEL_NUM_TP; ti++)
		for (int mi = 0; mi < COSTMODEL_NUM_MBS; mi++)
			for (int type = 0; type < COSTMODEL_NUM_LAYER_TYPES; type++)
				if (costmodel_profile(cm, gpu, 1 << ti, 1 << mi, type))
					return true;
	return false;
}

/*
 * A cluster none of whose GPU types has a layer profile of the model
 * cannot be planned: say which files are missing, rather than let every
 * planner find that no pipeline depth fits.
 */
static int check_profiled(const struct costmodel *cm,
			  const struct costmodel_cluster *cl)
{
	bool seen[COSTMODEL_MAX_GPU_TYPES] = { false };
	char missing[1024] = "";
	size_t len = 0;

	for (size_t i = 0; i < cl->nnodes; i++) {
		int g = cl->nodes[i].gpu;

		if (seen[g])
			continue;
		seen[g] = true;
		if (gpu_profiled(cm, g))
			return 0;
		if (len < sizeof(missing))
			len += (size_t)snprintf(missing + len, sizeof(missing) - len,
						"%s%s/layers/%s/%s.ini", len ? ", " : "",
						costmodel_profiles_dir(cm),
						costmodel_model(cm)->name,
						costmodel_gpu(cm, g)->name);
	}
	if (!cl->nnodes)
		return 0;
	return ar_seterr(-AR_ENOPROFILE, "no layer profiles of %s on the cluster's GPUs: %s %s",
			 costmodel_model(cm)->name, missing,
			 strchr(missing, ',') ? "are missing or empty" : "is missing or empty");
}

int policy_plan(const struct policy_request *req, struct costmodel_plan **planp)
{
	const char *name = req->planner ? req->planner : "arachne";
	double start = ar_now();
	struct costmodel_plan *plan;
	int rc;

	*planp = NULL;
	ar_clearerr();
	if (!policy_steering_name(req->steering) || !policy_objective_name(req->objective))
		return ar_seterr(-AR_EINVAL, "unknown steering %d or objective %d",
				 req->steering, req->objective);
	if (req->min_samples_per_s < 0 || !isfinite(req->min_samples_per_s))
		return ar_seterr(-AR_EINVAL, "minimum throughput %g is not a number of samples/s",
				 req->min_samples_per_s);
	rc = check_profiled(req->cm, req->cl);
	if (rc < 0)
		return rc;
	if (req->framework != POLICY_FRAMEWORK_ANY) {
		if (!policy_framework_name(req->framework))
			return ar_seterr(-AR_EINVAL, "unknown framework %d",
					 req->framework);
		rc = planner_megatron(req, &plan);
		if (rc < 0)
			return rc;
		snprintf(plan->planner, sizeof(plan->planner), "%s",
			 policy_framework_name(req->framework));
		snprintf(plan->objective, sizeof(plan->objective), "%s",
			 policy_objective_name(req->objective));
		plan->planning_s = ar_now() - start;
		*planp = plan;
		return 0;
	}
	for (size_t i = 0; i < NPLANNERS; i++) {
		if (strcmp(planners[i].name, name) != 0)
			continue;
		if (!planners[i].plan)
			return ar_seterr(-AR_ENOTBUILT, "planner \"%s\" is not built yet",
					 name);
		if (req->objective != POLICY_OBJECTIVE_THROUGHPUT && !planners[i].cost)
			return ar_seterr(-AR_EINVAL, "planner \"%s\" plans for throughput only; --objective cost is for exhaustive and the baselines",
					 name);
		rc = planners[i].plan(req, &plan);
		if (rc < 0)
			return rc;
		snprintf(plan->planner, sizeof(plan->planner), "%s", name);
		snprintf(plan->objective, sizeof(plan->objective), "%s",
			 policy_objective_name(req->objective));
		/* a planner that counts no other states searched the plans it priced */
		if (!plan->states_explored)
			plan->states_explored = plan->plans_priced;
		if (planners[i].steered)
			snprintf(plan->steering, sizeof(plan->steering), "%s",
				 policy_steering_name(req->steering));
		plan->planning_s = ar_now() - start;
		if (req->objective == POLICY_OBJECTIVE_COST &&
		    plan->predicted.samples_per_s < req->min_samples_per_s) {
			rc = ar_seterr(-AR_EINFEASIBLE, "%s: no plan reaches %.1f samples/s; the cheapest per sample it found runs %.1f",
				       name, req->min_samples_per_s,
				       plan->predicted.samples_per_s);
			costmodel_plan_free(plan);
			return rc;
		}
		*planp = plan;
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
