/*
 * slurmjobs.c - plannerd's questions to slurmctld (see slurmjobs.h).
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ar.h"
#include "slurmjobs.h"

#ifdef HAVE_LIBSLURM
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

static pthread_once_t sjob_once = PTHREAD_ONCE_INIT;
static bool sjob_ready;

/*
 * libslurm ends the process (fatal()) when it finds no configuration, so
 * it is started only where a slurm.conf is: $SLURM_CONF, the usual path,
 * or the copy slurmd keeps in a configless cluster.
 */
static void sjob_init(void)
{
	static const char *const paths[] = {
		"/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf",
		"/run/slurm/conf/slurm.conf",
	};
	const char *env = getenv("SLURM_CONF");

	if (env && *env) {
		sjob_ready = access(env, R_OK) == 0;
	} else {
		for (size_t i = 0; i < ARRAY_SIZE(paths) && !sjob_ready; i++)
			sjob_ready = access(paths[i], R_OK) == 0;
	}
	if (sjob_ready)
		slurm_init(NULL);
}

/* The Slurm job id @job names (a HetJob component: its leader). */
static int sjob_id(const char *job, uint32_t *idp)
{
	char copy[64], *end;
	unsigned long id;

	if (strlen(job) >= sizeof(copy))
		return -AR_EINVAL;
	snprintf(copy, sizeof(copy), "%s", job);
	if (strchr(copy, '_')) {
		*idp = slurm_xlate_job_id(copy);
		return *idp ? 0 : -AR_EINVAL;
	}
	id = strtoul(copy, &end, 10);
	if (end == copy || (*end && *end != '+') || id == 0 || id > 0xfffffff0UL)
		return -AR_EINVAL;
	*idp = (uint32_t)id;
	return 0;
}

/* The job's record, or -AR_ENOTFOUND / -AR_EPROTO (slurmctld unreachable). */
static int sjob_load(const char *job, job_info_msg_t **msgp)
{
	uint32_t id;
	int rc, err;

	rc = sjob_id(job, &id);
	if (rc < 0)
		return rc;
	pthread_once(&sjob_once, sjob_init);
	if (!sjob_ready)
		return ar_seterr(-AR_ENOTBUILT, "no Slurm configuration (SLURM_CONF, /etc/slurm/slurm.conf) to ask slurmctld with");
	if (slurm_load_job(msgp, id, SHOW_ALL) == SLURM_SUCCESS &&
	    *msgp && (*msgp)->record_count)
		return 0;
	err = slurm_get_errno();
	if (*msgp)
		slurm_free_job_info_msg(*msgp);
	*msgp = NULL;
	if (err == ESLURM_INVALID_JOB_ID)
		return ar_seterr(-AR_ENOTFOUND, "slurmctld knows no job %s", job);
	return ar_seterr(-AR_EPROTO, "cannot ask slurmctld about job %s: %s",
			 job, slurm_strerror(err));
}

bool sjob_supported(void)
{
	return true;
}

int sjob_owner(const char *job, uid_t *uidp)
{
	job_info_msg_t *msg = NULL;
	int rc = sjob_load(job, &msg);

	if (rc < 0)
		return rc;
	*uidp = msg->job_array[0].user_id;
	slurm_free_job_info_msg(msg);
	return 0;
}

int sjob_is_over(const char *job, bool *overp)
{
	job_info_msg_t *msg = NULL;
	int rc = sjob_load(job, &msg);

	if (rc == -AR_ENOTFOUND) {
		*overp = true;
		return 0;
	}
	if (rc < 0)
		return rc;
	*overp = true;
	for (uint32_t i = 0; i < msg->record_count; i++) {
		uint32_t state = msg->job_array[i].job_state & JOB_STATE_BASE;

		if (state == JOB_PENDING || state == JOB_RUNNING ||
		    state == JOB_SUSPENDED)
			*overp = false;
	}
	slurm_free_job_info_msg(msg);
	return 0;
}

#else /* !HAVE_LIBSLURM */

bool sjob_supported(void)
{
	return false;
}

int sjob_owner(const char *job, uid_t *uidp)
{
	return ar_seterr(-AR_ENOTBUILT, "plannerd was built without libslurm");
}

int sjob_is_over(const char *job, bool *overp)
{
	return ar_seterr(-AR_ENOTBUILT, "plannerd was built without libslurm");
}

#endif /* HAVE_LIBSLURM */
