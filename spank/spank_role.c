/*
 * spank_role.c - one task's role in a plan.
 *
 * A plan (docs/spank.md, ARCHITECTURE.md) is a list of templates; each is
 * a pipeline of stages replicated `replicas` times, and `placement` has one
 * row per replica with one {node, gpus} entry per stage.  A task is the
 * process that drives one GPU: the task with local id L on a node drives
 * the L-th GPU the job holds there, which is how Slurm orders
 * CUDA_VISIBLE_DEVICES.  Data-parallel ranks run over the replicas of all
 * templates in plan order, so every pipeline has one dp rank.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "arachne.h"

static unsigned role_uint(const json_t *o, const char *key, unsigned dflt)
{
	const json_t *v = json_object_get(o, key);

	return json_is_integer(v) && json_integer_value(v) >= 0 ?
	       (unsigned)json_integer_value(v) : dflt;
}

static unsigned role_replicas_total(const json_t *templates)
{
	const json_t *t;
	unsigned total = 0;
	size_t i;

	json_array_foreach(templates, i, t)
		total += role_uint(t, "replicas", 0);
	return total;
}

/* Sets r from stage @s of template @t at replica @rep, tp position @j. */
static int role_fill(const json_t *t, size_t ti, size_t rep, size_t s,
		     size_t j, unsigned dp_first, unsigned dp_size,
		     struct task_role *r)
{
	const json_t *stages = json_object_get(t, "stages");
	const json_t *stage = json_array_get(stages, s);
	const json_t *row = json_array_get(json_object_get(t, "placement"),
					   rep);
	const json_t *layers = json_object_get(stage, "layers");
	const char *first = json_string_value(
		json_object_get(json_array_get(row, 0), "node"));

	if (!json_is_object(stage) || json_array_size(layers) != 2 || !first)
		return -1;
	r->found = true;
	r->template = (unsigned)ti;
	r->stage = (unsigned)s;
	r->pp_size = (unsigned)json_array_size(stages);
	r->tp_size = role_uint(stage, "tp", 1);
	r->tp_rank = r->tp_size ? (unsigned)j % r->tp_size : 0;
	r->dp_rank = dp_first + (unsigned)rep;
	r->dp_size = dp_size;
	r->pipeline = r->dp_rank;
	r->layer_first = (long)json_integer_value(json_array_get(layers, 0));
	r->layer_last = (long)json_integer_value(json_array_get(layers, 1));
	r->ep = role_uint(stage, "ep", 1);
	r->etp = role_uint(stage, "etp", 1);
	r->edp = role_uint(stage, "edp", 1);
	snprintf(r->rdzv_node, sizeof(r->rdzv_node), "%s", first);
	return 0;
}

int role_find(const json_t *plan, const char *node, unsigned gpu,
	      struct task_role *r)
{
	const json_t *templates = json_object_get(plan, "templates");
	unsigned dp_first = 0, dp_size;
	const json_t *t;
	size_t ti;

	memset(r, 0, sizeof(*r));
	if (!json_is_array(templates))
		return -1;
	dp_size = role_replicas_total(templates);
	json_array_foreach(templates, ti, t) {
		const json_t *placement = json_object_get(t, "placement");
		const json_t *row, *st;
		size_t rep, si;

		if (!json_is_array(placement))
			return -1;
		/*
		 * A stage with data parallelism of its own ("dp" > 1, Metis's
		 * plans) has several entries a row and no role in the ranks
		 * below: such plans are for comparison, not for running.
		 */
		json_array_foreach(json_object_get(t, "stages"), si, st)
			if (role_uint(st, "dp", 1) > 1)
				return -1;
		json_array_foreach(placement, rep, row) {
			const json_t *e;
			size_t s;

			json_array_foreach(row, s, e) {
				const char *n = json_string_value(
					json_object_get(e, "node"));
				const json_t *gpus = json_object_get(e, "gpus");
				const json_t *g;
				size_t j;

				if (!n || !json_is_array(gpus))
					return -1;
				if (strcmp(n, node))
					continue;
				json_array_foreach(gpus, j, g) {
					if (json_integer_value(g) != gpu)
						continue;
					return role_fill(t, ti, rep, s, j,
							 dp_first, dp_size, r);
				}
			}
		}
		dp_first += role_uint(t, "replicas", 0);
	}
	return 0;
}
