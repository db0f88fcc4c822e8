/*
 * slurmjobs.h - what plannerd asks slurmctld about jobs (libslurm, when
 * configure found it): who owns a job id now, and whether a job is over.
 * Without libslurm every call answers -AR_ENOTBUILT and the daemon keeps
 * its old behaviour (another user's stored job is refused; stored jobs
 * stay until forgotten).
 *
 * A job id of the protocol ("4711", "4711+1" for a HetJob component,
 * "4711_3" for an array task) names a Slurm job; any other id (tests,
 * other schedulers) answers -AR_EINVAL.  The calls block for at most
 * slurmctld's MessageTimeout: call them on a worker, never on the loop.
 */
#ifndef PLANNERD_SLURMJOBS_H
#define PLANNERD_SLURMJOBS_H

#include <stdbool.h>
#include <sys/types.h>

/* True when this build can ask slurmctld. */
bool sjob_supported(void);

/* The uid that owns @job now; -AR_ENOTFOUND when slurmctld has no such job. */
int sjob_owner(const char *job, uid_t *uidp);

/*
 * Whether @job is over: *@overp is true when slurmctld no longer knows it
 * or reports it completed, failed, cancelled, timed out, ... ; false
 * while it is pending, running or suspended.  0, or a negative code when
 * slurmctld could not be asked (then nothing is known).
 */
int sjob_is_over(const char *job, bool *overp);

#endif /* PLANNERD_SLURMJOBS_H */
