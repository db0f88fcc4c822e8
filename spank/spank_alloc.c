/*
 * spank_alloc.c - the plugin in sbatch, salloc and srun on the submit
 * host: check what can be checked before the job exists, so that a
 * mistake is refused at submission with a message rather than found in a
 * log after the job started.
 */
#include "config.h"

#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

#include "arachne.h"

static const char *alloc_getenv(const char *name, void *arg)
{
	return getenv(name);
}

int alloc_init_post_opt(spank_t sp)
{
	uint32_t uid = getuid();

	if (opts_from_env(&arachne_opts, alloc_getenv, NULL) < 0)
		return -1;
	if (arachne_opts.enabled && !arachne_opts.join &&
	    !arachne_opts.model_set && !arachne_conf.model[0]) {
		slurm_error("arachne: no model to plan for: give --arachne=model=NAME or set ARACHNE_MODEL (this site's plugstack.conf sets no default model)");
		return -1;
	}
	if (arachne_opts.enabled && arachne_opts.join) {
		char why[512];

		if (alloc_join_check((uint32_t)arachne_opts.join, uid, why,
				     sizeof(why)) < 0) {
			slurm_error("arachne: %s", why);
			return -1;
		}
	}
	return 0;
}

/* Root and SlurmUser act for every user, as plannerd allows them to. */
static bool alloc_uid_is_admin(uint32_t uid)
{
	slurm_conf_t *cf = NULL;
	bool admin;

	if (uid == 0)
		return true;
	if (slurm_load_ctl_conf(0, &cf) != 0 || !cf)
		return false;
	admin = cf->slurm_user_id == uid;
	slurm_free_ctl_conf(cf);
	return admin;
}

int alloc_join_check(uint32_t target, uint32_t uid, char *why, size_t len)
{
	job_info_msg_t *jm = NULL;
	uint32_t owner, state;
	struct passwd *pw;

	if (slurm_load_job(&jm, target, 0) != 0 || !jm || !jm->record_count) {
		snprintf(why, len, "join=%u: no such job (%s)", target,
			 slurm_strerror(slurm_get_errno()));
		if (jm)
			slurm_free_job_info_msg(jm);
		return -1;
	}
	owner = jm->job_array[0].user_id;
	state = jm->job_array[0].job_state;
	slurm_free_job_info_msg(jm);
	if ((state & JOB_STATE_BASE) > JOB_SUSPENDED ||
	    (state & JOB_COMPLETING)) {
		snprintf(why, len, "join=%u: job %u has ended; there is nothing to join",
			 target, target);
		return -1;
	}
	if (owner == uid || alloc_uid_is_admin(uid))
		return 0;
	pw = getpwuid(owner);
	snprintf(why, len, "join=%u: job %u belongs to %s; only its owner, root or SlurmUser may join it",
		 target, target, pw ? pw->pw_name : "another user");
	return -1;
}
