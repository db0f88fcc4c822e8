/*
 * ctl.h - arachnectl's parts: the plannerd client (arachnectl.c) and the
 * elastic-job commands (elastic.c).
 */
#ifndef PLANNERD_CTL_H
#define PLANNERD_CTL_H

#include <stdbool.h>

#include <jansson.h>

/*
 * Exit status: 0 done, 1 refused, 2 bad usage or input, 3 no daemon, 4
 * (pending) the joined job has left.
 */
#define EXIT_REFUSED	1
#define EXIT_USAGE	2
#define EXIT_DAEMON	3
#define EXIT_LEFT	4

struct ctl {
	const char *socket;
	bool json;
	double timeout_s;
	/* plan and replan */
	const char *model;
	const char *cluster;
	const char *user;
	const char *planner;
	long global_batch;
	long seq_len;
	double budget_s;
	double horizon_s;
	/* elastic jobs */
	const char *plan_dir;		/* plan_dir of arachne.so */
	long nodes;			/* shrink --nodes */
	const char *release;		/* shrink --release */
	double grace_s;			/* shrink, leave */
	const char *reason;		/* abort */
	bool all;			/* list */
};

/*
 * ctl_request() - send @request (taken) to plannerd and read the answer:
 * 0 with the "ok":true answer in *@answerp (caller decrefs), or the exit
 * status after the refusal or the failure was printed.
 */
int ctl_request(const struct ctl *ctl, json_t *request, json_t **answerp);

/*
 * elastic_main() - the elastic-job commands (list, shrink, leave,
 * pending, commit, abort) for @job (NULL: $SLURM_JOB_ID).  Returns the
 * exit status.
 */
int elastic_main(struct ctl *ctl, const char *cmd, const char *job);

/* Whether @cmd is one of them. */
bool elastic_is_command(const char *cmd);

/* The plugin's plugstack.conf arguments plan_dir= and socket=, if any. */
void elastic_site_defaults(struct ctl *ctl);

#endif /* PLANNERD_CTL_H */
