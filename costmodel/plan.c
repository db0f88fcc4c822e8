/* plan.c - plans: life cycle, structural checks, JSON in and out. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AR_INTERNAL
#include "costmodel_private.h"

#define PLAN_FORMAT_VERSION 1
#define PLAN_MAX_TEMPLATES 4096

struct costmodel_plan *costmodel_plan_create(const struct costmodel *cm)
{
	struct costmodel_plan *plan = calloc(1, sizeof(*plan));

	if (!plan)
		return NULL;
	plan->micro_batch = 1;
	plan->global_batch = cm->model.global_batch;
	plan->seq_len = cm->model.seq_len;
	plan->recompute = COSTMODEL_RECOMPUTE_NONE;
	plan->distributed_optimizer = false;
	plan->overlap_grad_reduce = !cm->no_overlap;
	plan->overlap_param_gather = !cm->no_overlap;
	return plan;
}

static const char *const recompute_names[COSTMODEL_NUM_RECOMPUTE] = {
	[COSTMODEL_RECOMPUTE_NONE] = "none",
	[COSTMODEL_RECOMPUTE_SELECTIVE] = "selective",
	[COSTMODEL_RECOMPUTE_FULL] = "full",
};

const char *costmodel_recompute_name(enum costmodel_recompute r)
{
	if ((int)r < 0 || r >= COSTMODEL_NUM_RECOMPUTE)
		return NULL;
	return recompute_names[r];
}

int costmodel_recompute_find(const char *name)
{
	for (int r = 0; r < COSTMODEL_NUM_RECOMPUTE; r++)
		if (strcmp(name, recompute_names[r]) == 0)
			return r;
	return -1;
}

static void templates_free(struct costmodel_template *t, int n)
{
	for (int i = 0; i < n; i++)
		free(t[i].placement);
	free(t);
}

void costmodel_plan_free(struct costmodel_plan *plan)
{
	if (!plan)
		return;
	templates_free(plan->templates, plan->ntemplates);
	free(plan);
}

int costmodel_stage_dp(const struct costmodel_stage *st)
{
	return st->dp > 1 ? st->dp : 1;
}

int costmodel_template_slots(const struct costmodel_template *t)
{
	int n = 0;

	for (int s = 0; s < t->nstages; s++)
		n += costmodel_stage_dp(&t->stages[s]);
	return n;
}

struct costmodel_group *costmodel_template_group(const struct costmodel_template *t,
						 int replica, int stage, int k)
{
	int slot = k;

	for (int s = 0; s < stage; s++)
		slot += costmodel_stage_dp(&t->stages[s]);
	return &t->placement[(size_t)replica * costmodel_template_slots(t) + slot];
}

int cm_template_alloc_placement(struct costmodel_template *t)
{
	size_t n = (size_t)t->replicas * (size_t)costmodel_template_slots(t);

	free(t->placement);
	t->placement = calloc(n ? n : 1, sizeof(*t->placement));
	return t->placement ? 0 : -ENOMEM;
}

int costmodel_plan_copy(struct costmodel_plan *dst,
			const struct costmodel_plan *src)
{
	struct costmodel_template *t = NULL;

	if (src->ntemplates) {
		t = calloc((size_t)src->ntemplates, sizeof(*t));
		if (!t)
			return -ENOMEM;
	}
	for (int i = 0; i < src->ntemplates; i++) {
		size_t n = (size_t)src->templates[i].replicas *
			   (size_t)costmodel_template_slots(&src->templates[i]);

		t[i] = src->templates[i];
		t[i].placement = malloc((n ? n : 1) * sizeof(*t[i].placement));
		if (!t[i].placement) {
			templates_free(t, i);
			return -ENOMEM;
		}
		memcpy(t[i].placement, src->templates[i].placement,
		       n * sizeof(*t[i].placement));
	}
	templates_free(dst->templates, dst->ntemplates);
	*dst = *src;
	dst->templates = t;
	return 0;
}

struct costmodel_plan *costmodel_plan_clone(const struct costmodel_plan *plan)
{
	struct costmodel_plan *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	if (costmodel_plan_copy(c, plan) < 0) {
		free(c);
		return NULL;
	}
	return c;
}

int costmodel_plan_total_gpus(const struct costmodel_plan *plan)
{
	int n = 0;

	for (int i = 0; i < plan->ntemplates; i++) {
		const struct costmodel_template *t = &plan->templates[i];

		for (int s = 0; s < t->nstages; s++)
			n += t->replicas * costmodel_stage_dp(&t->stages[s]) *
			     t->stages[s].tp;
	}
	return n;
}

/* ------------------------------------------------------------------ */

/*
 * Micro-batches a plan gives (all templates non-zero; zero means the
 * pricing distributes the batch) must cover the global batch, and may
 * exceed it by less than one micro-batch per pipeline: the most the
 * pricing's own distribution ever adds.  Anything more is work the
 * iteration does for no sample.
 */
static int check_micro_batches(const struct costmodel_plan *plan)
{
	int64_t have = 0, pipelines = 0, need;
	bool all_one = true;

	for (int i = 0; i < plan->ntemplates; i++) {
		const struct costmodel_template *t = &plan->templates[i];

		if (t->micro_batches == 0)
			return 0;
		have += (int64_t)t->replicas * t->micro_batches;
		pipelines += t->replicas;
		all_one = all_one && t->micro_batches == 1;
	}
	need = ((int64_t)plan->global_batch + plan->micro_batch - 1) /
	       plan->micro_batch;
	if (have < need)
		return ar_seterr(-AR_EINVAL, "plan: the templates' micro_batches cover %" PRId64 " samples of the global batch of %d",
				 have * plan->micro_batch, plan->global_batch);
	if (!all_one && have >= need + pipelines)
		return ar_seterr(-AR_EINVAL, "plan: the templates' micro_batches give %" PRId64 " micro-batches of %d samples for a global batch of %d (at most %" PRId64 ")",
				 have, plan->micro_batch, plan->global_batch,
				 need + pipelines - 1);
	return 0;
}

int costmodel_plan_check(const struct costmodel *cm,
			 const struct costmodel_cluster *cl,
			 const struct costmodel_plan *plan)
{
	uint16_t *used;
	int rc = 0;

	/* A stage with dp groups gives each micro_batch / dp samples. */
	int most_dp = 1;

	for (int i = 0; i < plan->ntemplates; i++)
		for (int s = 0; s < plan->templates[i].nstages && s < COSTMODEL_MAX_DEPTH; s++)
			if (costmodel_stage_dp(&plan->templates[i].stages[s]) > most_dp)
				most_dp = costmodel_stage_dp(&plan->templates[i].stages[s]);
	if (plan->micro_batch < 1 || (plan->micro_batch & (plan->micro_batch - 1)) ||
	    plan->micro_batch > COSTMODEL_MAX_MBS * most_dp)
		return ar_seterr(-AR_EINVAL, "plan: micro_batch %d is not a power of two up to %d",
				 plan->micro_batch, COSTMODEL_MAX_MBS * most_dp);
	if (plan->global_batch < 1 || plan->seq_len < 1)
		return ar_seterr(-AR_EINVAL, "plan: global_batch and seq_len must be positive");
	if (plan->seq_len != cm->model.seq_len)
		return ar_seterr(-AR_EINVAL, "plan: seq_len %d differs from the profiles' %d",
				 plan->seq_len, cm->model.seq_len);
	if (plan->ntemplates < 1)
		return ar_seterr(-AR_EINVAL, "plan: no templates");
	if ((int)plan->recompute < 0 || plan->recompute >= COSTMODEL_NUM_RECOMPUTE)
		return ar_seterr(-AR_EINVAL, "plan: recompute mode %d is not none, selective or full",
				 (int)plan->recompute);
	used = calloc(cl->nnodes ? cl->nnodes : 1, sizeof(*used));
	if (!used)
		return -ENOMEM;
	for (int i = 0; i < plan->ntemplates && rc == 0; i++) {
		const struct costmodel_template *t = &plan->templates[i];
		int next = 0;

		if (t->nstages < 1 || t->nstages > COSTMODEL_MAX_DEPTH) {
			rc = ar_seterr(-AR_EINVAL, "template %d: %d stages (1 to %d)",
				       i, t->nstages, COSTMODEL_MAX_DEPTH);
			break;
		}
		if (t->replicas < 1 || t->micro_batches < 0) {
			rc = ar_seterr(-AR_EINVAL, "template %d: replicas must be positive",
				       i);
			break;
		}
		for (int s = 0; s < t->nstages && rc == 0; s++) {
			const struct costmodel_stage *st = &t->stages[s];
			int64_t w = (int64_t)st->tp * costmodel_stage_dp(st) * t->replicas;

			if (st->gpu < 0 || st->gpu >= cm->ngpus)
				rc = ar_seterr(-AR_EINVAL, "template %d stage %d: bad GPU type",
					       i, s);
			else if (cm_log2(st->tp) < 0 || st->tp > COSTMODEL_MAX_TP)
				rc = ar_seterr(-AR_EINVAL, "template %d stage %d: tp %d is not 1, 2, 4 or 8",
					       i, s, st->tp);
			else if (st->first_layer != next || st->last_layer < st->first_layer ||
				 st->last_layer >= cm->nlayers)
				rc = ar_seterr(-AR_EINVAL, "template %d stage %d: layers [%d, %d] do not continue the pipeline at layer %d",
					       i, s, st->first_layer, st->last_layer, next);
			else if (st->ep < 1 || st->etp < 1 || st->edp < 1 ||
				 (int64_t)st->ep * st->etp * st->edp != w)
				rc = ar_seterr(-AR_EINVAL, "template %d stage %d: ep*etp*edp = %d*%d*%d is not tp*dp*replicas = %" PRId64,
					       i, s, st->ep, st->etp, st->edp, w);
			else if (st->dp < 0 || st->dp > COSTMODEL_MAX_STAGE_DP ||
				 plan->micro_batch % costmodel_stage_dp(st) ||
				 plan->micro_batch / costmodel_stage_dp(st) > COSTMODEL_MAX_MBS)
				rc = ar_seterr(-AR_EINVAL, "template %d stage %d: dp %d does not share the micro-batch of %d into groups of 1 to %d samples",
					       i, s, st->dp, plan->micro_batch, COSTMODEL_MAX_MBS);
			else if (st->etp > st->tp || st->tp % st->etp)
				rc = ar_seterr(-AR_EINVAL, "template %d stage %d: etp %d must divide tp %d",
					       i, s, st->etp, st->tp);
			else if (cm->model.experts > 0 && cm->model.experts % st->ep)
				rc = ar_seterr(-AR_EINVAL, "template %d stage %d: ep %d does not divide %d experts",
					       i, s, st->ep, cm->model.experts);
			next = st->last_layer + 1;
		}
		if (rc == 0 && next != cm->nlayers)
			rc = ar_seterr(-AR_EINVAL, "template %d: layers end at %d, the model has %d",
				       i, next - 1, cm->nlayers);
		for (int r = 0; r < t->replicas && rc == 0; r++) {
			for (int s = 0; s < t->nstages && rc == 0; s++) {
				for (int q = 0; q < costmodel_stage_dp(&t->stages[s]) && rc == 0;
				     q++) {
					const struct costmodel_group *g =
						costmodel_template_group(t, r, s, q);
					const struct costmodel_node *n;

					if (g->node < 0 || (size_t)g->node >= cl->nnodes) {
						rc = ar_seterr(-AR_EINVAL, "template %d replica %d stage %d: no such node",
							       i, r, s);
						break;
					}
					n = &cl->nodes[g->node];
					if (n->gpu != t->stages[s].gpu) {
						rc = ar_seterr(-AR_EINVAL, "template %d replica %d stage %d: node %s has %s GPUs, the stage wants %s",
							       i, r, s, n->name,
							       cm->gpus[n->gpu].name,
							       cm->gpus[t->stages[s].gpu].name);
						break;
					}
					for (int k = 0; k < t->stages[s].tp; k++) {
						int gi = g->gpu[k];

						if (gi >= n->gpus) {
							rc = ar_seterr(-AR_EINVAL, "template %d replica %d stage %d: node %s has no GPU %d",
								       i, r, s, n->name, gi);
							break;
						}
						if (used[g->node] & (1u << gi)) {
							rc = ar_seterr(-AR_EINVAL, "node %s GPU %d is used twice",
								       n->name, gi);
							break;
						}
						used[g->node] |= (uint16_t)(1u << gi);
					}
				}
			}
		}
	}
	free(used);
	if (rc == 0)
		rc = check_micro_batches(plan);
	return rc;
}

/* ------------------------------------------------------------------ */

static json_t *group_json(const struct costmodel_cluster *cl,
			  const struct costmodel_group *g, int tp)
{
	json_t *gpus = json_array();

	for (int k = 0; k < tp; k++)
		json_array_append_new(gpus, json_integer(g->gpu[k]));
	return json_pack("{s:s, s:o}", "node", cl->nodes[g->node].name,
			 "gpus", gpus);
}

/* Round to @digits decimals so JSON stays readable and diffs stay small. */
static double rounded(double v, int digits)
{
	double f = pow(10, digits);

	return round(v * f) / f;
}

json_t *costmodel_plan_to_json(const struct costmodel *cm,
			       const struct costmodel_cluster *cl,
			       const struct costmodel_plan *plan)
{
	json_t *root, *templates, *unused, *planner;
	uint16_t *used;

	used = calloc(cl->nnodes ? cl->nnodes : 1, sizeof(*used));
	if (!used)
		return NULL;
	root = json_pack("{s:i, s:s, s:i, s:i, s:i, s:s, s:b, s:b, s:b}",
			 "arachne_plan", PLAN_FORMAT_VERSION,
			 "model", cm->model.name,
			 "global_batch", plan->global_batch,
			 "seq_len", plan->seq_len,
			 "micro_batch", plan->micro_batch,
			 "recompute", costmodel_recompute_name(plan->recompute),
			 "distributed_optimizer", plan->distributed_optimizer,
			 "overlap_grad_reduce", plan->overlap_grad_reduce,
			 "overlap_param_gather", plan->overlap_param_gather);
	templates = json_array();
	unused = json_array();
	for (int i = 0; i < plan->ntemplates; i++) {
		const struct costmodel_template *t = &plan->templates[i];
		json_t *stages = json_array(), *placement = json_array();

		for (int s = 0; s < t->nstages; s++) {
			const struct costmodel_stage *st = &t->stages[s];
			json_t *js = json_pack(
				"{s:s, s:i, s:[i,i], s:i, s:i, s:i, s:f}",
				"gpu", cm->gpus[st->gpu].name, "tp", st->tp,
				"layers", st->first_layer, st->last_layer,
				"ep", st->ep, "etp", st->etp, "edp", st->edp,
				"peak_mem_gib", rounded(st->peak_mem_gib, 2));

			/* written only where it is not 1, so other plans read as before */
			if (costmodel_stage_dp(st) > 1)
				json_object_set_new(js, "dp", json_integer(st->dp));
			json_array_append_new(stages, js);
		}
		for (int r = 0; r < t->replicas; r++) {
			json_t *row = json_array();

			for (int s = 0; s < t->nstages; s++) {
				for (int k = 0; k < costmodel_stage_dp(&t->stages[s]); k++) {
					const struct costmodel_group *g =
						costmodel_template_group(t, r, s, k);

					json_array_append_new(row,
							      group_json(cl, g, t->stages[s].tp));
					for (int q = 0; q < t->stages[s].tp; q++)
						used[g->node] |= (uint16_t)(1u << g->gpu[q]);
				}
			}
			json_array_append_new(placement, row);
		}
		json_array_append_new(templates, json_pack(
			"{s:i, s:i, s:o, s:o}", "replicas", t->replicas,
			"micro_batches", t->micro_batches, "stages", stages,
			"placement", placement));
	}
	for (size_t n = 0; n < cl->nnodes; n++) {
		json_t *gpus = json_array();

		for (int k = 0; k < cl->nodes[n].gpus; k++)
			if (!(used[n] & (1u << k)))
				json_array_append_new(gpus, json_integer(k));
		if (json_array_size(gpus))
			json_array_append_new(unused, json_pack("{s:s, s:o}",
				"node", cl->nodes[n].name, "gpus", gpus));
		else
			json_decref(gpus);
	}
	free(used);
	json_object_set_new(root, "templates", templates);
	json_object_set_new(root, "unused", unused);
	json_object_set_new(root, "predicted", json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
		"pipeline_s", rounded(plan->predicted.pipeline_s, 6),
		"sync_s", rounded(plan->predicted.sync_s, 6),
		"step_s", rounded(plan->predicted.step_s, 6),
		"iter_s", rounded(plan->predicted.iter_s, 6),
		"iters_per_s", rounded(plan->predicted.iters_per_s, 6),
		"samples_per_s", rounded(plan->predicted.samples_per_s, 4),
		"usd_per_hour", rounded(plan->predicted.usd_per_hour, 4),
		"usd_per_sample", plan->predicted.usd_per_sample));
	planner = json_pack("{s:s, s:f, s:I, s:I, s:b}",
		"name", plan->planner[0] ? plan->planner : "manual",
		"planning_s", rounded(plan->planning_s, 4),
		"plans_priced", (json_int_t)plan->plans_priced,
		"states_explored", (json_int_t)plan->states_explored,
		"search_complete", plan->search_complete);
	if (plan->steering[0])
		json_object_set_new(planner, "steering", json_string(plan->steering));
	if (plan->objective[0])
		json_object_set_new(planner, "objective", json_string(plan->objective));
	if (plan->planner_estimate_samples_per_s > 0)
		json_object_set_new(planner, "estimated_samples_per_s",
			json_real(rounded(plan->planner_estimate_samples_per_s, 4)));
	json_object_set_new(root, "planner", planner);
	return root;
}

/* ------------------------------------------------------------------ */

/*
 * Bounds of a plan's integers (docs/limits.md).  Structural rules (powers
 * of two, layers that continue the pipeline, every GPU once) are
 * costmodel_plan_check()'s; these keep every later product far from
 * overflow: replicas <= GPUs of the cluster <= 2^20, ep <= 4096,
 * etp <= 8, dp <= 16, edp <= 2^27.
 */
#define PLAN_MAX_EP		4096
#define PLAN_MAX_REPLICAS	(1 << 20)
#define PLAN_MAX_BATCH		(1 << 24)
#define PLAN_MAX_SEQ		(1 << 20)
#define PLAN_MAX_EDP		(PLAN_MAX_REPLICAS * COSTMODEL_MAX_TP * COSTMODEL_MAX_MBS)

/* An optional boolean member of the plan. */
static int get_bool(const json_t *obj, const char *key, bool *out)
{
	json_t *v = json_object_get(obj, key);

	if (!v)
		return 0;
	if (!json_is_boolean(v))
		return ar_seterr(-AR_EINVAL, "plan: \"%s\" must be true or false", key);
	*out = json_is_true(v);
	return 0;
}

static int parse_stage(const struct costmodel *cm, const json_t *js,
		       const char *what, int replicas,
		       struct costmodel_stage *st)
{
	static const char *const keys[] = {
		"gpu", "tp", "layers", "ep", "etp", "edp", "dp", "peak_mem_gib", NULL
	};
	char name[192];
	int64_t layer;
	json_t *v;
	int rc;

	if (!json_is_object(js))
		return ar_seterr(-AR_EINVAL, "%s: not an object", what);
	if ((rc = ar_json_check_keys(js, keys, what)) < 0)
		return rc;
	v = json_object_get(js, "gpu");
	if (!json_is_string(v) || (st->gpu = costmodel_gpu_find(cm, json_string_value(v))) < 0)
		return ar_seterr(-AR_EINVAL, "%s: \"gpu\" must name a known GPU profile",
				 what);
	if ((rc = ar_json_int(js, "tp", what, 1, COSTMODEL_MAX_TP, true, &st->tp)) < 0)
		return rc;
	v = json_object_get(js, "layers");
	if (!json_is_array(v) || json_array_size(v) != 2)
		return ar_seterr(-AR_EINVAL, "%s: \"layers\" must be [first, last]",
				 what);
	snprintf(name, sizeof(name), "%s: \"layers\"[0]", what);
	if ((rc = ar_json_int64_value(json_array_get(v, 0), name, 0,
				      cm->nlayers - 1, &layer)) < 0)
		return rc;
	st->first_layer = (int)layer;
	snprintf(name, sizeof(name), "%s: \"layers\"[1]", what);
	if ((rc = ar_json_int64_value(json_array_get(v, 1), name, 0,
				      cm->nlayers - 1, &layer)) < 0)
		return rc;
	st->last_layer = (int)layer;
	st->ep = st->etp = 1;
	st->edp = 0;		/* 0: the whole stage, set below */
	st->dp = 1;
	if ((rc = ar_json_int(js, "ep", what, 1, PLAN_MAX_EP, false, &st->ep)) < 0 ||
	    (rc = ar_json_int(js, "etp", what, 1, COSTMODEL_MAX_TP, false, &st->etp)) < 0 ||
	    (rc = ar_json_int(js, "edp", what, 1, PLAN_MAX_EDP, false, &st->edp)) < 0 ||
	    (rc = ar_json_int(js, "dp", what, 1, COSTMODEL_MAX_STAGE_DP, false, &st->dp)) < 0)
		return rc;
	v = json_object_get(js, "peak_mem_gib");
	if (v && (!json_is_number(v) || json_number_value(v) < 0))
		return ar_seterr(-AR_EINVAL, "%s: \"peak_mem_gib\" must be a non-negative number",
				 what);
	if (st->edp == 0) {
		/* The stage's GPUs not spent on EP x ETP; bounded above. */
		int64_t gpus = (int64_t)st->tp * st->dp * replicas;
		int64_t ep_etp = (int64_t)st->ep * st->etp;

		if (gpus % ep_etp)
			return ar_seterr(-AR_EINVAL, "%s: ep*etp = %d*%d does not divide the stage's %" PRId64 " GPUs (tp*dp*replicas)",
					 what, st->ep, st->etp, gpus);
		st->edp = (int)(gpus / ep_etp);
	}
	return 0;
}

static int parse_group(const struct costmodel_cluster *cl, const json_t *jg,
		       int tp, const char *what, struct costmodel_group *g)
{
	json_t *v = json_object_get(jg, "node"), *gpus, *e;
	static const char *const keys[] = { "node", "gpus", NULL };
	size_t k;
	int rc;

	if (!json_is_object(jg))
		return ar_seterr(-AR_EINVAL, "%s: not an object", what);
	if ((rc = ar_json_check_keys(jg, keys, what)) < 0)
		return rc;
	if (!json_is_string(v))
		return ar_seterr(-AR_EINVAL, "%s: \"node\" must be a node name", what);
	g->node = costmodel_cluster_node_find(cl, json_string_value(v));
	if (g->node < 0)
		return ar_seterr(-AR_EINVAL, "%s: node \"%s\" is not in the cluster",
				 what, json_string_value(v));
	gpus = json_object_get(jg, "gpus");
	if (!json_is_array(gpus) || (int)json_array_size(gpus) != tp)
		return ar_seterr(-AR_EINVAL, "%s: \"gpus\" must list the stage's %d GPUs",
				 what, tp);
	json_array_foreach(gpus, k, e) {
		if (!json_is_integer(e) || json_integer_value(e) < 0 ||
		    json_integer_value(e) >= COSTMODEL_MAX_NODE_GPUS)
			return ar_seterr(-AR_EINVAL, "%s: gpus[%zu] is not a GPU index",
					 what, k);
		g->gpu[k] = (uint8_t)json_integer_value(e);
	}
	return 0;
}

static int parse_template(const struct costmodel *cm,
			  const struct costmodel_cluster *cl, const json_t *jt,
			  int i, struct costmodel_template *t)
{
	/* Every replica takes a GPU at least. */
	int max_replicas = costmodel_cluster_total_gpus(cl);
	static const char *const keys[] = {
		"replicas", "micro_batches", "stages", "placement", NULL
	};
	json_t *stages, *placement, *row, *e;
	char what[96];
	size_t s, r;
	int rc;

	snprintf(what, sizeof(what), "plan: templates[%d]", i);
	if (!json_is_object(jt))
		return ar_seterr(-AR_EINVAL, "%s: not an object", what);
	if ((rc = ar_json_check_keys(jt, keys, what)) < 0 ||
	    (rc = ar_json_int(jt, "replicas", what, 1, max_replicas, true,
			      &t->replicas)) < 0 ||
	    (rc = ar_json_int(jt, "micro_batches", what, 0, PLAN_MAX_BATCH, false,
			      &t->micro_batches)) < 0)
		return rc;
	stages = json_object_get(jt, "stages");
	if (!json_is_array(stages) || json_array_size(stages) < 1 ||
	    json_array_size(stages) > COSTMODEL_MAX_DEPTH)
		return ar_seterr(-AR_EINVAL, "%s: \"stages\" must hold 1 to %d stages",
				 what, COSTMODEL_MAX_DEPTH);
	t->nstages = (int)json_array_size(stages);
	json_array_foreach(stages, s, e) {
		char swhat[160];

		snprintf(swhat, sizeof(swhat), "%s.stages[%zu]", what, s);
		if ((rc = parse_stage(cm, e, swhat, t->replicas, &t->stages[s])) < 0)
			return rc;
	}
	placement = json_object_get(jt, "placement");
	if (!json_is_array(placement) ||
	    (int)json_array_size(placement) != t->replicas)
		return ar_seterr(-AR_EINVAL, "%s: \"placement\" must have one row per replica (%d)",
				 what, t->replicas);
	if ((rc = cm_template_alloc_placement(t)) < 0)
		return rc;
	json_array_foreach(placement, r, row) {
		size_t slot = 0;

		if (!json_is_array(row) ||
		    (int)json_array_size(row) != costmodel_template_slots(t))
			return ar_seterr(-AR_EINVAL, "%s: placement[%zu] must have one entry per TP group: a stage's dp of them (%d)",
					 what, r, costmodel_template_slots(t));
		for (s = 0; s < (size_t)t->nstages; s++) {
			const struct costmodel_stage *st = &t->stages[s];

			for (int k = 0; k < st->dp; k++, slot++) {
				char gwhat[160];

				snprintf(gwhat, sizeof(gwhat), "%s.placement[%zu][%zu]",
					 what, r, slot);
				rc = parse_group(cl, json_array_get(row, slot),
						 st->tp, gwhat,
						 costmodel_template_group(t, (int)r, (int)s, k));
				if (rc < 0)
					return rc;
			}
		}
	}
	return 0;
}

int costmodel_plan_from_json(const struct costmodel *cm,
			     const struct costmodel_cluster *cl,
			     const json_t *root, struct costmodel_plan **planp)
{
	static const char *const keys[] = {
		"arachne_plan", "model", "global_batch", "seq_len",
		"micro_batch", "recompute", "distributed_optimizer",
		"overlap_grad_reduce", "overlap_param_gather", "templates",
		"unused", "predicted", "planner", NULL
	};
	struct costmodel_plan *plan;
	json_t *v, *templates, *jt;
	size_t i;
	int rc, version = 0;

	*planp = NULL;
	if (!json_is_object(root))
		return ar_seterr(-AR_EINVAL, "plan: not a JSON object");
	if ((rc = ar_json_check_keys(root, keys, "plan")) < 0 ||
	    (rc = ar_json_int(root, "arachne_plan", "plan", 0, INT_MAX, true,
			      &version)) < 0)
		return rc;
	if (version != PLAN_FORMAT_VERSION)
		return ar_seterr(-AR_EINVAL, "plan: format version %d, this build reads %d",
				 version, PLAN_FORMAT_VERSION);
	v = json_object_get(root, "model");
	if (!json_is_string(v) || strcmp(json_string_value(v), cm->model.name))
		return ar_seterr(-AR_EINVAL, "plan: \"model\" must be \"%s\"",
				 cm->model.name);
	plan = costmodel_plan_create(cm);
	if (!plan)
		return -ENOMEM;
	if ((rc = ar_json_int(root, "global_batch", "plan", 1, PLAN_MAX_BATCH, false,
			      &plan->global_batch)) < 0 ||
	    (rc = ar_json_int(root, "seq_len", "plan", 1, PLAN_MAX_SEQ, false,
			      &plan->seq_len)) < 0 ||
	    (rc = ar_json_int(root, "micro_batch", "plan", 1, COSTMODEL_MAX_MBS, true,
			      &plan->micro_batch)) < 0)
		goto err;
	v = json_object_get(root, "recompute");
	if (v && (!json_is_string(v) ||
		  (rc = costmodel_recompute_find(json_string_value(v))) < 0)) {
		rc = ar_seterr(-AR_EINVAL, "plan: \"recompute\" must be \"none\", \"selective\" or \"full\"");
		goto err;
	}
	if (v)
		plan->recompute = (enum costmodel_recompute)rc;
	if ((rc = get_bool(root, "distributed_optimizer", &plan->distributed_optimizer)) < 0 ||
	    (rc = get_bool(root, "overlap_grad_reduce", &plan->overlap_grad_reduce)) < 0 ||
	    (rc = get_bool(root, "overlap_param_gather", &plan->overlap_param_gather)) < 0)
		goto err;
	/* What the plan says of itself is output; only its types are held. */
	v = json_object_get(root, "planner");
	if (v && (!json_is_object(v) ||
		  (json_object_get(v, "name") &&
		   !json_is_string(json_object_get(v, "name"))))) {
		rc = ar_seterr(-AR_EINVAL, "plan: \"planner\" must be an object with a string \"name\"");
		goto err;
	}
	if ((json_object_get(root, "predicted") &&
	     !json_is_object(json_object_get(root, "predicted"))) ||
	    (json_object_get(root, "unused") &&
	     !json_is_array(json_object_get(root, "unused")))) {
		rc = ar_seterr(-AR_EINVAL, "plan: \"predicted\" must be an object and \"unused\" an array");
		goto err;
	}
	if (json_is_string(json_object_get(v, "name")))
		snprintf(plan->planner, sizeof(plan->planner), "%s",
			 json_string_value(json_object_get(v, "name")));
	templates = json_object_get(root, "templates");
	if (!json_is_array(templates) || json_array_size(templates) < 1 ||
	    json_array_size(templates) > PLAN_MAX_TEMPLATES) {
		rc = ar_seterr(-AR_EINVAL, "plan: \"templates\" must be a non-empty array");
		goto err;
	}
	plan->templates = calloc(json_array_size(templates), sizeof(*plan->templates));
	if (!plan->templates) {
		rc = -ENOMEM;
		goto err;
	}
	json_array_foreach(templates, i, jt) {
		plan->ntemplates = (int)i + 1;
		if ((rc = parse_template(cm, cl, jt, (int)i, &plan->templates[i])) < 0)
			goto err;
	}
	if ((rc = costmodel_plan_check(cm, cl, plan)) < 0)
		goto err;
	*planp = plan;
	return 0;
err:
	costmodel_plan_free(plan);
	return rc;
}
