/*
 * arachne.h - internal interfaces of the arachne.so SPANK plugin.
 *
 * spank.c dispatches every SPANK callback by context to one file:
 * spank_alloc.c (sbatch/salloc and srun on the submit host) and
 * spank_remote.c (slurmstepd).  The rest are helpers:
 * spank_kv.c parses key=value lists by a table, spank_opt.c the user's
 * --arachne option, spank_conf.c the plugstack.conf arguments,
 * spank_client.c talks to plannerd, spank_job.c reads an allocation from
 * slurmctld, spank_gres.c its GRES strings and composition, and
 * spank_role.c turns a plan into one task's role.  A job's plan
 * generations on disk are common/jobdir.c's, which arachnectl shares.
 */
#ifndef AR_SPANK_ARACHNE_H
#define AR_SPANK_ARACHNE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <slurm/spank.h>

/* ------------------------------------------------------------ key=value */

enum kv_type {
	KV_STRING,		/* a word: letters, digits, '.', '_', '-' */
	KV_PATH,		/* an absolute path */
	KV_UINT,		/* an unsigned integer within [min, max] */
	KV_ENUM,		/* one of names[], stored as its index */
};

struct kv_spec {
	const char *key;
	enum kv_type type;
	size_t offset;			/* of the field in the target */
	unsigned long min, max;		/* KV_UINT bounds */
	const char *const *names;	/* KV_ENUM values, NULL-terminated */
	size_t set_offset;		/* of its bool, set when seen */
};

/*
 * kv_parse_one() - parse "key=value" @arg against @spec into @target.
 * KV_STRING and KV_PATH fields are char[KV_VALUE_MAX] arrays.  @what names
 * the source in messages ("--arachne", "plugstack.conf").  Returns 0 or -1
 * after slurm_error() said what was wrong.
 */
#define KV_VALUE_MAX 256
int kv_parse_one(const struct kv_spec *spec, void *target, const char *arg,
		 const char *what);

/* kv_parse_value() - parse @value for the entry @key of @spec. */
int kv_parse_value(const struct kv_spec *spec, void *target, const char *key,
		   const char *value, const char *what);

/* ------------------------------------------------------------ options */

enum arachne_mode {
	ARACHNE_MODE_ADVISE,	/* plannerd trouble: warn, run anyway */
	ARACHNE_MODE_ENFORCE,	/* plannerd trouble: fail the job */
};

extern const char *const arachne_mode_names[];
extern const char *const arachne_planner_names[];
extern const char *const arachne_signal_names[];

/* SIGUSR1 for "USR1", ...; 0 for "none" or NULL. */
int arachne_signal_number(const char *name);

/* What the user asked for with --arachne=... or ARACHNE_* variables. */
struct arachne_opts {
	bool enabled;			/* --arachne, or ARACHNE_MODEL */
	char model[KV_VALUE_MAX];
	unsigned long global_batch;	/* 0: plannerd's default */
	unsigned long seq_len;		/* 0: plannerd's default */
	unsigned long planner;		/* in arachne_planner_names */
	unsigned long mode;		/* enum arachne_mode */
	char output[KV_VALUE_MAX];	/* per-job plan directory */
	unsigned long join;		/* job id to join, 0: none */
	unsigned long signal;		/* in arachne_signal_names: told of changes */
	bool model_set;
	bool global_batch_set;
	bool seq_len_set;
	bool planner_set;
	bool mode_set;
	bool output_set;
	bool join_set;
	bool signal_set;
};

/*
 * opts_parse() - merge the comma-separated "key=value,..." list @arg into
 * @o (later keys win).  NULL or "" enables with no keys.  Returns 0 or -1
 * after slurm_error() named the bad key or value.
 */
int opts_parse(struct arachne_opts *o, const char *arg);

/*
 * opts_from_env() - apply the ARACHNE_MODEL, ARACHNE_GLOBAL_BATCH,
 * ARACHNE_SEQ_LEN, ARACHNE_PLANNER, ARACHNE_MODE, ARACHNE_OUTPUT and
 * ARACHNE_JOIN values that @getenv_fn returns, for keys the option did not
 * set; a set ARACHNE_MODEL enables Arachne.  Returns 0 or -1.
 */
typedef const char *(*opts_getenv_f)(const char *name, void *arg);
int opts_from_env(struct arachne_opts *o, opts_getenv_f getenv_fn, void *arg);

/* ------------------------------------------------------------ plugstack */

struct arachne_conf {
	char socket[KV_VALUE_MAX];	/* plannerd's Unix socket */
	unsigned long timeout_ms;	/* bound on every plannerd exchange */
	unsigned long mode;		/* default enum arachne_mode */
	char model[KV_VALUE_MAX];	/* default model ("" = plannerd's) */
	char plan_dir[KV_VALUE_MAX];	/* where per-job directories live */
	unsigned long rdzv_port;	/* first pipeline rendezvous port */
	bool model_set;
	bool socket_set;
	bool timeout_ms_set;
	bool mode_set;
	bool plan_dir_set;
	bool rdzv_port_set;
};

/*
 * conf_parse() - reset @c to the defaults, then apply the plugstack.conf
 * arguments @av[0..@ac).  An unknown key or a bad value is an error: -1.
 */
int conf_parse(struct arachne_conf *c, int ac, char **av);

/* conf_socket_expand() - @pattern with each %n replaced by @node. */
void conf_socket_expand(const char *pattern, const char *node, char *buf,
			size_t len);

/* ------------------------------------------------------------ globals */

extern struct arachne_opts arachne_opts;	/* spank_opt.c */
extern struct arachne_conf arachne_conf;	/* spank_conf.c */

/* opts_register() - add --arachne to sbatch, salloc and srun. */
int opts_register(spank_t sp);

/* alloc_*: sbatch, salloc and srun on the submit host (spank_alloc.c). */
int alloc_init_post_opt(spank_t sp);
int alloc_join_check(uint32_t target, uint32_t uid, char *why, size_t len);

/* remote_*: slurmstepd (spank_remote.c). */
int remote_init_post_opt(spank_t sp);
int remote_user_init(spank_t sp);
int remote_task_init(spank_t sp);
int remote_exit(spank_t sp);
int remote_job_prolog(spank_t sp);
int remote_job_epilog(spank_t sp);
/* plannerd's socket for this node (plugstack's socket=, %n expanded). */
void remote_socket_path(spank_t sp, char *buf, size_t len);

/* ------------------------------------------------------------ plannerd */

/*
 * client_call() - send @req (one JSON object) to plannerd at @socket_path
 * and wait for its one-line answer; the whole exchange ends within
 * @timeout_ms.  On success *@respp holds the "ok":true response (caller
 * decrefs).  On failure returns -errno or -AR_E* and, when plannerd
 * answered with an error, copies its message into @why.
 */
int client_call(const char *socket_path, unsigned long timeout_ms,
		json_t *req, json_t **respp, char *why, size_t whylen);

/* ------------------------------------------------------------ allocation */

/* One node of an allocation, as plannerd's composition needs it. */
struct job_node {
	char name[64];		/* Slurm node name */
	char addr[64];		/* its NodeAddr, for rendezvous */
	char gpu[64];		/* GRES type ("h100"), "" if none */
	unsigned gpus;		/* GPUs of the job on this node */
};

struct job_alloc {
	uint32_t job_id;	/* the job (HetJob leader) */
	uint32_t user_id;
	long long submit_time;	/* tells a reused job id from the job */
	bool running;		/* every component is RUNNING */
	struct job_node *nodes;
	size_t nnodes, nodes_cap;
};

/*
 * job_alloc_load() - ask slurmctld for @job_id's nodes with their typed
 * GPUs; for a HetJob (any component's id) every component is included.
 * Fills @a (free with job_alloc_free()); returns 0 or -1 with @why set.
 */
int job_alloc_load(uint32_t job_id, struct job_alloc *a, char *why,
		   size_t whylen);
void job_alloc_free(struct job_alloc *a);

/*
 * job_gres_parse() - parse one per-node GRES detail string of
 * `scontrol show job -d` ("gpu:a100:2(IDX:0-1),tmpfs:1") into the GPU type
 * and count.  Untyped GPUs give type "".  Returns 0, or -1 if no GPU.
 */
int job_gres_parse(const char *detail, char *type, size_t typelen,
		   unsigned *count);

/* job_composition() - the composition JSON of @nodes (new reference). */
json_t *job_composition(const struct job_node *nodes, size_t n,
			uint32_t job_id);

/* ------------------------------------------------------------ roles */

/* A task's place in a plan. */
struct task_role {
	bool found;
	unsigned template;	/* index of its template */
	unsigned stage;		/* pipeline stage = PP rank */
	unsigned pp_size;
	unsigned tp_rank;
	unsigned tp_size;
	unsigned dp_rank;	/* replica index over all templates */
	unsigned dp_size;	/* replicas of all templates */
	unsigned pipeline;	/* = dp_rank: a pipeline per replica */
	long layer_first, layer_last;
	unsigned ep, etp, edp;
	char rdzv_node[64];	/* node of the pipeline's first stage */
};

/*
 * role_find() - role of the task using GPU @gpu (an index among the job's
 * GPUs on @node) in @plan.  Sets r->found false when the plan does not
 * use that GPU.  Returns 0, or -1 when @plan is malformed.
 */
int role_find(const json_t *plan, const char *node, unsigned gpu,
	      struct task_role *r);


#endif /* AR_SPANK_ARACHNE_H */
