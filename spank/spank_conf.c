/*
 * spank_conf.c - the plugstack.conf arguments of arachne.so:
 *
 *   optional arachne.so socket=/run/arachne/plannerd.sock timeout_ms=2000 \
 *            mode=advise model=llama3-8b plan_dir=/shared/arachne
 *
 * socket may hold %n, the node's Slurm name, for sites (and tests) that
 * run several plannerd on one host.
 *
 * One table says every key, its type and bounds; an unknown key or a bad
 * value fails the plugin's init (an admin typo must not go unnoticed), and
 * plugstack.conf's optional/required then decides what Slurm does.
 */
#include "config.h"

#include <stddef.h>
#include <string.h>

#include <slurm/spank.h>

#include "arachne.h"

#define CONF(k, t, f, ...) { .key = k, .type = t, \
	.offset = offsetof(struct arachne_conf, f), \
	.set_offset = offsetof(struct arachne_conf, f##_set), __VA_ARGS__ }

static const struct kv_spec conf_spec[] = {
	CONF("socket", KV_PATH, socket),
	CONF("timeout_ms", KV_UINT, timeout_ms, .min = 1, .max = 60000),
	CONF("mode", KV_ENUM, mode, .names = arachne_mode_names),
	CONF("model", KV_STRING, model),
	CONF("plan_dir", KV_PATH, plan_dir),
	CONF("rdzv_port", KV_UINT, rdzv_port, .min = 1024, .max = 60000),
	{ .key = NULL },
};

int conf_parse(struct arachne_conf *c, int ac, char **av)
{
	memset(c, 0, sizeof(*c));
	strcpy(c->socket, AR_PLANNERD_SOCKET);
	strcpy(c->plan_dir, AR_SPANK_PLAN_DIR);
	c->timeout_ms = 2000;
	c->mode = ARACHNE_MODE_ADVISE;
	c->rdzv_port = 29500;

	for (int i = 0; i < ac; i++)
		if (kv_parse_one(conf_spec, c, av[i], "plugstack.conf") < 0)
			return -1;
	return 0;
}
void conf_socket_expand(const char *pattern, const char *node, char *buf,
			size_t len)
{
	size_t used = 0;

	for (const char *p = pattern; *p && used + 1 < len; p++) {
		if (p[0] == '%' && p[1] == 'n') {
			used += (size_t)snprintf(buf + used, len - used, "%s",
						 node);
			p++;
		} else if (p[0] == '%' && p[1] == '%') {
			buf[used++] = '%';
			p++;
		} else {
			buf[used++] = *p;
		}
	}
	buf[used < len ? used : len - 1] = '\0';
}

struct arachne_conf arachne_conf;
