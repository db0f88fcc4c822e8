/*
 * test/opt.c - the --arachne option, its ARACHNE_* variables and the
 * plugstack.conf arguments, parsed against a stub slurm_error() that keeps
 * the last message, so each refusal is checked for naming what is wrong.
 */
#include "config.h"

#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <slurm/spank.h>

#include "ar.h"
#include "arachne.h"

static char last_error[1024];

void slurm_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
}

spank_err_t spank_option_register(spank_t sp, struct spank_option *opt)
{
	return ESPANK_SUCCESS;
}

const char *spank_strerror(spank_err_t err)
{
	return "stub";
}

int alloc_join_check(uint32_t target, uint32_t uid, char *why, size_t len)
{
	return 0;
}

static int setup(void **state)
{
	memset(&arachne_opts, 0, sizeof(arachne_opts));
	last_error[0] = '\0';
	return 0;
}

static void opt_all_keys(void **state)
{
	struct arachne_opts *o = &arachne_opts;

	assert_int_equal(opts_parse(o, "model=llama3-8b,global_batch=2048,seq_len=4096,planner=sailor,mode=enforce,output=/tmp/p,join=17,signal=USR1"),
			 0);
	assert_string_equal(arachne_signal_names[o->signal], "USR1");
	assert_int_equal(arachne_signal_number(arachne_signal_names[o->signal]),
			 SIGUSR1);
	assert_int_equal(arachne_signal_number("none"), 0);
	assert_true(o->enabled);
	assert_string_equal(o->model, "llama3-8b");
	assert_int_equal(o->global_batch, 2048);
	assert_int_equal(o->seq_len, 4096);
	assert_string_equal(arachne_planner_names[o->planner], "sailor");
	assert_int_equal(o->mode, ARACHNE_MODE_ENFORCE);
	assert_string_equal(o->output, "/tmp/p");
	assert_int_equal(o->join, 17);
	assert_true(o->model_set && o->join_set && o->output_set);
}

/* One plannerd per node: socket=/run/arachne/%n.sock names this node's. */
static void conf_socket_per_node(void **state)
{
	char buf[64];

	conf_socket_expand("/run/%n/plannerd-%n.sock", "node7", buf, sizeof(buf));
	assert_string_equal(buf, "/run/node7/plannerd-node7.sock");
	conf_socket_expand("/run/a%%n.sock", "node7", buf, sizeof(buf));
	assert_string_equal(buf, "/run/a%n.sock");
	conf_socket_expand("/run/plannerd.sock", "node7", buf, sizeof(buf));
	assert_string_equal(buf, "/run/plannerd.sock");
	conf_socket_expand("/a/very/long/%n/%n/%n", "node-name-that-is-long",
			   buf, 20);
	assert_int_equal(strlen(buf), 19);
}

static void opt_no_argument(void **state)
{
	assert_int_equal(opts_parse(&arachne_opts, NULL), 0);
	assert_true(arachne_opts.enabled);
	assert_false(arachne_opts.model_set);
	assert_int_equal(opts_parse(&arachne_opts, ""), 0);
	assert_false(arachne_opts.mode_set);
}

static void opt_repeat_is_idempotent(void **state)
{
	struct arachne_opts once;

	assert_int_equal(opts_parse(&arachne_opts, "model=m,mode=advise"), 0);
	once = arachne_opts;
	assert_int_equal(opts_parse(&arachne_opts, "model=m,mode=advise"), 0);
	assert_memory_equal(&once, &arachne_opts, sizeof(once));
}

struct bad_case {
	const char *arg;
	const char *message;	/* a part the error must contain */
};

static void opt_bad_values(void **state)
{
	static const struct bad_case bad[] = {
		{ "colour=blue", "unknown key 'colour' (expected model, global_batch" },
		{ "mode=maybe", "mode=maybe: expected one of advise, enforce" },
		{ "planner=magic", "expected one of arachne, sailor, metis" },
		{ "global_batch=0", "global_batch=0: expected an integer from 1 to" },
		{ "global_batch=12x", "global_batch=12x: expected an integer" },
		{ "seq_len=-4", "seq_len=-4: expected an integer" },
		{ "join=abc", "join=abc: expected an integer" },
		{ "signal=KILL", "signal=KILL: expected one of none, USR1, USR2" },
		{ "output=relative/dir", "output=relative/dir: expected an absolute path" },
		{ "model=llama 3", "model=llama 3: expected a name" },
		{ "model", "'model': expected key=value" },
		{ "model=", "'model=': expected key=value" },
		{ "=x", "'=x': expected key=value" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		setup(NULL);
		assert_int_equal(opts_parse(&arachne_opts, bad[i].arg), -1);
		if (!strstr(last_error, bad[i].message))
			fail_msg("'%s': error '%s' lacks '%s'", bad[i].arg,
				 last_error, bad[i].message);
		assert_non_null(strstr(last_error, "--arachne"));
	}
}

static const char *fake_getenv(const char *name, void *arg)
{
	const char *const *kv = arg;

	for (; *kv; kv += 2)
		if (!strcmp(kv[0], name))
			return kv[1];
	return NULL;
}

static void env_fills_unset_keys(void **state)
{
	const char *env[] = {
		"ARACHNE_MODEL", "qwen3-32b", "ARACHNE_MODE", "enforce",
		"ARACHNE_SEQ_LEN", "1024", NULL
	};

	assert_int_equal(opts_parse(&arachne_opts, "mode=advise"), 0);
	assert_int_equal(opts_from_env(&arachne_opts, fake_getenv, env), 0);
	assert_string_equal(arachne_opts.model, "qwen3-32b");
	assert_int_equal(arachne_opts.seq_len, 1024);
	/* The option wins over the environment. */
	assert_int_equal(arachne_opts.mode, ARACHNE_MODE_ADVISE);
}

static void env_model_enables(void **state)
{
	const char *env[] = { "ARACHNE_MODEL", "llama3-8b", NULL };
	const char *none[] = { "ARACHNE_MODE", "enforce", NULL };

	assert_int_equal(opts_from_env(&arachne_opts, fake_getenv, none), 0);
	assert_false(arachne_opts.enabled);
	assert_int_equal(opts_from_env(&arachne_opts, fake_getenv, env), 0);
	assert_true(arachne_opts.enabled);
}

static void env_bad_value_names_variable(void **state)
{
	const char *env[] = { "ARACHNE_GLOBAL_BATCH", "lots", NULL };

	assert_int_equal(opts_from_env(&arachne_opts, fake_getenv, env), -1);
	assert_non_null(strstr(last_error, "ARACHNE_GLOBAL_BATCH"));
	assert_non_null(strstr(last_error, "global_batch=lots"));
}

static void conf_defaults_and_keys(void **state)
{
	struct arachne_conf c;
	char *av[] = { "socket=/tmp/p.sock", "timeout_ms=250", "mode=enforce",
		       "model=llama3-8b", "plan_dir=/shared/arachne",
		       "rdzv_port=31000" };

	assert_int_equal(conf_parse(&c, 0, NULL), 0);
	assert_string_equal(c.socket, AR_PLANNERD_SOCKET);
	assert_int_equal(c.timeout_ms, 2000);
	assert_int_equal(c.mode, ARACHNE_MODE_ADVISE);
	assert_string_equal(c.model, "");
	assert_int_equal(c.rdzv_port, 29500);

	assert_int_equal(conf_parse(&c, 6, av), 0);
	assert_string_equal(c.socket, "/tmp/p.sock");
	assert_int_equal(c.timeout_ms, 250);
	assert_int_equal(c.mode, ARACHNE_MODE_ENFORCE);
	assert_string_equal(c.model, "llama3-8b");
	assert_string_equal(c.plan_dir, "/shared/arachne");
	assert_int_equal(c.rdzv_port, 31000);
}

static void conf_rejects(void **state)
{
	static const struct bad_case bad[] = {
		{ "sockett=/x", "plugstack.conf: unknown key 'sockett' (expected socket, timeout_ms" },
		{ "timeout_ms=0", "timeout_ms=0: expected an integer from 1 to 60000" },
		{ "timeout_ms=60001", "expected an integer from 1 to 60000" },
		{ "mode=strict", "mode=strict: expected one of advise, enforce" },
		{ "socket=run/p.sock", "socket=run/p.sock: expected an absolute path" },
		{ "debug", "'debug': expected key=value" },
	};
	struct arachne_conf c;

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		char *av[] = { (char *)"mode=advise", (char *)bad[i].arg };

		last_error[0] = '\0';
		assert_int_equal(conf_parse(&c, 2, av), -1);
		if (!strstr(last_error, bad[i].message))
			fail_msg("'%s': error '%s' lacks '%s'", bad[i].arg,
				 last_error, bad[i].message);
	}
}

static void conf_long_path(void **state)
{
	char arg[KV_VALUE_MAX + 32] = "socket=/";
	struct arachne_conf c;
	char *av[] = { arg };

	memset(arg + 8, 'a', KV_VALUE_MAX);
	arg[8 + KV_VALUE_MAX] = '\0';
	assert_int_equal(conf_parse(&c, 1, av), -1);
	assert_non_null(strstr(last_error, "socket: value longer than"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(opt_all_keys, setup),
		cmocka_unit_test_setup(opt_no_argument, setup),
		cmocka_unit_test_setup(opt_repeat_is_idempotent, setup),
		cmocka_unit_test_setup(opt_bad_values, setup),
		cmocka_unit_test_setup(env_fills_unset_keys, setup),
		cmocka_unit_test_setup(env_model_enables, setup),
		cmocka_unit_test_setup(env_bad_value_names_variable, setup),
		cmocka_unit_test_setup(conf_defaults_and_keys, setup),
		cmocka_unit_test_setup(conf_rejects, setup),
		cmocka_unit_test_setup(conf_long_path, setup),
		cmocka_unit_test_setup(conf_socket_per_node, setup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
