/*
 * conf.h - plannerd's configuration: one directive table drives the
 * libconfig parser, --show-config and the directive list of
 * plannerd.conf(5).
 */
#ifndef PLANNERD_CONF_H
#define PLANNERD_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

/*
 * One site-map rule: a Slurm GRES type name or a node-name glob -> GPU.
 * A node_map rule may also say the nodes' network and intra-node link
 * (the cluster JSON's nics, nic_gbps and intra_node, docs/costmodel.md);
 * then it need not name a GPU.
 */
struct conf_map {
	char *match;			/* GRES type ("a100_40g") or glob */
	char *gpu;			/* GPU profile name ("a100-40"); may be NULL */
	int nics;			/* 0: not given */
	double nic_gbps;		/* 0: not given */
	char *intra_node;		/* link class; NULL: not given */
	int line;			/* where it was set, for messages */
};

struct conf {
	char *path;			/* the file read; NULL: defaults only */
	char *socket_path;
	unsigned int socket_mode;	/* permissions of the socket */
	char *socket_group;		/* "": the daemon's group */
	char *slurm_user;		/* may act on any job */
	char *profiles_dir;
	char *policies_dir;
	char *planner;			/* policy_plan() planner name */
	double budget_s;		/* planner time budget per request */
	int workers;			/* planning threads; 0: online CPUs */
	int workers_per_user;		/* one owner's share; 0: half */
	int plan_threads;		/* threads one planning call may use */
	double replan_horizon_s;	/* a replan must pay off within this */
	char *state_dir;		/* stored plans live in STATE_DIR/jobs */
	int log_level;			/* syslog priority */
	int max_request_bytes;		/* one request line, newline included */
	double client_timeout_s;	/* idle time before a client is dropped */
	int max_clients;		/* connections open at once */
	int cache_entries;		/* answers kept for identical requests */
	double prune_interval_s;	/* ask slurmctld about stored jobs; 0: never */
	double inter_node_gbps;		/* > 0: default network bandwidth */
	struct conf_map *gres_map;	/* GRES type -> GPU profile */
	size_t ngres_map;
	struct conf_map *node_map;	/* node-name glob -> GPU profile */
	size_t nnode_map;
	/* resolved from the names above */
	uid_t slurm_uid;		/* (uid_t)-1: no such user */
	gid_t socket_gid;		/* (gid_t)-1: leave as created */
};

/*
 * conf_create() - the defaults, then the settings of the libconfig file at
 * @path (NULL: defaults only).  On success *@confp owns a new config
 * (caller frees with conf_destroy()).  An unknown directive, a value of
 * the wrong type or out of range, or an unknown user or group fails with
 * -AR_EINVAL and "FILE:LINE: directive: reason" in ar_errmsg().
 */
int conf_create(const char *path, struct conf **confp);
void conf_destroy(struct conf *conf);

/*
 * conf_check_site() - what a serving daemon needs of the site, beyond the
 * file's syntax: profiles_dir is a directory with a gpus/ directory, and
 * every GPU that gres_map and node_map name has a profile there.  plannerd
 * checks it at start and on SIGHUP (a failed reload keeps the running
 * configuration); --show-config does not.  -AR_EINVAL naming what is
 * wrong.
 */
int conf_check_site(const struct conf *conf);

/* conf_print() - the effective config, in plannerd.conf syntax. */
void conf_print(const struct conf *conf, FILE *out);

/*
 * conf_print_directives() - every directive with its type, default and
 * description as troff (.TP paragraphs) for plannerd.conf(5).
 */
void conf_print_directives(FILE *out);

/* conf_map_gres() / conf_map_node() - the GPU for @name, or NULL. */
const char *conf_map_gres(const struct conf *conf, const char *gres);
const char *conf_map_node(const struct conf *conf, const char *node);
/* The first node_map rule for @node that gives its network or link, or NULL. */
const struct conf_map *conf_map_node_links(const struct conf *conf,
					   const char *node);

#endif /* PLANNERD_CONF_H */
