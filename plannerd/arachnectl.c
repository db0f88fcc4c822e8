/*
 * arachnectl.c - the plannerd client for admins, scripts and tests.
 *
 * Exit status: 0 the daemon answered ok, 1 it answered with an error,
 * 2 bad usage or input, 3 the daemon could not be reached or broke the
 * protocol.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ar.h"
#include "ctl.h"

static const char usage[] =
	"Usage: arachnectl [OPTION]... COMMAND [ARG]...\n"
	"Talk to plannerd, the Arachne planning daemon.\n"
	"\n"
	"Commands:\n"
	"  ping                       check that plannerd answers\n"
	"  status                     counters and settings of the daemon\n"
	"  plan JOB --model NAME --cluster FILE [--user USER]\n"
	"       [--global-batch N] [--seq-len N] [--planner NAME] [--budget-s S]\n"
	"                             plan a composition for JOB and store it\n"
	"  replan JOB --cluster FILE [--horizon-s S]\n"
	"                             replan JOB on a new composition\n"
	"  show JOB                   the stored plan of JOB\n"
	"  forget JOB                 drop the stored plan of JOB\n"
	"  raw                        send request lines from stdin, print answers\n"
	"\n"
	"Elastic jobs (JOB defaults to $SLURM_JOB_ID; see arachnectl(1)):\n"
	"  list                       jobs with a plan directory you may read\n"
	"  shrink JOB --nodes N | --release NODES [--grace-s S]\n"
	"                             plan JOB on fewer of its nodes; pending until\n"
	"                             the job moved its state and committed\n"
	"  leave JOB [--grace-s S]    plan the job JOB joined without JOB\n"
	"  pending [JOB]              print \"GEN OP SECONDS MIGRATION\" of the change\n"
	"                             that waits for JOB's part; exit 1 if none\n"
	"  commit [JOB]               the migration ran: release the GPUs that go\n"
	"  abort [JOB] [--reason T]   it did not: back to the plan the state is in\n"
	"\n"
	"Options:\n"
	"  -s, --socket=PATH          plannerd's socket (default $ARACHNE_SOCKET,\n"
	"                             arachne.so's socket= in plugstack.conf, or\n"
	"                             " AR_PLANNERD_SOCKET ")\n"
	"      --plan-dir=DIR         arachne.so's plan_dir (default $ARACHNE_PLAN_ROOT,\n"
	"                             plugstack.conf's, or " AR_SPANK_PLAN_DIR ")\n"
	"  -j, --json                 print the daemon's answer as JSON\n"
	"  -t, --timeout=S            give up after S seconds (default 600)\n"
	"  -h, --help, -V, --version\n";


static int ctl_connect(const struct ctl *ctl)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(ctl->socket) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "arachnectl: socket path %s is longer than %zu bytes\n",
			ctl->socket, sizeof(sa.sun_path) - 1);
		return -1;
	}
	strcpy(sa.sun_path, ctl->socket);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		fprintf(stderr, "arachnectl: cannot connect to plannerd at %s: %s (is plannerd running?)\n",
			ctl->socket, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

static int ctl_write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * One answer line from @fd (without its newline); NULL on failure, said on
 * stderr when @verbose.
 */
static char *ctl_read_line(int fd, double timeout_s, bool verbose)
{
	double deadline = ar_now() + timeout_s;
	size_t len = 0, cap = 0;
	char *buf = NULL;

	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		double left = deadline - ar_now();
		ssize_t n;
		int rc;

		if (left <= 0) {
			if (verbose)
				fprintf(stderr, "arachnectl: no answer within %g s\n",
					timeout_s);
			goto fail;
		}
		rc = poll(&pfd, 1, (int)(left * 1000) + 1);
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc <= 0)
			continue;
		/* room for 64 KiB at a time */
		if (AR_GROW(buf, cap, len + 65536, 65536) < 0)
			goto fail;
		n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (verbose)
				fprintf(stderr, "arachnectl: plannerd closed the connection%s%s\n",
					n < 0 ? ": " : " without an answer",
					n < 0 ? strerror(errno) : "");
			goto fail;
		}
		len += (size_t)n;
		buf[len] = '\0';
		if (memchr(buf + len - n, '\n', (size_t)n)) {
			buf[strcspn(buf, "\n")] = '\0';
			return buf;
		}
	}
fail:
	free(buf);
	return NULL;
}

/*
 * Send @request (taking it) and read the answer; returns the exit status.
 * On success (0) *@answerp holds the "ok":true answer; a refusal (1) has
 * been printed.
 */
int ctl_request(const struct ctl *ctl, json_t *request, json_t **answerp)
{
	char *line = json_dumps(request, JSON_COMPACT), *answer_text = NULL;
	json_t *answer = NULL, *err;
	int fd, rc, status = EXIT_DAEMON;

	*answerp = NULL;
	json_decref(request);
	if (!line)
		return EXIT_USAGE;
	fd = ctl_connect(ctl);
	if (fd < 0)
		goto out;
	/*
	 * A daemon that refuses a client (busy) answers and closes at once,
	 * maybe before the request is written: read its answer even then.
	 */
	rc = ctl_write_all(fd, line, strlen(line));
	if (rc == 0)
		rc = ctl_write_all(fd, "\n", 1);
	answer_text = ctl_read_line(fd, ctl->timeout_s, rc == 0);
	if (!answer_text && rc < 0)
		fprintf(stderr, "arachnectl: sending to plannerd: %s\n",
			strerror(-rc));
	if (!answer_text)
		goto out;
	answer = json_loads(answer_text, 0, NULL);
	if (!json_is_object(answer) ||
	    !json_is_boolean(json_object_get(answer, "ok"))) {
		fprintf(stderr, "arachnectl: plannerd sent a malformed answer\n");
		goto out;
	}
	if (ctl->json)
		printf("%s\n", answer_text);
	if (json_is_true(json_object_get(answer, "ok"))) {
		*answerp = answer;
		answer = NULL;
		status = 0;
	} else {
		err = json_object_get(answer, "error");
		if (!ctl->json)
			fprintf(stderr, "arachnectl: %s: %s\n",
				json_string_value(json_object_get(err, "code")),
				json_string_value(json_object_get(err, "message")));
		status = EXIT_REFUSED;
	}
out:
	if (fd >= 0)
		close(fd);
	json_decref(answer);
	free(answer_text);
	free(line);
	return status;
}

/* Send @request, print the answer; returns the exit status. */
static int ctl_call(const struct ctl *ctl, json_t *request,
		    void (*print)(const json_t *answer))
{
	json_t *answer = NULL;
	int status = ctl_request(ctl, request, &answer);

	if (status == 0 && !ctl->json)
		print(answer);
	json_decref(answer);
	return status;
}

static void print_ping(const json_t *a)
{
	printf("plannerd %s is alive (you are uid %lld)\n",
	       json_string_value(json_object_get(a, "version")),
	       (long long)json_integer_value(json_object_get(a, "uid")));
}

static void print_status(const json_t *a)
{
	const char *key;
	json_t *v;

	json_object_foreach((json_t *)a, key, v) {
		char *text;

		if (!strcmp(key, "ok") || !strcmp(key, "op"))
			continue;
		text = json_is_string(v) ? strdup(json_string_value(v)) :
		       json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
		printf("%-14s %s\n", key, text ? text : "?");
		free(text);
	}
}

static void print_plan_summary(const json_t *plan)
{
	json_t *pred = json_object_get(plan, "predicted");
	json_t *planner = json_object_get(plan, "planner");
	json_t *templates = json_object_get(plan, "templates");
	size_t i;
	json_t *t;

	printf("model %s, micro-batch %lld, %zu templates, %.2f samples/s (%.3f s an iteration)\n",
	       json_string_value(json_object_get(plan, "model")),
	       (long long)json_integer_value(json_object_get(plan, "micro_batch")),
	       json_array_size(templates),
	       json_number_value(json_object_get(pred, "samples_per_s")),
	       json_number_value(json_object_get(pred, "iter_s")));
	json_array_foreach(templates, i, t) {
		json_t *st;
		size_t k;

		printf("  template %zu: %lld replicas of", i,
		       (long long)json_integer_value(json_object_get(t, "replicas")));
		json_array_foreach(json_object_get(t, "stages"), k, st)
			printf(" %s[%s%s tp%lld]", k ? "->" : "",
			       json_string_value(json_object_get(st, "gpu")),
			       "", (long long)json_integer_value(json_object_get(st, "tp")));
		putchar('\n');
	}
	printf("planner %s, %.3f s, %lld plans priced\n",
	       json_string_value(json_object_get(planner, "name")),
	       json_number_value(json_object_get(planner, "planning_s")),
	       (long long)json_integer_value(json_object_get(planner, "plans_priced")));
}

static void print_plan(const json_t *a)
{
	printf("job %s: %s\n", json_string_value(json_object_get(a, "job")),
	       json_is_true(json_object_get(a, "cached")) ?
	       "plan (answered from the cache)" : "plan");
	print_plan_summary(json_object_get(a, "plan"));
}

static void print_replan(const json_t *a)
{
	printf("job %s: %s\n%s\n", json_string_value(json_object_get(a, "job")),
	       json_is_true(json_object_get(a, "kept")) ? "old plan kept" :
	       "new plan", json_string_value(json_object_get(a, "reason")));
	printf("samples/s %.2f -> %.2f, gain %.3f s vs migration %.3f s within %.0f s\n",
	       json_number_value(json_object_get(a, "old_samples_per_s")),
	       json_number_value(json_object_get(a, "new_samples_per_s")),
	       json_number_value(json_object_get(a, "gain_s")),
	       json_number_value(json_object_get(a, "migration_s")),
	       json_number_value(json_object_get(a, "horizon_s")));
	print_plan_summary(json_object_get(a, "plan"));
}

static void print_show(const json_t *a)
{
	char *text = json_dumps(json_object_get(a, "plan"), JSON_INDENT(2));

	printf("%s\n", text ? text : "");
	free(text);
}

static void print_forget(const json_t *a)
{
	printf("job %s forgotten\n", json_string_value(json_object_get(a, "job")));
}

/* raw: one request per stdin line, answers printed as they come. */
static int ctl_raw(const struct ctl *ctl)
{
	char *line = NULL, *answer;
	size_t cap = 0;
	ssize_t n;
	int fd, status = 0;

	fd = ctl_connect(ctl);
	if (fd < 0)
		return EXIT_DAEMON;
	while ((n = getline(&line, &cap, stdin)) > 0) {
		if (line[n - 1] != '\n' && n + 1 < (ssize_t)cap)
			strcpy(line + n++, "\n");
		if (ctl_write_all(fd, line, (size_t)n) < 0) {
			status = EXIT_DAEMON;
			break;
		}
		answer = ctl_read_line(fd, ctl->timeout_s, true);
		if (!answer) {
			status = EXIT_DAEMON;
			break;
		}
		printf("%s\n", answer);
		fflush(stdout);
		free(answer);
	}
	free(line);
	close(fd);
	return status;
}

static json_t *ctl_job(const char *job)
{
	return json_string(job);
}

static json_t *ctl_cluster(const char *path)
{
	json_t *cl;

	if (!path) {
		fprintf(stderr, "arachnectl: --cluster FILE is required\n");
		exit(EXIT_USAGE);
	}
	cl = ar_json_load_file(path);
	if (!cl) {
		fprintf(stderr, "arachnectl: %s\n", ar_errmsg());
		exit(EXIT_USAGE);
	}
	return cl;
}

static json_t *ctl_plan_request(const struct ctl *ctl, const char *job)
{
	json_t *model, *req;
	const char *user = ctl->user;

	if (!ctl->model) {
		fprintf(stderr, "arachnectl: plan: --model NAME is required\n");
		exit(EXIT_USAGE);
	}
	if (!user) {
		struct passwd *pw = getpwuid(getuid());

		if (!pw) {
			fprintf(stderr, "arachnectl: who are you (uid %lu)? give --user\n",
				(unsigned long)getuid());
			exit(EXIT_USAGE);
		}
		user = pw->pw_name;
	}
	model = json_pack("{s:s}", "name", ctl->model);
	if (ctl->global_batch > 0)
		json_object_set_new(model, "global_batch",
				    json_integer(ctl->global_batch));
	if (ctl->seq_len > 0)
		json_object_set_new(model, "seq_len", json_integer(ctl->seq_len));
	if (ctl->planner)
		json_object_set_new(model, "planner", json_string(ctl->planner));
	if (ctl->budget_s > 0)
		json_object_set_new(model, "budget_s", json_real(ctl->budget_s));
	req = json_pack("{s:s, s:o, s:s, s:o, s:o}", "op", "plan",
			"job", ctl_job(job), "user", user, "model", model,
			"cluster", ctl_cluster(ctl->cluster));
	return req;
}

static double ctl_number(const char *opt, const char *arg)
{
	char *end;
	double v = strtod(arg, &end);

	if (end == arg || *end || v <= 0) {
		fprintf(stderr, "arachnectl: %s: \"%s\" is not a positive number\n",
			opt, arg);
		exit(EXIT_USAGE);
	}
	return v;
}

enum {
	OPT_MODEL = 256, OPT_CLUSTER, OPT_USER, OPT_PLANNER, OPT_BATCH,
	OPT_SEQ, OPT_BUDGET, OPT_HORIZON, OPT_PLAN_DIR, OPT_NODES, OPT_RELEASE,
	OPT_GRACE, OPT_REASON, OPT_ALL,
};

static const struct option long_opts[] = {
	{ "socket", required_argument, NULL, 's' },
	{ "json", no_argument, NULL, 'j' },
	{ "timeout", required_argument, NULL, 't' },
	{ "model", required_argument, NULL, OPT_MODEL },
	{ "cluster", required_argument, NULL, OPT_CLUSTER },
	{ "user", required_argument, NULL, OPT_USER },
	{ "planner", required_argument, NULL, OPT_PLANNER },
	{ "global-batch", required_argument, NULL, OPT_BATCH },
	{ "seq-len", required_argument, NULL, OPT_SEQ },
	{ "budget-s", required_argument, NULL, OPT_BUDGET },
	{ "horizon-s", required_argument, NULL, OPT_HORIZON },
	{ "plan-dir", required_argument, NULL, OPT_PLAN_DIR },
	{ "nodes", required_argument, NULL, OPT_NODES },
	{ "release", required_argument, NULL, OPT_RELEASE },
	{ "grace-s", required_argument, NULL, OPT_GRACE },
	{ "reason", required_argument, NULL, OPT_REASON },
	{ "all", no_argument, NULL, OPT_ALL },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

int main(int argc, char **argv)
{
	struct ctl ctl = { .timeout_s = 600 };
	const char *cmd, *job;
	int c;

	ctl.socket = getenv("ARACHNE_SOCKET");
	if (ctl.socket && !*ctl.socket)
		ctl.socket = NULL;
	/* GNU getopt permutes: options may come before or after COMMAND. */
	while ((c = getopt_long(argc, argv, "s:jt:hV", long_opts, NULL)) != -1) {
		switch (c) {
		case 's':
			ctl.socket = optarg;
			break;
		case 'j':
			ctl.json = true;
			break;
		case 't':
			ctl.timeout_s = ctl_number("--timeout", optarg);
			break;
		case OPT_MODEL:
			ctl.model = optarg;
			break;
		case OPT_CLUSTER:
			ctl.cluster = optarg;
			break;
		case OPT_USER:
			ctl.user = optarg;
			break;
		case OPT_PLANNER:
			ctl.planner = optarg;
			break;
		case OPT_BATCH:
			ctl.global_batch = (long)ctl_number("--global-batch",
							    optarg);
			break;
		case OPT_SEQ:
			ctl.seq_len = (long)ctl_number("--seq-len", optarg);
			break;
		case OPT_BUDGET:
			ctl.budget_s = ctl_number("--budget-s", optarg);
			break;
		case OPT_HORIZON:
			ctl.horizon_s = ctl_number("--horizon-s", optarg);
			break;
		case OPT_PLAN_DIR:
			ctl.plan_dir = optarg;
			break;
		case OPT_NODES:
			ctl.nodes = (long)ctl_number("--nodes", optarg);
			break;
		case OPT_RELEASE:
			ctl.release = optarg;
			break;
		case OPT_GRACE:
			ctl.grace_s = ctl_number("--grace-s", optarg);
			break;
		case OPT_REASON:
			ctl.reason = optarg;
			break;
		case OPT_ALL:
			ctl.all = true;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		case 'V':
			printf("arachnectl (arachne) %s\n", PACKAGE_VERSION);
			return 0;
		default:
			fputs(usage, stderr);
			return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		fputs(usage, stderr);
		return EXIT_USAGE;
	}
	cmd = argv[optind++];
	job = optind < argc ? argv[optind++] : NULL;
	if (optind < argc) {
		fprintf(stderr, "arachnectl: unexpected argument \"%s\"\n",
			argv[optind]);
		return EXIT_USAGE;
	}
	/* The site's plugstack.conf says where plannerd and the plans are. */
	if (!ctl.socket || !ctl.plan_dir)
		elastic_site_defaults(&ctl);
	if (!ctl.socket)
		ctl.socket = AR_PLANNERD_SOCKET;
	if (elastic_is_command(cmd))
		return elastic_main(&ctl, cmd, job);

	if (!strcmp(cmd, "ping") || !strcmp(cmd, "status")) {
		return ctl_call(&ctl, json_pack("{s:s}", "op", cmd),
				cmd[0] == 'p' ? print_ping : print_status);
	}
	if (!strcmp(cmd, "raw"))
		return ctl_raw(&ctl);
	if (!strcmp(cmd, "plan") || !strcmp(cmd, "replan") ||
	    !strcmp(cmd, "show") || !strcmp(cmd, "get") ||
	    !strcmp(cmd, "forget")) {
		json_t *req;

		if (!job) {
			fprintf(stderr, "arachnectl: %s: a JOB id is required\n",
				cmd);
			return EXIT_USAGE;
		}
		if (!strcmp(cmd, "plan"))
			return ctl_call(&ctl, ctl_plan_request(&ctl, job),
					print_plan);
		if (!strcmp(cmd, "replan")) {
			req = json_pack("{s:s, s:o, s:o}", "op", "replan",
					"job", ctl_job(job),
					"cluster", ctl_cluster(ctl.cluster));
			if (ctl.horizon_s > 0)
				json_object_set_new(req, "horizon_s",
						    json_real(ctl.horizon_s));
			return ctl_call(&ctl, req, print_replan);
		}
		if (!strcmp(cmd, "forget"))
			return ctl_call(&ctl, json_pack("{s:s, s:o}", "op",
							"forget", "job",
							ctl_job(job)),
					print_forget);
		return ctl_call(&ctl, json_pack("{s:s, s:o}", "op", "get",
						"job", ctl_job(job)),
				print_show);
	}
	fprintf(stderr, "arachnectl: unknown command \"%s\"\n%s", cmd, usage);
	return EXIT_USAGE;
}
