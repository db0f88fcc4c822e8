/*
 * main.c - plannerd: the node-local planning daemon.
 *
 * main() reads as a script: each step has its undo, run in reverse order
 * on the way out (munged's layout).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ar.h"
#include "plannerd.h"

static const char usage[] =
	"Usage: plannerd [OPTION]...\n"
	"The Arachne planning daemon: plans and replans jobs for the Slurm plugin\n"
	"and arachnectl over a Unix socket.\n"
	"\n"
	"  -f, --config=FILE     configuration (default " AR_PLANNERD_CONF ")\n"
	"  -F, --foreground      stay in the foreground, log to stderr\n"
	"  -T, --topology=FILE   read this node's hwloc XML topology from FILE\n"
	"      --show-config     print the effective configuration and exit\n"
	"      --directives      print the directive list of plannerd.conf(5)\n"
	"  -h, --help            this help\n"
	"  -V, --version         the version\n";

enum { OPT_SHOW_CONFIG = 256, OPT_DIRECTIVES };

static const struct option long_opts[] = {
	{ "config", required_argument, NULL, 'f' },
	{ "foreground", no_argument, NULL, 'F' },
	{ "topology", required_argument, NULL, 'T' },
	{ "show-config", no_argument, NULL, OPT_SHOW_CONFIG },
	{ "directives", no_argument, NULL, OPT_DIRECTIVES },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

struct args {
	const char *conf_path;
	const char *topology;
	bool foreground;
	bool show_config;
};

/* Exits on bad usage (2), --help, --version and --directives (0). */
static void args_parse(int argc, char **argv, struct args *a)
{
	bool conf_given = false;
	struct stat st;
	int c;

	a->conf_path = AR_PLANNERD_CONF;
	while ((c = getopt_long(argc, argv, "f:FT:hV", long_opts, NULL)) != -1) {
		switch (c) {
		case 'f':
			a->conf_path = optarg;
			conf_given = true;
			break;
		case 'F':
			a->foreground = true;
			break;
		case 'T':
			a->topology = optarg;
			break;
		case OPT_SHOW_CONFIG:
			a->show_config = true;
			break;
		case OPT_DIRECTIVES:
			conf_print_directives(stdout);
			exit(0);
		case 'h':
			fputs(usage, stdout);
			exit(0);
		case 'V':
			printf("plannerd (arachne) %s\n", PACKAGE_VERSION);
			exit(0);
		default:
			fputs(usage, stderr);
			exit(2);
		}
	}
	if (optind < argc) {
		fprintf(stderr, "plannerd: unexpected argument \"%s\"\n%s",
			argv[optind], usage);
		exit(2);
	}
	/* The installed default may be absent: then the defaults apply. */
	if (!conf_given && stat(a->conf_path, &st) < 0 && errno == ENOENT)
		a->conf_path = NULL;
}

/*
 * Detach from the terminal.  The parent waits on a pipe until the child
 * reports that it is serving (or why it is not), so `plannerd && next`
 * sees a daemon that is ready.  Returns the pipe's write end in the child.
 */
static int daemon_detach(void)
{
	int fds[2];
	pid_t pid;
	char status = 1;

	if (pipe(fds) < 0)
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid > 0) {
		close(fds[1]);
		if (read(fds[0], &status, 1) != 1)
			status = 1;
		_exit(status);
	}
	close(fds[0]);
	if (setsid() < 0)
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid > 0)
		_exit(0);
	if (chdir("/") < 0)
		return -errno;
	return fds[1];
}

static void daemon_detach_done(int fd, bool ok)
{
	char status = ok ? 0 : 1;
	int null;

	if (fd < 0)
		return;
	if (write(fd, &status, 1) != 1)
		ar_log(LOG_WARNING, "cannot report readiness to the parent");
	close(fd);
	null = open("/dev/null", O_RDWR);
	if (ok && null >= 0) {
		dup2(null, STDIN_FILENO);
		dup2(null, STDOUT_FILENO);
		dup2(null, STDERR_FILENO);
	}
	if (null > STDERR_FILENO)
		close(null);
}

/*
 * A client that leaves mid-answer must cost an EPIPE, not the daemon.
 * SIGHUP, SIGTERM and SIGINT get their handlers in loop_init().
 */
static void signals_init(void)
{
	signal(SIGPIPE, SIG_IGN);
}

static void cache_seed_one(const char *job, const char *key,
			   const json_t *doc, void *arg)
{
	cache_put(arg, key, json_object_get(doc, "plan"));
}

int main(int argc, char **argv)
{
	struct daemon d = {
		.listen_fd = -1, .epoll_fd = -1, .signal_fd = -1, .wake_fd = -1,
	};
	struct args a = { 0 };
	struct prune *prune = NULL;
	const struct conf *conf;
	int detach_fd = -1, rc;
	bool detached = false;

	args_parse(argc, argv, &a);
	d.conf_path = a.conf_path;
	d.topology_path = a.topology;
	d.foreground = a.foreground;
	d.started = ar_now();
	pthread_mutex_init(&d.gen_lock, NULL);
	pthread_mutex_init(&d.done_lock, NULL);
	ar_log_open("plannerd", false, LOG_INFO);

	rc = gen_create(d.conf_path, &d.gen);
	if (rc < 0) {
		ar_log(LOG_ERR, "%s", ar_errmsg()[0] ? ar_errmsg() :
		       ar_strerror(rc));
		return 1;
	}
	conf = d.gen->conf;
	if (a.show_config) {
		conf_print(conf, stdout);
		goto out_gen;
	}
	ar_log_open("plannerd", false, conf->log_level);
	rc = conf_check_site(conf);
	if (rc < 0)
		goto out_gen;
	/* systemd's journal stamps lines itself; a terminal or a file does not. */
	ar_log_timestamps(!getenv("JOURNAL_STREAM"));
	rc = topo_load(d.topology_path, &d.topo);
	if (rc < 0)
		goto out_gen;
	if (!d.foreground) {
		detach_fd = daemon_detach();
		if (detach_fd < 0) {
			rc = ar_seterr(detach_fd, "cannot detach: %s",
				       strerror(-detach_fd));
			goto out_gen;
		}
		detached = true;
		ar_log_open("plannerd", true, conf->log_level);
	}
	signals_init();

	rc = store_open(conf->state_dir, &d.store);
	if (rc < 0)
		goto out_detach;
	d.cache = cache_create((size_t)conf->cache_entries);
	if (!d.cache) {
		rc = -ENOMEM;
		goto out_store;
	}
	store_foreach(d.store, cache_seed_one, d.cache);
	rc = sock_listen(conf, &d.socket_ino);
	if (rc < 0)
		goto out_cache;
	d.listen_fd = rc;
	d.socket_path = strdup(conf->socket_path);
	if (!d.socket_path) {
		rc = -ENOMEM;
		goto out_loop;
	}
	rc = pool_create(&d, conf->workers, conf->workers_per_user, &d.pool);
	if (rc < 0)
		goto out_loop;
	rc = loop_init(&d);
	if (rc < 0)
		goto out_pool;
	rc = prune_start(&d, &prune);
	if (rc < 0)
		goto out_pool;

	ar_log(LOG_NOTICE, "plannerd %s serving %s: %zu stored plans, planner %s, node %s with %d GPUs (%s)",
	       PACKAGE_VERSION, conf->socket_path, store_count(d.store),
	       conf->planner, d.topo.hostname, d.topo.ngpus, d.topo.source);
	daemon_detach_done(detach_fd, true);
	detach_fd = -1;
	notify_send("READY=1");

	rc = loop_run(&d);
	prune_stop(prune);
	if (rc == 0)
		ar_log(LOG_NOTICE, "plannerd stopped");

out_pool:
	pool_destroy(d.pool);
out_loop:
	loop_fini(&d);
	free(d.socket_path);
out_cache:
	cache_destroy(d.cache);
out_store:
	store_close(d.store);
out_detach:
	daemon_detach_done(detach_fd, false);
out_gen:
	if (rc < 0) {
		const char *msg = ar_errmsg()[0] ? ar_errmsg() : ar_strerror(rc);

		ar_log(LOG_ERR, "%s", msg);
		/* Detached, the log is syslog: say it where it was started. */
		if (detached)
			fprintf(stderr, "plannerd: %s\n", msg);
	}
	gen_put(d.gen);
	ar_log_close();
	pthread_mutex_destroy(&d.done_lock);
	pthread_mutex_destroy(&d.gen_lock);
	return rc < 0 ? 1 : 0;
}
