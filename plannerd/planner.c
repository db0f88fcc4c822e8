/*
 * planner.c - requests to libarachne models and clusters, policy_plan()
 * calls, and the keep-or-move decision of a replan.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ar.h"
#include "costmodel.h"
#include "hmap.h"
#include "migration.h"
#include "planner.h"
#include "policy.h"

struct planner {
	const struct conf *conf;
	pthread_mutex_t lock;		/* guards models */
	struct hmap *models;		/* "name/batch/seq" -> costmodel */
};

static void planner_model_free(void *cm)
{
	costmodel_destroy(cm);
}

int planner_create(const struct conf *conf, struct planner **plannerp)
{
	const char *const *names = policy_planner_names();
	struct planner *planner;

	*plannerp = NULL;
	for (; *names; names++)
		if (strcmp(*names, conf->planner) == 0)
			break;
	if (!*names)
		return ar_seterr(-AR_EINVAL, "%s: planner: \"%s\" is not a planner of this build",
				 conf->path ? conf->path : "defaults",
				 conf->planner);
	planner = calloc(1, sizeof(*planner));
	if (!planner)
		return -ENOMEM;
	planner->models = hmap_create(planner_model_free);
	if (!planner->models) {
		free(planner);
		return -ENOMEM;
	}
	pthread_mutex_init(&planner->lock, NULL);
	planner->conf = conf;
	*plannerp = planner;
	return 0;
}

void planner_destroy(struct planner *planner)
{
	if (!planner)
		return;
	hmap_destroy(planner->models);
	pthread_mutex_destroy(&planner->lock);
	free(planner);
}

struct planner_spec {
	const char *model;
	int global_batch;
	int seq_len;
	const char *name;		/* the planner */
	double budget_s;
};

static int planner_spec_get(const json_t *request, struct planner_spec *spec)
{
	json_t *m = json_object_get(request, "model");

	if (json_unpack(m, "{s:s, s:i, s:i, s:s, s:F}",
			"name", &spec->model,
			"global_batch", &spec->global_batch,
			"seq_len", &spec->seq_len,
			"planner", &spec->name,
			"budget_s", &spec->budget_s) < 0)
		return ar_seterr(-AR_EINVAL, "stored request has no complete model spec");
	return 0;
}

/*
 * The loaded model for @spec, shared by every worker of this generation
 * (a loaded costmodel is read-only, so concurrent pricing is safe).
 */
static int planner_model_get(struct planner *planner,
			     const struct planner_spec *spec,
			     const struct costmodel **cmp)
{
	struct costmodel_opts opts = {
		.profiles_dir = planner->conf->profiles_dir,
		.global_batch = spec->global_batch,
		.seq_len = spec->seq_len,
	};
	struct costmodel *cm;
	char key[128];
	int rc = 0;

	snprintf(key, sizeof(key), "%s/%d/%d", spec->model,
		 spec->global_batch, spec->seq_len);
	pthread_mutex_lock(&planner->lock);
	cm = hmap_get(planner->models, key);
	if (!cm) {
		rc = costmodel_load(spec->model, &opts, &cm);
		if (rc == 0 && hmap_put(planner->models, key, cm) < 0) {
			costmodel_destroy(cm);
			rc = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&planner->lock);
	*cmp = rc == 0 ? cm : NULL;
	return rc;
}

/* policies_dir/MODEL.safetensors when the site trained one for MODEL. */
static char *planner_policy_path(const struct planner *planner,
				 const char *model)
{
	char *path;

	if (asprintf(&path, "%s/%s.safetensors", planner->conf->policies_dir,
		     model) < 0)
		return NULL;
	if (access(path, R_OK) == 0)
		return path;
	free(path);
	return NULL;
}

/* Plan @cl with @spec; *@planp is the caller's (costmodel_plan_free()). */
static int planner_run(struct planner *planner, const struct costmodel *cm,
		       const struct costmodel_cluster *cl,
		       const struct planner_spec *spec,
		       struct costmodel_plan **planp)
{
	struct policy_request preq = {
		.cm = cm,
		.cl = cl,
		.planner = spec->name,
		.budget_s = spec->budget_s,
		.threads = planner->conf->plan_threads,
		.seed = 1,		/* equal requests, equal plans */
		.quiet = true,
	};
	char *policy = planner_policy_path(planner, spec->model);
	int rc;

	preq.policy_path = policy;
	rc = policy_plan(&preq, planp);
	free(policy);
	return rc;
}

int planner_plan(struct planner *planner, const json_t *request,
		 json_t **planp)
{
	struct costmodel_cluster *cl = NULL;
	struct costmodel_plan *plan = NULL;
	const struct costmodel *cm;
	struct planner_spec spec;
	int rc;

	*planp = NULL;
	rc = planner_spec_get(request, &spec);
	if (rc == 0)
		rc = planner_model_get(planner, &spec, &cm);
	if (rc == 0)
		rc = costmodel_cluster_from_json(cm, json_object_get(request,
								     "cluster"),
						 &cl);
	if (rc == 0)
		rc = planner_run(planner, cm, cl, &spec, &plan);
	if (rc == 0) {
		*planp = costmodel_plan_to_json(cm, cl, plan);
		if (!*planp)
			rc = -ENOMEM;
	}
	costmodel_plan_free(plan);
	costmodel_cluster_free(cl);
	return rc;
}

/*
 * Time the new plan saves within @horizon_s, processing at its rate what
 * the old plan would process in the horizon: h * (1 - old / new).
 */
static double planner_gain_s(double old_rate, double new_rate, double horizon_s)
{
	if (new_rate <= old_rate || new_rate <= 0)
		return 0;
	return horizon_s * (1.0 - old_rate / new_rate);
}

int planner_replan(struct planner *planner, const json_t *old_request,
		   const json_t *old_plan, const json_t *new_request,
		   double horizon_s, json_t **answerp)
{
	struct costmodel_cluster *old_cl = NULL, *new_cl = NULL;
	struct costmodel_plan *old = NULL, *old_here = NULL, *new = NULL;
	struct migration mig = { 0 };
	const struct costmodel *cm;
	struct planner_spec spec;
	double old_rate = 0, gain_s;
	char reason[512] = "";
	json_t *answer = NULL, *plan_json;
	bool keep = false;
	int rc;

	*answerp = NULL;
	rc = planner_spec_get(new_request, &spec);
	if (rc == 0)
		rc = planner_model_get(planner, &spec, &cm);
	if (rc == 0)
		rc = costmodel_cluster_from_json(cm, json_object_get(old_request,
								     "cluster"),
						 &old_cl);
	if (rc == 0)
		rc = costmodel_cluster_from_json(cm, json_object_get(new_request,
								     "cluster"),
						 &new_cl);
	if (rc == 0)
		rc = costmodel_plan_from_json(cm, old_cl, old_plan, &old);
	if (rc == 0)
		rc = planner_run(planner, cm, new_cl, &spec, &new);
	if (rc < 0)
		goto out;

	/*
	 * The old plan can stay only if every GPU it uses is still in the
	 * new composition; priced there, it gives the rate to beat.
	 */
	if (costmodel_plan_from_json(cm, new_cl, old_plan, &old_here) == 0 &&
	    costmodel_plan_price(cm, new_cl, old_here) == 0)
		old_rate = old_here->predicted.samples_per_s;
	else
		snprintf(reason, sizeof(reason), "the old plan does not fit the new composition: %s",
			 ar_errmsg());

	rc = migration_estimate(cm, old_cl, old, new_cl, new, &mig);
	if (rc < 0)
		goto out;
	gain_s = planner_gain_s(old_rate, new->predicted.samples_per_s,
				horizon_s);
	if (old_here && old_rate > 0 && gain_s <= mig.stop_s) {
		keep = true;
		if (new->predicted.samples_per_s <= old_rate)
			snprintf(reason, sizeof(reason), "no plan for the new composition is faster: the best found gives %.4g samples/s, the current one %.4g",
				 new->predicted.samples_per_s, old_rate);
		else
			snprintf(reason, sizeof(reason), "the new plan would save %.3f s within the %.0f s horizon, no more than the %.3f s migration stop",
				 gain_s, horizon_s, mig.stop_s);
	} else if (!reason[0]) {
		snprintf(reason, sizeof(reason), "the new plan saves %.3f s within the %.0f s horizon, more than the %.3f s migration stop",
			 gain_s, horizon_s, mig.stop_s);
	}
	plan_json = keep ? json_deep_copy(old_plan) :
		    costmodel_plan_to_json(cm, new_cl, new);
	answer = json_pack("{s:o, s:b, s:s, s:f, s:f, s:f, s:f, s:f, s:o}",
			   "plan", plan_json, "kept", keep, "reason", reason,
			   "gain_s", gain_s, "migration_s", mig.stop_s,
			   "horizon_s", horizon_s,
			   "old_samples_per_s", old_rate,
			   "new_samples_per_s", new->predicted.samples_per_s,
			   "migration", keep ? json_null() :
			   json_incref(mig.json));
	if (!answer)
		rc = -ENOMEM;
	*answerp = answer;
out:
	migration_fini(&mig);
	costmodel_plan_free(old);
	costmodel_plan_free(old_here);
	costmodel_plan_free(new);
	costmodel_cluster_free(old_cl);
	costmodel_cluster_free(new_cl);
	return rc;
}
