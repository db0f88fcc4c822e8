/*
 * live.c - live migration: when the plan changes, the trainer finishes
 * the step, derives the migration from the old and the new plan with
 * libarachne-migrate over its own state layout, moves its state buffer
 * (weights, Adam moments and step counters) rank to rank with
 * migrate_run(), and takes its role in the new plan.  A rank without state
 * in the old plan (a joiner) starts empty and receives; a rank without a
 * place in the new plan (a leaver) sends and is done.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ar.h"
#include "gpt.h"

#define TAG_MIGRATION	0x7000

/*
 * The trainer's state layout, as libarachne-migrate sees it: per layer,
 * U units of FP32 weights (the dense weight tensor) and U units of m, v
 * and a step counter (the dense optimizer tensor); gradients are summed
 * afresh every step and never move.  TP rank k of t then holds units
 * [k U / t, (k + 1) U / t) of each, exactly the shards the library cuts.
 */
int gpt_live_layout(const struct gpt_config *cfg,
		    struct migrate_layout **layoutp)
{
	struct migrate_layout *layout = migrate_layout_create(cfg->nlayers);

	*layoutp = NULL;
	if (!layout)
		return -errno;
	for (int l = 0; l < cfg->nlayers; l++) {
		enum gpt_layer_kind k = gpt_layer_kind(cfg, l);
		struct migrate_layer *ly = &layout->layers[l];

		ly->bytes[MIGRATE_PART_DENSE * MIGRATE_NUM_KINDS +
			  MIGRATE_KIND_WEIGHT] =
			(uint64_t)cfg->U * cfg->unit_floats[k] * sizeof(float);
		ly->bytes[MIGRATE_PART_DENSE * MIGRATE_NUM_KINDS +
			  MIGRATE_KIND_OPTIM] =
			(uint64_t)cfg->U * gpt_optim_floats(cfg, k) *
			sizeof(float);
	}
	*layoutp = layout;
	return 0;
}

/* ---------------------------------------------------------------------
 * Failures.  ARACHNE_MIGRATE_FAULT=kill:R or stall:R makes migration rank
 * R die or stop before the migration's second step, as for
 * arachne-migrate.  When the launcher then ends the job, SIGTERM reaches
 * the others mid-migration: they say so (the old state was never written).
 * ------------------------------------------------------------------- */

struct fault {
	int rank;
	bool kill;
};

static void fault_progress(void *arg, int step, int nsteps)
{
	const struct fault *f = arg;

	if (step != (nsteps > 1 ? 1 : 0))
		return;
	if (f->kill)
		raise(SIGKILL);
	for (;;)
		pause();
}

static bool fault_parse(int rank, struct fault *f)
{
	const char *spec = getenv("ARACHNE_MIGRATE_FAULT");
	int r;

	if (!spec)
		return false;
	if (sscanf(spec, "kill:%d", &r) == 1)
		f->kill = true;
	else if (sscanf(spec, "stall:%d", &r) == 1)
		f->kill = false;
	else
		return false;
	f->rank = r;
	return r == rank;
}

static char term_msg[256];

static void on_terminate(int sig)
{
	ssize_t n = write(STDERR_FILENO, term_msg, strlen(term_msg));

	(void)n;
	_exit(128 + sig);
}

static void terminate_handler(bool on, int rank, long step)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	if (on) {
		snprintf(term_msg, sizeof(term_msg),
			 "arachne-gpt: rank %d: terminated during the migration after step %ld; migration aborted, the old state is intact\n",
			 rank, step);
		sa.sa_handler = on_terminate;
	} else {
		sa.sa_handler = SIG_DFL;
	}
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
}

/* ---------------------------------------------------------------------
 * The migration.
 * ------------------------------------------------------------------- */

/*
 * The migration's own communicator over the job's world.  Over MPI: the
 * ranks of @m as job ranks, migration rank i the i-th entry.  Over TCP
 * (ranks of several launches): a rendezvous of @m's ranks alone, named
 * after the migration, in the world's directory, so that ranks that are
 * not yet in the world (a join) can meet them there too.
 */
static int migration_transport(const struct gpt_job *job,
			       const struct migrate *m, int me, double timeout_s,
			       struct gpt_comm **mcommp,
			       struct migrate_rdzv **rdzvp,
			       struct migrate_transport **tpp)
{
	int *ranks, rc = 0;

	if (gpt_comm_tcp_dir(job->comm)) {
		char name[64];
		struct migrate_rdzv_opts ro = {
			.dir = gpt_comm_tcp_dir(job->comm), .name = name,
			.rank = me, .size = m->nranks,
			.timeout_s = timeout_s,
		};

		rc = gpt_live_meeting(m, name, sizeof(name));
		if (rc == 0)
			rc = migrate_rdzv_join(&ro, rdzvp);
		return rc < 0 ? rc : migrate_transport_tcp_create(*rdzvp, tpp);
	}
	ranks = malloc(m->nranks * sizeof(int));
	if (!ranks)
		return -ENOMEM;
	for (int i = 0; i < m->nranks; i++) {
		ranks[i] = gpt_job_rank_of(job, m->ranks[i].node,
					   m->ranks[i].gpu);
		if (ranks[i] < 0)
			rc = ar_seterr(-AR_EINVAL, "GPU %d of node %s holds state but has no rank",
				       m->ranks[i].gpu,
				       job->cl->nodes[m->ranks[i].node].name);
	}
	if (rc == 0)
		rc = gpt_comm_sub(job->comm, ranks, m->nranks, TAG_MIGRATION,
				  mcommp);
	free(ranks);
	if (rc == 0) {
		MPI_Comm mpi = gpt_comm_mpi_of(*mcommp);

		rc = migrate_transport_mpi_create(&mpi, tpp);
	}
	return rc;
}

int gpt_live_meeting(const struct migrate *m, char *name, size_t size)
{
	json_t *j = migrate_to_json(m);
	char *text = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	uint64_t h = 0xcbf29ce484222325ull;	/* FNV-1a */

	json_decref(j);
	if (!text)
		return -ENOMEM;
	for (const char *c = text; *c; c++)
		h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
	free(text);
	snprintf(name, size, "gpt-migration-%016llx", (unsigned long long)h);
	return 0;
}

int gpt_live_migrate(const struct gpt_job *job, struct gpt_trainer *tr,
		     struct gpt_plan *new_gp, long step,
		     const struct gpt_live_opts *o)
{
	const struct costmodel_plan *old_plan = tr->gp->plan;
	struct migrate_layout *layout = NULL;
	struct migrate_topo *topo = NULL;
	struct migrate *m = NULL;
	struct migrate_transport *tp = NULL;
	struct gpt_trainer next;
	struct gpt_comm *mcomm = NULL;
	struct migrate_rdzv *mrdzv = NULL;
	struct migrate_run_opts ropts = { .timeout_s = o->timeout_s };
	struct fault fault;
	int me, rc;

	memset(&next, 0, sizeof(next));
	rc = gpt_live_layout(&job->cfg, &layout);
	if (rc == 0)
		rc = migrate_topo_from_cluster(job->cm, job->cl, &topo);
	if (rc == 0)
		rc = migrate_diff(layout, topo, old_plan, new_gp->plan, NULL,
				  &m);
	if (rc < 0)
		goto out;
	rc = gpt_trainer_create(&next, job, new_gp, tr->seed, &tr->opt);
	if (rc < 0)
		goto out;
	me = migrate_rank_find(m, job->node_of[job->rank],
			       job->gpu_of[job->rank]);
	if (me >= 0) {
		/* The library's shards and the trainer's buffers must agree. */
		if (migrate_rank_old_bytes(m, me) !=
			    tr->shard.state_floats * sizeof(float) ||
		    migrate_rank_new_bytes(m, me) !=
			    next.shard.state_floats * sizeof(float)) {
			rc = ar_seterr(-AR_EINVAL, "rank %d: the migration's shards (%llu and %llu bytes) do not match the trainer's state (%zu and %zu)",
				       job->rank,
				       (unsigned long long)migrate_rank_old_bytes(m, me),
				       (unsigned long long)migrate_rank_new_bytes(m, me),
				       tr->shard.state_floats * sizeof(float),
				       next.shard.state_floats * sizeof(float));
			goto out;
		}
		rc = migration_transport(job, m, me, o->timeout_s, &mcomm,
					 &mrdzv, &tp);
		if (rc < 0)
			goto out;
		if (fault_parse(me, &fault)) {
			ropts.progress = fault_progress;
			ropts.progress_arg = &fault;
		}
		terminate_handler(true, job->rank, step);
		rc = migrate_run(m, tp, tr->shard.state, next.shard.state,
				 &ropts);
		terminate_handler(false, job->rank, step);
		if (rc < 0)
			goto out;
		if (o->verbose)
			fprintf(stderr, "arachne-gpt: rank %d: migrated after step %ld: %llu bytes in, old state %016llx\n",
				job->rank, step,
				(unsigned long long)migrate_rank_new_bytes(m, me),
				(unsigned long long)gpt_shard_checksum(&tr->shard));
	}
	if (next.me.pipe >= 0 && gpt_shard_step(&next.shard, &job->cfg) != step) {
		rc = ar_seterr(-AR_EPROTO, "rank %d: the state that arrived is of step %u, not %ld",
			       job->rank, gpt_shard_step(&next.shard, &job->cfg),
			       step);
		goto out;
	}
	rc = gpt_trainer_comms(&next);
	if (rc == 0)
		rc = gpt_trainer_sync_replicated(&next);
	if (rc < 0)
		goto out;
	gpt_trainer_destroy(tr);
	*tr = next;
	memset(&next, 0, sizeof(next));
out:
	if (tp)
		migrate_transport_destroy(tp);
	migrate_rdzv_close(mrdzv);
	gpt_comm_free(mcomm);
	if (next.job)
		gpt_trainer_destroy(&next);
	migrate_free(m);
	migrate_topo_free(topo);
	migrate_layout_free(layout);
	return rc;
}
