/* scenario.c - plan transitions built by hand (see scenario.h). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ar.h"
#include "scenario.h"

const char *const scenario_names[] = {
	"tp2to4", "tp4to2", "stages", "replica-add", "replica-remove",
	"gpu-type", "ep", "ep-relayout", "mixed-tp", "join", "pair", "fresh",
	NULL
};

struct costmodel_plan *scenario_plan_new(void)
{
	struct costmodel_plan *p = calloc(1, sizeof(*p));

	if (p) {
		p->micro_batch = 1;
		p->global_batch = 64;
		p->seq_len = 2048;
	}
	return p;
}

struct costmodel_template *scenario_template_add(struct costmodel_plan *p,
						 int nstages, int replicas)
{
	struct costmodel_template *v, *tm;

	v = realloc(p->templates, (p->ntemplates + 1) * sizeof(*v));
	if (!v)
		return NULL;
	p->templates = v;
	tm = &v[p->ntemplates];
	memset(tm, 0, sizeof(*tm));
	tm->placement = calloc(nstages * replicas + 1, sizeof(*tm->placement));
	if (!tm->placement)
		return NULL;
	tm->nstages = nstages;
	tm->replicas = replicas;
	tm->micro_batches = 8;
	p->ntemplates++;
	return tm;
}

void scenario_stage_set(struct costmodel_template *tm, int s, int tp,
			int first, int last)
{
	struct costmodel_stage *st = &tm->stages[s];

	st->tp = tp;
	st->first_layer = first;
	st->last_layer = last;
	st->ep = 1;
	st->etp = 1;
	st->edp = tp * tm->replicas;
}

void scenario_stage_experts(struct costmodel_template *tm, int s, int ep,
			    int etp, int edp)
{
	tm->stages[s].ep = ep;
	tm->stages[s].etp = etp;
	tm->stages[s].edp = edp;
}

void scenario_place(struct costmodel_template *tm, int r, int s, int node,
		    int gpu0)
{
	struct costmodel_group *g = &tm->placement[r * tm->nstages + s];

	g->node = node;
	for (int k = 0; k < tm->stages[s].tp; k++)
		g->gpu[k] = (uint8_t)(gpu0 + k);
}

void scenario_plan_free(struct costmodel_plan *p)
{
	if (!p)
		return;
	for (int t = 0; t < p->ntemplates; t++)
		free(p->templates[t].placement);
	free(p->templates);
	free(p);
}

/* Odd sizes, so that TP and expert splits do not divide evenly. */
struct migrate_layout *scenario_layout_dense(int nlayers, uint64_t scale)
{
	struct migrate_layout *l = migrate_layout_create(nlayers);

	for (int i = 0; l && i < nlayers; i++) {
		uint64_t w = (1000 + 37 * (uint64_t)i) * scale + 1;

		l->layers[i].bytes[MIGRATE_KIND_WEIGHT] = w;
		l->layers[i].bytes[MIGRATE_KIND_GRAD] = 2 * w + 1;
		l->layers[i].bytes[MIGRATE_KIND_OPTIM] = 6 * w + 3;
	}
	return l;
}

struct migrate_layout *scenario_layout_moe(int nlayers, uint64_t scale)
{
	struct migrate_layout *l = scenario_layout_dense(nlayers, scale);
	int ex = MIGRATE_PART_EXPERT * MIGRATE_NUM_KINDS;

	for (int i = 1; l && i < nlayers - 1; i++) {
		uint64_t w = (8 * 700 + 8 * (uint64_t)i) * scale + 5;

		l->layers[i].experts = 8;
		l->layers[i].bytes[ex + MIGRATE_KIND_WEIGHT] = w;
		l->layers[i].bytes[ex + MIGRATE_KIND_GRAD] = 2 * w;
		l->layers[i].bytes[ex + MIGRATE_KIND_OPTIM] = 6 * w + 7;
	}
	return l;
}

struct migrate_layout *scenario_layout_moe_even(int nlayers, uint64_t scale)
{
	struct migrate_layout *l = scenario_layout_dense(nlayers, scale);
	int ex = MIGRATE_PART_EXPERT * MIGRATE_NUM_KINDS;

	for (int i = 1; l && i < nlayers - 1; i++) {
		uint64_t w = 8 * 2 * (350 + (uint64_t)i) * scale;

		l->layers[i].experts = 8;
		l->layers[i].bytes[ex + MIGRATE_KIND_WEIGHT] = w;
		l->layers[i].bytes[ex + MIGRATE_KIND_GRAD] = 2 * w;
		l->layers[i].bytes[ex + MIGRATE_KIND_OPTIM] = 6 * w;
	}
	return l;
}

struct migrate_topo *scenario_topo(int nnodes, int gpus)
{
	struct migrate_topo *t = migrate_topo_create(nnodes);

	for (int n = 0; t && n < nnodes; n++) {
		snprintf(t->nodes[n].name, sizeof(t->nodes[n].name), "n%d", n);
		t->nodes[n].gpus = gpus;
		t->nodes[n].intra_GBps = 25.0;
		t->nodes[n].nic_GBps = 12.5;
	}
	return t;
}

/* One pipeline of one stage holding every layer at @tp on (node, gpu0). */
static struct costmodel_plan *one_stage(int nlayers, int tp, int node,
					int gpu0)
{
	struct costmodel_plan *p = scenario_plan_new();
	struct costmodel_template *tm = scenario_template_add(p, 1, 1);

	scenario_stage_set(tm, 0, tp, 0, nlayers - 1);
	scenario_place(tm, 0, 0, node, gpu0);
	return p;
}

/* Two stages split after @cut, TP 2, on nodes n0 and n1; @replicas rows. */
static struct costmodel_plan *two_stages(int nlayers, int cut, int replicas,
					 const int *nodes0, const int *nodes1)
{
	struct costmodel_plan *p = scenario_plan_new();
	struct costmodel_template *tm = scenario_template_add(p, 2, replicas);

	scenario_stage_set(tm, 0, 2, 0, cut);
	scenario_stage_set(tm, 1, 2, cut + 1, nlayers - 1);
	for (int r = 0; r < replicas; r++) {
		scenario_place(tm, r, 0, nodes0[r], 0);
		scenario_place(tm, r, 1, nodes1[r], 0);
	}
	return p;
}

int scenario_build(const char *name, struct scenario *sc)
{
	const int nl = 6;

	memset(sc, 0, sizeof(*sc));
	sc->name = name;

	if (!strcmp(name, "tp2to4") || !strcmp(name, "tp4to2")) {
		bool grow = !strcmp(name, "tp2to4");

		sc->layout = scenario_layout_dense(nl, 1);
		sc->topo = scenario_topo(1, 4);
		sc->old_plan = grow ? one_stage(nl, 2, 0, 0) :
				      one_stage(nl, 4, 0, 0);
		sc->new_plan = grow ? one_stage(nl, 4, 0, 0) :
				      one_stage(nl, 2, 0, 2);
	} else if (!strcmp(name, "stages")) {
		static const int n0[] = { 0 }, n1[] = { 1 };

		sc->layout = scenario_layout_dense(nl, 1);
		sc->topo = scenario_topo(2, 2);
		sc->old_plan = two_stages(nl, 2, 1, n0, n1);
		sc->new_plan = two_stages(nl, 3, 1, n0, n1);
	} else if (!strcmp(name, "replica-add") ||
		   !strcmp(name, "replica-remove")) {
		struct costmodel_plan *one = one_stage(nl, 2, 0, 0);
		struct costmodel_plan *two = scenario_plan_new();
		struct costmodel_template *tm;

		tm = scenario_template_add(two, 1, 2);

		scenario_stage_set(tm, 0, 2, 0, nl - 1);
		scenario_place(tm, 0, 0, 0, 0);
		scenario_place(tm, 1, 0, 1, 0);
		sc->layout = scenario_layout_dense(nl, 1);
		sc->topo = scenario_topo(2, 2);
		sc->old_plan = !strcmp(name, "replica-add") ? one : two;
		sc->new_plan = !strcmp(name, "replica-add") ? two : one;
	} else if (!strcmp(name, "gpu-type")) {
		/* Two GPUs of a fast type hand over to a slower node. */
		struct costmodel_plan *p = scenario_plan_new();
		struct costmodel_template *tm = scenario_template_add(p, 2, 1);

		sc->layout = scenario_layout_dense(nl, 1);
		sc->topo = scenario_topo(2, 4);
		sc->topo->nodes[0].gpus = 2;
		sc->topo->nodes[0].intra_GBps = 50.0;
		sc->topo->nodes[0].nic_GBps = 25.0;
		scenario_stage_set(tm, 0, 1, 0, 2);
		scenario_stage_set(tm, 1, 1, 3, nl - 1);
		scenario_place(tm, 0, 0, 0, 0);
		scenario_place(tm, 0, 1, 0, 1);
		sc->old_plan = p;
		sc->new_plan = one_stage(nl, 4, 1, 0);
	} else if (!strcmp(name, "ep")) {
		/* EP 4 over 4 GPUs becomes EP 2 x ETP 2 x EDP 2 over 8. */
		struct costmodel_plan *o = scenario_plan_new();
		struct costmodel_plan *n = scenario_plan_new();
		struct costmodel_template *tm;

		sc->layout = scenario_layout_moe(nl, 1);
		sc->topo = scenario_topo(2, 4);
		tm = scenario_template_add(o, 1, 2);
		scenario_stage_set(tm, 0, 2, 0, nl - 1);
		scenario_stage_experts(tm, 0, 4, 1, 1);
		scenario_place(tm, 0, 0, 0, 0);
		scenario_place(tm, 1, 0, 0, 2);
		tm = scenario_template_add(n, 1, 4);
		scenario_stage_set(tm, 0, 2, 0, nl - 1);
		scenario_stage_experts(tm, 0, 2, 2, 2);
		scenario_place(tm, 0, 0, 0, 0);
		scenario_place(tm, 1, 0, 0, 2);
		scenario_place(tm, 2, 0, 1, 0);
		scenario_place(tm, 3, 0, 1, 2);
		sc->old_plan = o;
		sc->new_plan = n;
	} else if (!strcmp(name, "ep-relayout")) {
		/*
		 * Every node a TP-2 replica; the experts go from EP 4 x EDP 2
		 * to EP 4 x ETP 2 over the 8 GPUs.  Nodes 1 and 2 hold none of
		 * the experts they need: each GPU there takes its halves over
		 * the network from one of two old holders.
		 */
		struct costmodel_plan *p[2];

		sc->layout = scenario_layout_moe_even(nl, 1);
		sc->topo = scenario_topo(4, 2);
		for (int k = 0; k < 2; k++) {
			struct costmodel_template *tm;

			p[k] = scenario_plan_new();
			tm = scenario_template_add(p[k], 1, 4);
			scenario_stage_set(tm, 0, 2, 0, nl - 1);
			scenario_stage_experts(tm, 0, 4, k ? 2 : 1, k ? 1 : 2);
			for (int r = 0; r < 4; r++)
				scenario_place(tm, r, 0, r, 0);
		}
		sc->old_plan = p[0];
		sc->new_plan = p[1];
	} else if (!strcmp(name, "mixed-tp")) {
		/*
		 * Two replicas of one stage, TP 2 on node 0 and TP 4 on node
		 * 1, hand the model to one GPU of node 2: each quarter of a
		 * tensor has a holder in either replica.
		 */
		struct costmodel_plan *o = scenario_plan_new();
		struct costmodel_template *tm;

		sc->layout = scenario_layout_dense(nl, 1);
		sc->topo = scenario_topo(3, 4);
		tm = scenario_template_add(o, 1, 1);
		scenario_stage_set(tm, 0, 2, 0, nl - 1);
		scenario_place(tm, 0, 0, 0, 0);
		tm = scenario_template_add(o, 1, 1);
		scenario_stage_set(tm, 0, 4, 0, nl - 1);
		scenario_place(tm, 0, 0, 1, 0);
		sc->old_plan = o;
		sc->new_plan = one_stage(nl, 1, 2, 0);
	} else if (!strcmp(name, "join")) {
		/* A third node joins as a replica; the split moves too. */
		struct costmodel_plan *o = scenario_plan_new();
		struct costmodel_plan *n = scenario_plan_new();
		struct costmodel_template *tm;

		sc->layout = scenario_layout_dense(nl, 1);
		sc->topo = scenario_topo(3, 2);
		tm = scenario_template_add(o, 2, 2);
		scenario_stage_set(tm, 0, 1, 0, 2);
		scenario_stage_set(tm, 1, 1, 3, nl - 1);
		for (int r = 0; r < 2; r++) {
			scenario_place(tm, r, 0, r, 0);
			scenario_place(tm, r, 1, r, 1);
		}
		tm = scenario_template_add(n, 2, 3);
		scenario_stage_set(tm, 0, 1, 0, 3);
		scenario_stage_set(tm, 1, 1, 4, nl - 1);
		for (int r = 0; r < 3; r++) {
			scenario_place(tm, r, 0, r, 0);
			scenario_place(tm, r, 1, r, 1);
		}
		sc->old_plan = o;
		sc->new_plan = n;
	} else if (!strcmp(name, "pair")) {
		/* Two GPUs swap stages and move the split between them. */
		struct costmodel_plan *o = scenario_plan_new();
		struct costmodel_plan *n = scenario_plan_new();
		struct costmodel_template *tm;

		sc->layout = scenario_layout_dense(nl, 1);
		sc->topo = scenario_topo(1, 2);
		tm = scenario_template_add(o, 2, 1);
		scenario_stage_set(tm, 0, 1, 0, 2);
		scenario_stage_set(tm, 1, 1, 3, nl - 1);
		scenario_place(tm, 0, 0, 0, 0);
		scenario_place(tm, 0, 1, 0, 1);
		tm = scenario_template_add(n, 2, 1);
		scenario_stage_set(tm, 0, 1, 0, 3);
		scenario_stage_set(tm, 1, 1, 4, nl - 1);
		scenario_place(tm, 0, 0, 0, 1);
		scenario_place(tm, 0, 1, 0, 0);
		sc->old_plan = o;
		sc->new_plan = n;
	} else if (!strcmp(name, "fresh")) {
		sc->layout = scenario_layout_dense(nl, 1);
		sc->topo = scenario_topo(1, 4);
		sc->new_plan = one_stage(nl, 4, 0, 0);
	} else {
		return ar_seterr(-AR_ENOTFOUND, "no scenario called %s", name);
	}
	if (!sc->layout || !sc->topo || !sc->new_plan) {
		scenario_fini(sc);
		return -ENOMEM;
	}
	return 0;
}

void scenario_fini(struct scenario *sc)
{
	migrate_layout_free(sc->layout);
	migrate_topo_free(sc->topo);
	scenario_plan_free(sc->old_plan);
	scenario_plan_free(sc->new_plan);
	memset(sc, 0, sizeof(*sc));
}
