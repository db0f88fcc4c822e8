/*
 * spank_job.c - an allocation as plannerd needs it: every node of the job
 * (every component of a HetJob) with the type and number of the GPUs the
 * job holds there.
 *
 * SPANK gives slurmstepd only its own component's id and the local node;
 * slurmctld knows the rest.  The slurm_load_job() and slurm_load_node()
 * calls resolve against the libslurmfull that sbatch, srun and slurmstepd
 * already carry, so the plugin does not link a second copy of libslurm.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

#include "ar.h"
#include "arachne.h"

static int job_node_add(struct job_alloc *a, const char *name,
			const char *gpu, unsigned gpus)
{
	struct job_node *n;

	/* Two HetJob components may share a node: their GPUs add up. */
	for (size_t i = 0; i < a->nnodes; i++) {
		if (!strcmp(a->nodes[i].name, name)) {
			a->nodes[i].gpus += gpus;
			return 0;
		}
	}
	if (AR_GROW(a->nodes, a->nodes_cap, a->nnodes + 1, 8) < 0)
		return -1;
	n = &a->nodes[a->nnodes++];
	memset(n, 0, sizeof(*n));
	snprintf(n->name, sizeof(n->name), "%s", name);
	snprintf(n->gpu, sizeof(n->gpu), "%s", gpu);
	n->gpus = gpus;
	return 0;
}

/* The GPU type a node is configured with, for GRES that named none. */
static void job_node_fill(struct job_alloc *a, node_info_msg_t *ni)
{
	for (size_t i = 0; i < a->nnodes; i++) {
		struct job_node *n = &a->nodes[i];

		for (uint32_t k = 0; ni && k < ni->record_count; k++) {
			node_info_t *r = &ni->node_array[k];
			char type[64];
			unsigned cnt;

			if (!r->name || strcmp(r->name, n->name))
				continue;
			snprintf(n->addr, sizeof(n->addr), "%s",
				 r->node_addr ? r->node_addr : n->name);
			if (!n->gpu[0] && r->gres &&
			    job_gres_parse(r->gres, type, sizeof(type),
					   &cnt) == 0)
				snprintf(n->gpu, sizeof(n->gpu), "%s", type);
		}
		if (!n->addr[0])
			snprintf(n->addr, sizeof(n->addr), "%s", n->name);
	}
}

static int job_record_add(struct job_alloc *a, slurm_job_info_t *j,
			  char *why, size_t whylen)
{
	char **hosts = NULL;
	size_t nhosts = 0;
	int rc = -1;

	if (!j->nodes || !*j->nodes) {
		snprintf(why, whylen, "job %u has no nodes yet", j->job_id);
		return -1;
	}
	if (ar_hostlist_expand(j->nodes, &hosts, &nhosts) < 0) {
		snprintf(why, whylen, "job %u: node list %s: %s", j->job_id,
			 j->nodes, ar_errmsg());
		return -1;
	}
	for (size_t i = 0; i < nhosts; i++) {
		const char *detail = i < j->gres_detail_cnt ?
				     j->gres_detail_str[i] : NULL;
		char type[64] = "";
		unsigned gpus = 0;

		if (detail)
			job_gres_parse(detail, type, sizeof(type), &gpus);
		if (!gpus)
			continue;	/* a CPU-only node plans nothing */
		if (job_node_add(a, hosts[i], type, gpus) < 0) {
			snprintf(why, whylen, "out of memory");
			goto out;
		}
	}
	rc = 0;
out:
	ar_hostlist_free(hosts);
	return rc;
}

int job_alloc_load(uint32_t job_id, struct job_alloc *a, char *why,
		   size_t whylen)
{
	job_info_msg_t *jm = NULL;
	node_info_msg_t *nm = NULL;
	uint32_t leader;
	int rc = -1;

	memset(a, 0, sizeof(*a));
	if (slurm_load_job(&jm, job_id, SHOW_DETAIL) != 0 || !jm ||
	    !jm->record_count) {
		snprintf(why, whylen, "cannot read job %u from slurmctld: %s",
			 job_id, slurm_strerror(slurm_get_errno()));
		goto out;
	}
	leader = jm->job_array[0].het_job_id;
	if (leader && leader != NO_VAL && leader != job_id) {
		/* A component's id lists only that component: ask again. */
		slurm_free_job_info_msg(jm);
		jm = NULL;
		if (slurm_load_job(&jm, leader, SHOW_DETAIL) != 0 || !jm ||
		    !jm->record_count) {
			snprintf(why, whylen, "cannot read HetJob %u from slurmctld: %s",
				 leader, slurm_strerror(slurm_get_errno()));
			goto out;
		}
	}
	a->job_id = leader && leader != NO_VAL ? leader : job_id;
	a->user_id = jm->job_array[0].user_id;
	a->submit_time = (long long)jm->job_array[0].submit_time;
	a->running = true;
	for (uint32_t i = 0; i < jm->record_count; i++) {
		slurm_job_info_t *j = &jm->job_array[i];

		if ((j->job_state & JOB_STATE_BASE) != JOB_RUNNING)
			a->running = false;
		if (!a->running)
			continue;
		if (job_record_add(a, j, why, whylen) < 0)
			goto out;
	}
	if (a->running && !a->nnodes) {
		snprintf(why, whylen, "no GPUs allocated (ask for them with --gres=gpu:TYPE:N)");
		goto out;
	}
	if (slurm_load_node(0, &nm, SHOW_ALL) != 0)
		nm = NULL;	/* names stand in for addresses */
	job_node_fill(a, nm);
	rc = 0;
out:
	if (nm)
		slurm_free_node_info_msg(nm);
	if (jm)
		slurm_free_job_info_msg(jm);
	if (rc < 0)
		job_alloc_free(a);
	return rc;
}

void job_alloc_free(struct job_alloc *a)
{
	free(a->nodes);
	a->nodes = NULL;
	a->nnodes = 0;
	a->nodes_cap = 0;
}
