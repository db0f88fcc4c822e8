/*
 * spank_opt.c - the user's --arachne[=key=value,...] option and its
 * ARACHNE_* environment equivalents.
 *
 * Slurm calls the option callback in sbatch/salloc/srun (where a bad value
 * makes the command refuse the job) and again in slurmstepd for every step
 * (twice per srun step of a batch job), so parsing only ever merges into
 * the one static struct: calling it again with the same text is harmless.
 */
#include "config.h"

#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "arachne.h"

const char *const arachne_mode_names[] = { "advise", "enforce", NULL };

/* Signals a batch script may ask for when its job is reconfigured. */
const char *const arachne_signal_names[] = { "none", "USR1", "USR2", NULL };

int arachne_signal_number(const char *name)
{
	if (!name)
		return 0;
	if (!strcmp(name, "USR1"))
		return SIGUSR1;
	if (!strcmp(name, "USR2"))
		return SIGUSR2;
	return 0;
}

/* The planners plannerd knows (arachne-plan --planner). */
const char *const arachne_planner_names[] = {
	"arachne", "sailor", "metis", "amp", "espresso", "hexiscale",
	"exhaustive", NULL
};

#define OPT(k, t, f, ...) { .key = k, .type = t, \
	.offset = offsetof(struct arachne_opts, f), \
	.set_offset = offsetof(struct arachne_opts, f##_set), __VA_ARGS__ }

static const struct kv_spec opt_spec[] = {
	OPT("model", KV_STRING, model),
	OPT("global_batch", KV_UINT, global_batch, .min = 1,
	    .max = 1UL << 30),
	OPT("seq_len", KV_UINT, seq_len, .min = 1, .max = 1UL << 24),
	OPT("planner", KV_ENUM, planner, .names = arachne_planner_names),
	OPT("mode", KV_ENUM, mode, .names = arachne_mode_names),
	OPT("output", KV_PATH, output),
	OPT("join", KV_UINT, join, .min = 1, .max = 0xfffffffdUL),
	OPT("signal", KV_ENUM, signal, .names = arachne_signal_names),
	{ .key = NULL },
};

/* The environment variable for each key, in opt_spec order. */
static const char *const opt_env[] = {
	"ARACHNE_MODEL", "ARACHNE_GLOBAL_BATCH", "ARACHNE_SEQ_LEN",
	"ARACHNE_PLANNER", "ARACHNE_MODE", "ARACHNE_OUTPUT", "ARACHNE_JOIN",
	"ARACHNE_SIGNAL",
};

static bool opt_is_set(const struct arachne_opts *o, const struct kv_spec *s)
{
	return *(const bool *)((const char *)o + s->set_offset);
}

int opts_parse(struct arachne_opts *o, const char *arg)
{
	char *copy, *item, *save = NULL;
	int rc = 0;

	o->enabled = true;
	if (!arg || !*arg)
		return 0;
	copy = strdup(arg);
	if (!copy) {
		slurm_error("arachne: --arachne: out of memory");
		return -1;
	}
	for (item = strtok_r(copy, ",", &save); item;
	     item = strtok_r(NULL, ",", &save)) {
		if (kv_parse_one(opt_spec, o, item, "--arachne") < 0) {
			rc = -1;
			break;
		}
	}
	free(copy);
	return rc;
}

int opts_from_env(struct arachne_opts *o, opts_getenv_f getenv_fn, void *arg)
{
	struct arachne_opts env = { .enabled = false };
	bool *set;
	size_t i;

	for (i = 0; opt_spec[i].key; i++) {
		const char *v = getenv_fn(opt_env[i], arg);

		if (!v || !*v)
			continue;
		if (kv_parse_value(opt_spec, &env, opt_spec[i].key, v,
				   opt_env[i]) < 0)
			return -1;
	}
	/* The option's keys win over the environment's. */
	for (i = 0; opt_spec[i].key; i++) {
		const struct kv_spec *s = &opt_spec[i];

		if (!opt_is_set(&env, s) || opt_is_set(o, s))
			continue;
		if (s->type == KV_STRING || s->type == KV_PATH)
			memcpy((char *)o + s->offset, (char *)&env + s->offset,
			       KV_VALUE_MAX);
		else
			*(unsigned long *)((char *)o + s->offset) =
				*(unsigned long *)((char *)&env + s->offset);
		set = (bool *)((char *)o + s->set_offset);
		*set = true;
	}
	if (env.model_set)
		o->enabled = true;
	return 0;
}

struct arachne_opts arachne_opts;

static int opts_option_cb(int val, const char *optarg, int remote)
{
	char why[512];

	if (opts_parse(&arachne_opts, optarg) < 0)
		return -1;
	/*
	 * Refuse a join the user may not make while sbatch can still say so;
	 * slurmstepd checks again, since only it is beyond the user's reach.
	 */
	if (!remote && arachne_opts.join &&
	    alloc_join_check((uint32_t)arachne_opts.join, getuid(), why,
			     sizeof(why)) < 0) {
		slurm_error("arachne: --arachne: %s", why);
		return -1;
	}
	return 0;
}

static struct spank_option opts_option = {
	.name = "arachne",
	.arginfo = "[key=value,...]",
	.usage = "Plan the job's GPUs with Arachne. Keys: model=NAME, global_batch=N, seq_len=N, planner=NAME, mode=advise|enforce, output=DIR, join=JOBID, signal=USR1|USR2 (see arachne(8))",
	.has_arg = 2,
	.val = 0,
	.cb = opts_option_cb,
};

int opts_register(spank_t sp)
{
	spank_err_t rc = spank_option_register(sp, &opts_option);

	if (rc != ESPANK_SUCCESS) {
		slurm_error("arachne: cannot register --arachne: %s",
			    spank_strerror(rc));
		return -1;
	}
	return 0;
}
