/*
 * conf.c - the directive table and the libconfig parser it drives.
 *
 * Every setting plannerd knows is one row of conf_directives[]: its name,
 * kind, where it lives in struct conf, its default (as the text a user
 * would write, parsed by the same code as the file) and its description.
 * The parser, --show-config and plannerd.conf(5) all walk this table, so
 * they cannot disagree (redis' static_configs[] is the model).
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <grp.h>
#include <libconfig.h>
#include <limits.h>
#include <stdbool.h>
#include <math.h>
#include <pwd.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ar.h"
#include "conf.h"
#include "costmodel.h"

enum conf_kind {
	CONF_STRING,		/* any string */
	CONF_PATH,		/* an absolute path */
	CONF_MODE,		/* octal permissions as a string: "0660" */
	CONF_INT,		/* integer in [min, max] */
	CONF_DOUBLE,		/* number in [min, max] */
	CONF_LOGLEVEL,		/* syslog priority name */
	CONF_GRES_MAP,		/* list of { gres = ...; gpu = ...; } */
	CONF_NODE_MAP,		/* list of { nodes = ...; gpu = ...; } */
};

struct conf_directive {
	const char *name;
	enum conf_kind kind;
	size_t offset;		/* of the value in struct conf */
	size_t count_offset;	/* maps: of the entry count */
	const char *defval;	/* NULL: unset (maps, empty strings) */
	double min, max;	/* INT and DOUBLE */
	const char *doc;
};

#define OFF(field) offsetof(struct conf, field)

static const struct conf_directive conf_directives[] = {
	{ "socket_path", CONF_PATH, OFF(socket_path), 0, AR_PLANNERD_SOCKET,
	  0, 0, "Unix socket the daemon listens on. Its directory must exist. A socket left by a daemon that crashed is replaced; a live daemon on it is an error." },
	{ "socket_mode", CONF_MODE, OFF(socket_mode), 0, "0666", 0, 0,
	  "Permissions of the socket, as an octal string. Any local user may connect by default: requests are authorized by the peer's uid, not by the socket's mode." },
	{ "socket_group", CONF_STRING, OFF(socket_group), 0, "", 0, 0,
	  "Group that owns the socket (empty: the daemon's group)." },
	{ "slurm_user", CONF_STRING, OFF(slurm_user), 0, "slurm", 0, 0,
	  "User that may plan, replan, read and forget any job, like root (SlurmUser in slurm.conf). Any other user may act only on the jobs it owns." },
	{ "profiles_dir", CONF_PATH, OFF(profiles_dir), 0, AR_PROFILES_DIR,
	  0, 0, "GPU, model and layer profiles (profiles/ of the source tree)." },
	{ "policies_dir", CONF_PATH, OFF(policies_dir), 0, AR_POLICIES_DIR,
	  0, 0, "Trained policies of the arachne planner: MODEL.safetensors is used for MODEL when it exists, the shipped policy otherwise." },
	{ "planner", CONF_STRING, OFF(planner), 0, "arachne", 0, 0,
	  "Planner used when a request names none (see arachne-plan(1) --planner)." },
	{ "budget_s", CONF_DOUBLE, OFF(budget_s), 0, "10", 0.001, 86400,
	  "Time budget of one planning call, in seconds." },
	{ "workers", CONF_INT, OFF(workers), 0, "0", 0, 1024,
	  "Threads that run planning calls at once (0: one per online CPU). Requests beyond them wait in a queue; the I/O loop keeps serving." },
	{ "workers_per_user", CONF_INT, OFF(workers_per_user), 0, "0", 0, 1024,
	  "Workers the requests of one user (the owner of the job) may hold at once (0: half the workers, rounded up). A queued request of another user runs first, so one user's huge plans cannot starve everyone else's small ones." },
	{ "plan_threads", CONF_INT, OFF(plan_threads), 0, "1", 1, 1024,
	  "Threads one planning call may use." },
	{ "replan_horizon_s", CONF_DOUBLE, OFF(replan_horizon_s), 0, "3600",
	  0, 1e9, "A replan moves a job to a new plan only when the time the new plan saves within this horizon exceeds the predicted migration stop; otherwise the old plan is kept and the answer says so." },
	{ "state_dir", CONF_PATH, OFF(state_dir), 0, AR_STATE_DIR, 0, 0,
	  "Stored plans, one file per job under STATE_DIR/jobs, written atomically; they survive restarts." },
	{ "log_level", CONF_LOGLEVEL, OFF(log_level), 0, "info", 0, 0,
	  "Lowest syslog priority logged: emerg, alert, crit, error, warning, notice, info or debug." },
	{ "max_request_bytes", CONF_INT, OFF(max_request_bytes), 0, "1048576",
	  64, 1 << 30, "Largest request line accepted, newline included. A longer one is answered with a too_large error and the connection is closed." },
	{ "client_timeout_s", CONF_DOUBLE, OFF(client_timeout_s), 0, "30",
	  0.01, 86400, "A request must be complete within this time of its first byte, and an answer read within this time of being ready, however slowly the bytes come; a connection idle between requests is closed after it too. Time spent planning for it does not count." },
	{ "max_clients", CONF_INT, OFF(max_clients), 0, "4096", 1, 1 << 20,
	  "Connections served at once; further clients get a busy error." },
	{ "cache_entries", CONF_INT, OFF(cache_entries), 0, "1024", 0, 1 << 24,
	  "Answers kept for identical plan requests (0: no cache)." },
	{ "prune_interval_s", CONF_DOUBLE, OFF(prune_interval_s), 0, "300",
	  0, 1e6, "At start and then this often, stored jobs that slurmctld reports over (or no longer knows) are forgotten (0: never). Needs plannerd built with libslurm." },
	{ "inter_node_gbps", CONF_DOUBLE, OFF(inter_node_gbps), 0, "0", 0, 1e6,
	  "Network bandwidth of one node in Gbit/s, for compositions that give no inter_node_gbps (0: the GPU profiles' own)." },
	{ "gres_map", CONF_GRES_MAP, OFF(gres_map), OFF(ngres_map), NULL, 0, 0,
	  "Slurm GRES type names to GPU profiles: ( { gres = \"a100_40g\"; gpu = \"a100-40\"; }, ... ). A composition's gpu that names a GRES type is replaced by its profile." },
	{ "node_map", CONF_NODE_MAP, OFF(node_map), OFF(nnode_map), NULL, 0, 0,
	  "Node-name globs (fnmatch(3)) to GPU profiles and links: ( { nodes = \"gpu0*\"; gpu = \"h100\"; nics = 8; nic_gbps = 400.0; intra_node = \"nvlink4\"; }, ... ). A composition entry with hosts and no gpu gets the profile of the first rule with a gpu matching all its hosts; one without nics, nic_gbps or intra_node gets those of the first rule giving them that matches its hosts (they must agree). A rule may give links without a gpu." },
};

#define NDIRECTIVES ARRAY_SIZE(conf_directives)

static const char *const conf_kind_names[] = {
	[CONF_STRING] = "string", [CONF_PATH] = "path",
	[CONF_MODE] = "mode", [CONF_INT] = "integer",
	[CONF_DOUBLE] = "number", [CONF_LOGLEVEL] = "level",
	[CONF_GRES_MAP] = "list", [CONF_NODE_MAP] = "list",
};

static void *conf_field(struct conf *conf, const struct conf_directive *d)
{
	return (char *)conf + d->offset;
}

static const void *conf_field_const(const struct conf *conf,
				    const struct conf_directive *d)
{
	return (const char *)conf + d->offset;
}

/* Replace the string at @slot with a copy of @val. */
static int conf_str_set(char **slot, const char *val)
{
	char *copy = strdup(val);

	if (!copy)
		return -ENOMEM;
	free(*slot);
	*slot = copy;
	return 0;
}

/*
 * conf_value_parse() - set directive @d from the text @val (defaults, and
 * string settings from the file).  @where prefixes messages.
 */
static int conf_value_parse(struct conf *conf, const struct conf_directive *d,
			    const char *val, const char *where)
{
	void *field = conf_field(conf, d);
	char *end;

	switch (d->kind) {
	case CONF_PATH:
		if (val[0] != '/')
			return ar_seterr(-AR_EINVAL, "%s%s: \"%s\" is not an absolute path",
					 where, d->name, val);
		/* fall through */
	case CONF_STRING:
		return conf_str_set(field, val);
	case CONF_MODE: {
		unsigned long mode;

		errno = 0;
		mode = strtoul(val, &end, 8);
		if (errno || end == val || *end || mode > 07777)
			return ar_seterr(-AR_EINVAL, "%s%s: \"%s\" is not an octal mode such as \"0660\"",
					 where, d->name, val);
		*(unsigned int *)field = (unsigned int)mode;
		return 0;
	}
	case CONF_INT: {
		long v;

		errno = 0;
		v = strtol(val, &end, 10);
		if (errno || end == val || *end)
			return ar_seterr(-AR_EINVAL, "%s%s: \"%s\" is not an integer",
					 where, d->name, val);
		if (v < d->min || v > d->max)
			return ar_seterr(-AR_EINVAL, "%s%s: %ld is outside [%.0f, %.0f]",
					 where, d->name, v, d->min, d->max);
		*(int *)field = (int)v;
		return 0;
	}
	case CONF_DOUBLE: {
		double v;

		errno = 0;
		v = strtod(val, &end);
		if (errno || end == val || *end || !isfinite(v))
			return ar_seterr(-AR_EINVAL, "%s%s: \"%s\" is not a number",
					 where, d->name, val);
		if (v < d->min || v > d->max)
			return ar_seterr(-AR_EINVAL, "%s%s: %g is outside [%g, %g]",
					 where, d->name, v, d->min, d->max);
		*(double *)field = v;
		return 0;
	}
	case CONF_LOGLEVEL: {
		int level = ar_log_level_parse(val);

		if (level < 0)
			return ar_seterr(-AR_EINVAL, "%s%s: \"%s\" is not one of emerg, alert, crit, error, warning, notice, info, debug",
					 where, d->name, val);
		*(int *)field = level;
		return 0;
	}
	case CONF_GRES_MAP:
	case CONF_NODE_MAP:
		break;
	}
	return ar_seterr(-AR_EINVAL, "%s%s: cannot be set from a string",
			 where, d->name);
}

/*
 * Whether fnmatch(3) reads @glob as its author meant: every [ opens a
 * bracket expression that a ] closes (fnmatch would match an unclosed [
 * literally), and no \\ is left with nothing to escape.
 */
static bool conf_glob_ok(const char *glob)
{
	for (const char *p = glob; *p; p++) {
		if (*p == '\\') {
			if (!*++p)
				return false;
		} else if (*p == '[') {
			p++;
			if (*p == '!' || *p == '^')
				p++;
			if (*p == ']')
				p++;	/* a ] first is a member */
			while (*p && *p != ']')
				p++;
			if (!*p)
				return false;
		}
	}
	return true;
}

static void conf_map_free(struct conf_map *map, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(map[i].match);
		free(map[i].gpu);
		free(map[i].intra_node);
	}
	free(map);
}

/*
 * The network and intra-node link a node_map rule may give: nics (an
 * integer 1-64), nic_gbps (Gbit/s, 0.1 to 100000) and intra_node (a link class
 * the cost model knows).
 */
static int conf_map_links(const config_setting_t *e, const char *where,
			  const char *name, unsigned int i, struct conf_map *m)
{
	config_setting_t *s;

	if ((s = config_setting_get_member(e, "nics"))) {
		if (config_setting_type(s) != CONFIG_TYPE_INT ||
		    config_setting_get_int(s) < 1 || config_setting_get_int(s) > 64)
			return ar_seterr(-AR_EINVAL, "%s%s: entry %u: nics must be an integer from 1 to 64",
					 where, name, i + 1);
		m->nics = config_setting_get_int(s);
	}
	if ((s = config_setting_get_member(e, "nic_gbps"))) {
		int type = config_setting_type(s);
		double v = type == CONFIG_TYPE_FLOAT ? config_setting_get_float(s) :
			   type == CONFIG_TYPE_INT ? config_setting_get_int(s) : -1;

		/* the cluster JSON's range */
		if (!(v >= 0.1 && v <= 1e5))
			return ar_seterr(-AR_EINVAL, "%s%s: entry %u: nic_gbps must be a number of Gbit/s from 0.1 to 100000",
					 where, name, i + 1);
		m->nic_gbps = v;
	}
	if ((s = config_setting_get_member(e, "intra_node"))) {
		if (config_setting_type(s) != CONFIG_TYPE_STRING ||
		    costmodel_link_class_GBps(config_setting_get_string(s)) <= 0)
			return ar_seterr(-AR_EINVAL, "%s%s: entry %u: intra_node must be one of %s",
					 where, name, i + 1, costmodel_link_class_names());
		m->intra_node = strdup(config_setting_get_string(s));
		if (!m->intra_node)
			return -ENOMEM;
	}
	return 0;
}

/* The string member @key of group @entry, or NULL with the error set. */
static const char *conf_map_member(const config_setting_t *entry,
				   const char *key, const char *where,
				   const char *name, unsigned int i)
{
	config_setting_t *s = config_setting_get_member(entry, key);

	if (!s || config_setting_type(s) != CONFIG_TYPE_STRING ||
	    !config_setting_get_string(s)[0]) {
		ar_seterr(-AR_EINVAL, "%s%s: entry %u needs a non-empty string \"%s\"",
			  where, name, i + 1, key);
		return NULL;
	}
	return config_setting_get_string(s);
}

static int conf_map_parse(struct conf *conf, const struct conf_directive *d,
			  const config_setting_t *s, const char *file)
{
	const char *key = d->kind == CONF_GRES_MAP ? "gres" : "nodes";
	struct conf_map **mapp = conf_field(conf, d);
	size_t *np = (size_t *)((char *)conf + d->count_offset);
	struct conf_map *map;
	unsigned int n, i;
	char where[512];

	snprintf(where, sizeof(where), "%s:%d: ", file,
		 config_setting_source_line(s));
	if (!config_setting_is_list(s) && !config_setting_is_array(s))
		return ar_seterr(-AR_EINVAL, "%s%s: expected a list ( { %s = \"...\"; gpu = \"...\"; }, ... )",
				 where, d->name, key);
	n = (unsigned int)config_setting_length(s);
	map = calloc(n ? n : 1, sizeof(*map));
	if (!map)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		config_setting_t *e = config_setting_get_elem(s, i);
		const char *match, *gpu;
		unsigned int k;

		snprintf(where, sizeof(where), "%s:%d: ", file,
			 config_setting_source_line(e));
		if (!config_setting_is_group(e)) {
			ar_seterr(-AR_EINVAL, "%s%s: entry %u is not a group { %s = ...; gpu = ...; }",
				  where, d->name, i + 1, key);
			goto err;
		}
		for (k = 0; k < (unsigned int)config_setting_length(e); k++) {
			const char *m = config_setting_name(config_setting_get_elem(e, k));
			bool link = d->kind == CONF_NODE_MAP &&
				    (!strcmp(m, "nics") || !strcmp(m, "nic_gbps") ||
				     !strcmp(m, "intra_node"));

			if (strcmp(m, key) && strcmp(m, "gpu") && !link) {
				ar_seterr(-AR_EINVAL, "%s%s: entry %u: unknown member \"%s\" (expected %s, gpu%s)",
					  where, d->name, i + 1, m, key,
					  d->kind == CONF_NODE_MAP ?
					  ", nics, nic_gbps, intra_node" : "");
				goto err;
			}
		}
		match = conf_map_member(e, key, where, d->name, i);
		if (!match)
			goto err;
		if (d->kind == CONF_NODE_MAP && !conf_glob_ok(match)) {
			ar_seterr(-AR_EINVAL, "%s%s: entry %u: \"%s\" is not a glob: a [ without its ], or a trailing \\",
				  where, d->name, i + 1, match);
			goto err;
		}
		map[i].line = config_setting_source_line(e);
		if (d->kind == CONF_NODE_MAP) {
			int rc = conf_map_links(e, where, d->name, i, &map[i]);

			if (rc < 0) {
				n = i + 1;
				conf_map_free(map, n);
				return rc;
			}
		}
		/* A node_map rule that gives a link need not name a GPU. */
		if (d->kind == CONF_NODE_MAP && !config_setting_get_member(e, "gpu") &&
		    (map[i].nics || map[i].nic_gbps > 0 || map[i].intra_node)) {
			gpu = NULL;
		} else {
			gpu = conf_map_member(e, "gpu", where, d->name, i);
			if (!gpu) {
				n = i + 1;
				conf_map_free(map, n);
				return -AR_EINVAL;
			}
		}
		map[i].match = strdup(match);
		map[i].gpu = gpu ? strdup(gpu) : NULL;
		if (!map[i].match || (gpu && !map[i].gpu)) {
			n = i + 1;
			conf_map_free(map, n);
			return -ENOMEM;
		}
	}
	conf_map_free(*mapp, *np);
	*mapp = map;
	*np = n;
	return 0;
err:
	conf_map_free(map, i);
	return -AR_EINVAL;
}

/* Set @d from libconfig setting @s, checking its type. */
static int conf_setting_parse(struct conf *conf, const struct conf_directive *d,
			      const config_setting_t *s, const char *file)
{
	char where[512], num[64];
	int type = config_setting_type(s);

	snprintf(where, sizeof(where), "%s:%d: ", file,
		 config_setting_source_line(s));
	switch (d->kind) {
	case CONF_GRES_MAP:
	case CONF_NODE_MAP:
		return conf_map_parse(conf, d, s, file);
	case CONF_INT:
		if (type != CONFIG_TYPE_INT && type != CONFIG_TYPE_INT64)
			return ar_seterr(-AR_EINVAL, "%s%s: expected an integer",
					 where, d->name);
		snprintf(num, sizeof(num), "%lld",
			 config_setting_get_int64(s));
		return conf_value_parse(conf, d, num, where);
	case CONF_DOUBLE:
		if (type == CONFIG_TYPE_FLOAT)
			snprintf(num, sizeof(num), "%.17g",
				 config_setting_get_float(s));
		else if (type == CONFIG_TYPE_INT || type == CONFIG_TYPE_INT64)
			snprintf(num, sizeof(num), "%lld",
				 config_setting_get_int64(s));
		else
			return ar_seterr(-AR_EINVAL, "%s%s: expected a number",
					 where, d->name);
		return conf_value_parse(conf, d, num, where);
	default:
		if (type != CONFIG_TYPE_STRING)
			return ar_seterr(-AR_EINVAL, "%s%s: expected a quoted string",
					 where, d->name);
		return conf_value_parse(conf, d, config_setting_get_string(s),
					where);
	}
}

static const struct conf_directive *conf_directive_find(const char *name)
{
	for (size_t i = 0; i < NDIRECTIVES; i++)
		if (strcmp(conf_directives[i].name, name) == 0)
			return &conf_directives[i];
	return NULL;
}

/*
 * What libconfig 1.5 does not check, checked on the text before it is
 * parsed: an integer without the L suffix is read into 32 bits (so
 * "workers = 4294967297" would be 1), and @include would read a file
 * past the size and type checks.  Strings and comments are skipped.
 */
static int conf_text_check(const char *text, size_t len, const char *path)
{
	const char *p = text, *end = text + len;
	int line = 1;

	if (memchr(text, '\0', len))
		return ar_seterr(-AR_EINVAL, "%s: holds a NUL byte: not a text file",
				 path);
	while (p < end) {
		if (*p == '\n') {
			line++;
			p++;
		} else if (*p == '"') {
			for (p++; p < end && *p != '"'; p++) {
				if (*p == '\\' && p + 1 < end)
					p++;
				if (*p == '\n')
					line++;
			}
			p += p < end;
		} else if (*p == '#' || (*p == '/' && p + 1 < end && p[1] == '/')) {
			while (p < end && *p != '\n')
				p++;
		} else if (*p == '/' && p + 1 < end && p[1] == '*') {
			for (p += 2; p + 1 < end && !(p[0] == '*' && p[1] == '/'); p++)
				if (*p == '\n')
					line++;
			p = p + 1 < end ? p + 2 : end;
		} else if (*p == '@') {
			return ar_seterr(-AR_EINVAL, "%s:%d: @include is not supported: write the settings into the file",
					 path, line);
		} else if (isalpha((unsigned char)*p) || *p == '_' || *p == '*') {
			while (p < end && (isalnum((unsigned char)*p) ||
					   strchr("_-*", *p)))
				p++;
		} else if (isdigit((unsigned char)*p) ||
			   ((*p == '-' || *p == '+') && p + 1 < end &&
			    isdigit((unsigned char)p[1]))) {
			const char *tok = p;
			bool is_float = false, is_long = false;
			char num[64];
			long long v;
			int base = 10;

			p += *p == '-' || *p == '+';
			if (p + 1 < end && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
				base = 16;
				p += 2;
			}
			while (p < end && (isalnum((unsigned char)*p) || *p == '.')) {
				if (base == 10 && strchr(".eE", *p))
					is_float = true;
				if (*p == 'L')
					is_long = true;
				p++;
			}
			if (is_float || is_long)
				continue;
			snprintf(num, sizeof(num), "%.*s", (int)(p - tok), tok);
			errno = 0;
			v = strtoll(num, NULL, base);
			if (errno == ERANGE || v < INT_MIN || v > INT_MAX)
				return ar_seterr(-AR_EINVAL, "%s:%d: %s is out of range: an integer setting is at most %d",
						 path, line, num, INT_MAX);
		} else {
			p++;
		}
	}
	return 0;
}

static int conf_file_read(struct conf *conf, const char *path)
{
	config_setting_t *root;
	config_t cfg;
	size_t len, skip;
	char *text;
	int rc;

	/* A regular file of bounded size: a FIFO or /dev/zero is refused. */
	rc = ar_file_read(path, AR_LIMIT_CONF_BYTES, &text, &len);
	if (rc < 0) {
		if (rc > -AR_EINVAL)
			return ar_seterr(-AR_EINVAL, "%s: cannot read: %s",
					 path, strerror(-rc));
		return rc;
	}
	skip = ar_skip_bom(text, len);
	rc = conf_text_check(text + skip, len - skip, path);
	if (rc < 0) {
		free(text);
		return rc;
	}
	config_init(&cfg);
	if (config_read_string(&cfg, text + skip) != CONFIG_TRUE) {
		rc = ar_seterr(-AR_EINVAL, "%s:%d: %s", path,
			       config_error_line(&cfg),
			       config_error_text(&cfg));
		goto out;
	}
	root = config_root_setting(&cfg);
	for (int i = 0; i < config_setting_length(root); i++) {
		config_setting_t *s = config_setting_get_elem(root, i);
		const char *file = config_setting_source_file(s);
		const struct conf_directive *d;

		if (!file)
			file = path;
		d = conf_directive_find(config_setting_name(s));
		if (!d) {
			rc = ar_seterr(-AR_EINVAL, "%s:%d: %s: unknown directive",
				       file, config_setting_source_line(s),
				       config_setting_name(s));
			goto out;
		}
		rc = conf_setting_parse(conf, d, s, file);
		if (rc < 0)
			goto out;
	}
out:
	config_destroy(&cfg);
	free(text);
	return rc;
}

/* Turn the user and group names into ids. */
static int conf_resolve(struct conf *conf, bool slurm_user_set)
{
	conf->slurm_uid = (uid_t)-1;
	conf->socket_gid = (gid_t)-1;
	if (conf->slurm_user[0]) {
		struct passwd *pw = getpwnam(conf->slurm_user);

		if (pw)
			conf->slurm_uid = pw->pw_uid;
		else if (slurm_user_set)
			return ar_seterr(-AR_EINVAL, "%s: slurm_user: no user \"%s\"",
					 conf->path, conf->slurm_user);
	}
	if (conf->socket_group[0]) {
		struct group *gr = getgrnam(conf->socket_group);

		if (!gr)
			return ar_seterr(-AR_EINVAL, "%s: socket_group: no group \"%s\"",
					 conf->path ? conf->path : "defaults",
					 conf->socket_group);
		conf->socket_gid = gr->gr_gid;
	}
	return 0;
}

int conf_create(const char *path, struct conf **confp)
{
	struct conf *conf;
	bool slurm_user_set = false;
	int rc;

	*confp = NULL;
	conf = calloc(1, sizeof(*conf));
	if (!conf)
		return -ENOMEM;
	for (size_t i = 0; i < NDIRECTIVES; i++) {
		const struct conf_directive *d = &conf_directives[i];

		if (!d->defval)
			continue;
		rc = conf_value_parse(conf, d, d->defval, "default ");
		if (rc < 0)
			goto err;
	}
	if (path) {
		char *saved = strdup(conf->slurm_user);

		conf->path = strdup(path);
		if (!conf->path || !saved) {
			free(saved);
			rc = -ENOMEM;
			goto err;
		}
		rc = conf_file_read(conf, path);
		slurm_user_set = strcmp(saved, conf->slurm_user) != 0;
		free(saved);
		if (rc < 0)
			goto err;
	}
	rc = conf_resolve(conf, slurm_user_set);
	if (rc < 0)
		goto err;
	*confp = conf;
	return 0;
err:
	conf_destroy(conf);
	return rc;
}

void conf_destroy(struct conf *conf)
{
	if (!conf)
		return;
	for (size_t i = 0; i < NDIRECTIVES; i++) {
		const struct conf_directive *d = &conf_directives[i];

		if (d->kind == CONF_STRING || d->kind == CONF_PATH)
			free(*(char **)conf_field(conf, d));
	}
	conf_map_free(conf->gres_map, conf->ngres_map);
	conf_map_free(conf->node_map, conf->nnode_map);
	free(conf->path);
	free(conf);
}

int conf_check_site(const struct conf *conf)
{
	const char *where = conf->path ? conf->path : "defaults";
	const struct conf_map *maps[] = { conf->gres_map, conf->node_map };
	const size_t counts[] = { conf->ngres_map, conf->nnode_map };
	const char *const names[] = { "gres_map", "node_map" };
	char path[PATH_MAX];
	struct stat st;

	snprintf(path, sizeof(path), "%s/gpus", conf->profiles_dir);
	if (stat(conf->profiles_dir, &st) < 0 || !S_ISDIR(st.st_mode))
		return ar_seterr(-AR_EINVAL, "%s: profiles_dir \"%s\" is not a directory",
				 where, conf->profiles_dir);
	if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
		return ar_seterr(-AR_EINVAL, "%s: profiles_dir \"%s\" has no gpus/ directory of GPU profiles",
				 where, conf->profiles_dir);
	for (size_t m = 0; m < ARRAY_SIZE(maps); m++) {
		for (size_t i = 0; i < counts[m]; i++) {
			const char *gpu = maps[m][i].gpu;

			/* A node_map rule may give only the network. */
			if (!gpu)
				continue;
			snprintf(path, sizeof(path), "%s/gpus/%s.ini",
				 conf->profiles_dir, gpu);
			if (strchr(gpu, '/') || stat(path, &st) < 0 ||
			    !S_ISREG(st.st_mode))
				return ar_seterr(-AR_EINVAL, "%s:%d: %s: unknown GPU \"%s\" (no %s)",
						 where, maps[m][i].line, names[m],
						 gpu, path);
		}
	}
	return 0;
}

static const char *const log_level_names[] = {
	"emerg", "alert", "crit", "error", "warning", "notice", "info", "debug",
};

/* Print @s as a libconfig string literal. */
static void conf_print_string(FILE *out, const char *s)
{
	fputc('"', out);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', out);
		fputc(*s, out);
	}
	fputc('"', out);
}

void conf_print(const struct conf *conf, FILE *out)
{
	fprintf(out, "# plannerd effective configuration (%s)\n",
		conf->path ? conf->path : "built-in defaults");
	for (size_t i = 0; i < NDIRECTIVES; i++) {
		const struct conf_directive *d = &conf_directives[i];
		const void *f = conf_field_const(conf, d);

		fprintf(out, "%s = ", d->name);
		switch (d->kind) {
		case CONF_STRING:
		case CONF_PATH:
			conf_print_string(out, *(char *const *)f);
			break;
		case CONF_MODE:
			fprintf(out, "\"%04o\"", *(const unsigned int *)f);
			break;
		case CONF_INT:
			fprintf(out, "%d", *(const int *)f);
			break;
		case CONF_DOUBLE:
			fprintf(out, "%.17g", *(const double *)f);
			break;
		case CONF_LOGLEVEL:
			fprintf(out, "\"%s\"",
				log_level_names[*(const int *)f & 7]);
			break;
		case CONF_GRES_MAP:
		case CONF_NODE_MAP: {
			const struct conf_map *map = *(struct conf_map *const *)f;
			size_t n = *(const size_t *)((const char *)conf +
						      d->count_offset);

			fputc('(', out);
			for (size_t k = 0; k < n; k++) {
				fprintf(out, "%s { %s = ", k ? "," : "",
					d->kind == CONF_GRES_MAP ? "gres" : "nodes");
				conf_print_string(out, map[k].match);
				if (map[k].gpu) {
					fputs("; gpu = ", out);
					conf_print_string(out, map[k].gpu);
				}
				if (map[k].nics)
					fprintf(out, "; nics = %d", map[k].nics);
				if (map[k].nic_gbps > 0)
					fprintf(out, "; nic_gbps = %.17g", map[k].nic_gbps);
				if (map[k].intra_node) {
					fputs("; intra_node = ", out);
					conf_print_string(out, map[k].intra_node);
				}
				fputs("; }", out);
			}
			fputs(n ? " )" : ")", out);
			break;
		}
		}
		fputs(";\n", out);
	}
}

/* troff-escape @s: backslashes and leading dots. */
static void conf_print_troff(FILE *out, const char *s)
{
	if (*s == '.' || *s == '\'')
		fputs("\\&", out);
	for (; *s; s++) {
		if (*s == '\\')
			fputs("\\e", out);
		else if (*s == '-')
			fputs("\\-", out);
		else
			fputc(*s, out);
	}
}

void conf_print_directives(FILE *out)
{
	for (size_t i = 0; i < NDIRECTIVES; i++) {
		const struct conf_directive *d = &conf_directives[i];

		fprintf(out, ".TP\n\\fB%s\\fR = \\fI%s\\fR", d->name,
			conf_kind_names[d->kind]);
		if (d->defval) {
			fputs(" (default: \\fB", out);
			conf_print_troff(out, d->defval[0] ? d->defval : "\"\"");
			fputs("\\fR)", out);
		}
		fputc('\n', out);
		conf_print_troff(out, d->doc);
		fputc('\n', out);
	}
}

const char *conf_map_gres(const struct conf *conf, const char *gres)
{
	for (size_t i = 0; i < conf->ngres_map; i++)
		if (strcmp(conf->gres_map[i].match, gres) == 0)
			return conf->gres_map[i].gpu;
	return NULL;
}

const struct conf_map *conf_map_node_links(const struct conf *conf,
					   const char *node)
{
	for (size_t i = 0; i < conf->nnode_map; i++) {
		const struct conf_map *m = &conf->node_map[i];

		if ((m->nics || m->nic_gbps > 0 || m->intra_node) &&
		    fnmatch(m->match, node, 0) == 0)
			return m;
	}
	return NULL;
}

const char *conf_map_node(const struct conf *conf, const char *node)
{
	for (size_t i = 0; i < conf->nnode_map; i++)
		if (conf->node_map[i].gpu &&
		    fnmatch(conf->node_map[i].match, node, 0) == 0)
			return conf->node_map[i].gpu;
	return NULL;
}
