/*
 * spank.c - arachne.so: the SPANK entry points.  Dispatch only: each
 * callback goes to the file for the context it runs in (see arachne.h).
 * The plugstack.conf arguments are parsed in init(), which Slurm calls in
 * every process the plugin acts in (sbatch, salloc, srun, slurmstepd);
 * it is not called for job prologs and epilogs, which parse them
 * themselves.
 */
#include "config.h"

#include <slurm/spank.h>

#include "arachne.h"

SPANK_PLUGIN(arachne, 1);

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	if (conf_parse(&arachne_conf, ac, av) < 0)
		return -1;

	switch (spank_context()) {
	case S_CTX_LOCAL:
	case S_CTX_ALLOCATOR:
	case S_CTX_REMOTE:
		return opts_register(sp);
	default:
		return 0;
	}
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	switch (spank_context()) {
	case S_CTX_LOCAL:
	case S_CTX_ALLOCATOR:
		return alloc_init_post_opt(sp);
	case S_CTX_REMOTE:
		return remote_init_post_opt(sp);
	default:
		return 0;
	}
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	return spank_context() == S_CTX_REMOTE ? remote_user_init(sp) : 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	return spank_context() == S_CTX_REMOTE ? remote_task_init(sp) : 0;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	return spank_context() == S_CTX_REMOTE ? remote_exit(sp) : 0;
}

/* Root, on each node as a job starts: a plan directory left by an
 * earlier job with the same id goes. */
int slurm_spank_job_prolog(spank_t sp, int ac, char **av)
{
	if (conf_parse(&arachne_conf, ac, av) < 0)
		return 0;	/* init reports it where a user sees it */
	return remote_job_prolog(sp);
}

/* Root, on each node as a job ends: plannerd forgets it, its plan
 * directory goes. */
int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
	if (conf_parse(&arachne_conf, ac, av) < 0)
		return 0;
	return remote_job_epilog(sp);
}
