/*
 * arachne-gpt - the reference trainer: a small GPT in C that trains on
 * one process, or under mpirun/srun on exactly the plan it is given, and
 * moves its live state when the plan changes.  arachne-gpt(1) is the
 * manual; docs/gpt.md the design.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "ar.h"
#include "gpt.h"

/* OpenBLAS's own threads would fight the ranks for the cores. */
extern void openblas_set_num_threads(int n) __attribute__((weak));

#define MAX_THEN	16
/* How long a segment waits for another allocation's ranks (a join's deadline). */
#define PLANDIR_MEETING_S	600.0

struct then {
	long step;
	const char *path;
	struct gpt_plan *gp;
};

struct args {
	const char *model;
	long steps;
	uint64_t seed;
	const char *data;
	const char *plan;
	const char *cluster;
	const char *profiles;
	const char *checkpoint;
	const char *resume;
	const char *plan_dir;
	const char *world;		/* --world: meet other launches there */
	const char *node;		/* --node: this launch's node */
	int micro_batch;
	struct gpt_adamw opt;
	double timeout_s;
	int nthen;
	struct then then[MAX_THEN];
	bool quiet, verbose;
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: arachne-gpt --model NAME --steps N --seed S [--data FILE]\n"
		"                   [--plan PLAN.json --cluster C.json] [--then STEP:PLAN.json ...]\n"
		"                   [--plan-dir DIR --checkpoint CKPT] [--world DIR [--node NAME]]\n"
		"Train a small GPT on one process, or under mpirun/srun on exactly the given\n"
		"plan (one rank per GPU of the cluster), moving the live state when the plan\n"
		"changes.  Rank 0 prints \"step K loss X\" after every step.\n"
		"\n"
		"  -m, --model NAME        a model of PROFILES/models/ (gpt-tiny)\n"
		"  -n, --steps N           training steps\n"
		"  -s, --seed S            weights and batches follow from it\n"
		"  -d, --data FILE         training bytes (default %s)\n"
		"  -P, --plan FILE         a plan JSON (arachne-plan --format json)\n"
		"  -c, --cluster FILE      the cluster the plans are placed on\n"
		"  -t, --then STEP:FILE    after step STEP, move to the plan in FILE\n"
		"      --plan-dir DIR      an elastic job's plan directory ($ARACHNE_PLAN_DIR):\n"
		"                          train its plan, resume from --checkpoint, and at a\n"
		"                          pending change move the state and stop\n"
		"      --world DIR         the job's ranks come from several launches (two\n"
		"                          allocations): meet the others in DIR and train\n"
		"                          over TCP; each launch's ranks take the GPUs of the\n"
		"                          node they run on\n"
		"      --node NAME         the cluster node this launch runs on (default\n"
		"                          $SLURMD_NODENAME, else the host name)\n"
		"  -b, --micro-batch N     one process: micro-batch size (default 1)\n"
		"      --checkpoint DIR    write the state there before each plan change and\n"
		"                          at the end (one file per rank)\n"
		"      --resume DIR        start from the checkpoint in DIR (with its plan)\n"
		"      --lr X              AdamW learning rate (default 6e-4)\n"
		"      --weight-decay X    AdamW weight decay of the matrices (default 0.01)\n"
		"      --timeout-s S       a migration's wait for a silent peer (default 60)\n"
		"  -p, --profiles DIR      profile data (default $AR_PROFILES, else the installed)\n"
		"  -q, --quiet             no progress on stderr\n"
		"  -v, --verbose           say what every rank does at a plan change\n"
		"  -h, --help              this text\n"
		"  -V, --version           the version\n"
		"Exit status: 0 success, 1 failure (a migration that failed: the old state is\n"
		"intact), 2 bad input.\n",
		GPT_DEFAULT_DATA);
}

/* Bad input: every rank sees the same, rank 0 says it. */
static int bad_input(int rank, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int bad_input(int rank, const char *fmt, ...)
{
	va_list ap;

	if (rank == 0) {
		va_start(ap, fmt);
		fputs("arachne-gpt: ", stderr);
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
		va_end(ap);
	}
	return 2;
}

static bool parse_long(const char *s, long lo, long hi, long *v)
{
	char *end;

	errno = 0;
	*v = strtol(s, &end, 10);
	return !errno && end != s && !*end && *v >= lo && *v <= hi;
}

static bool parse_double(const char *s, double lo, double hi, double *v)
{
	char *end;

	errno = 0;
	*v = strtod(s, &end);
	return !errno && end != s && !*end && *v >= lo && *v <= hi;
}

static int parse_args(int argc, char **argv, int rank, struct args *a)
{
	enum { OPT_LR = 256, OPT_WD, OPT_TIMEOUT, OPT_CHECKPOINT, OPT_RESUME,
	       OPT_PLAN_DIR, OPT_WORLD, OPT_NODE };
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "steps", required_argument, NULL, 'n' },
		{ "seed", required_argument, NULL, 's' },
		{ "data", required_argument, NULL, 'd' },
		{ "plan", required_argument, NULL, 'P' },
		{ "cluster", required_argument, NULL, 'c' },
		{ "then", required_argument, NULL, 't' },
		{ "micro-batch", required_argument, NULL, 'b' },
		{ "lr", required_argument, NULL, OPT_LR },
		{ "weight-decay", required_argument, NULL, OPT_WD },
		{ "timeout-s", required_argument, NULL, OPT_TIMEOUT },
		{ "checkpoint", required_argument, NULL, OPT_CHECKPOINT },
		{ "resume", required_argument, NULL, OPT_RESUME },
		{ "plan-dir", required_argument, NULL, OPT_PLAN_DIR },
		{ "world", required_argument, NULL, OPT_WORLD },
		{ "node", required_argument, NULL, OPT_NODE },
		{ "profiles", required_argument, NULL, 'p' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 }
	};
	bool have_seed = false;
	long v;
	double d;
	int c;

	memset(a, 0, sizeof(*a));
	a->data = GPT_DEFAULT_DATA;
	a->micro_batch = 1;
	a->timeout_s = 60;
	a->opt = (struct gpt_adamw){ .lr = 6e-4f, .beta1 = 0.9f, .beta2 = 0.95f,
				     .eps = 1e-8f, .weight_decay = 0.01f };
	opterr = rank == 0;
	while ((c = getopt_long(argc, argv, "m:n:s:d:P:c:t:b:p:qvhV", opts,
				NULL)) != -1) {
		switch (c) {
		case 'm':
			a->model = optarg;
			break;
		case 'n':
			if (!parse_long(optarg, 0, 1L << 30, &a->steps))
				return bad_input(rank, "--steps %s: expected 0 to 2^30", optarg);
			break;
		case 's':
			if (!parse_long(optarg, 0, 1L << 62, &v))
				return bad_input(rank, "--seed %s: expected a non-negative integer", optarg);
			a->seed = (uint64_t)v;
			have_seed = true;
			break;
		case 'd':
			a->data = optarg;
			break;
		case 'P':
			a->plan = optarg;
			break;
		case 'c':
			a->cluster = optarg;
			break;
		case 't': {
			const char *colon = strchr(optarg, ':');
			char num[32];

			if (a->nthen == MAX_THEN)
				return bad_input(rank, "at most %d --then", MAX_THEN);
			if (!colon || colon == optarg || !colon[1] ||
			    colon - optarg >= (long)sizeof(num))
				return bad_input(rank, "--then %s: expected STEP:PLAN.json", optarg);
			memcpy(num, optarg, colon - optarg);
			num[colon - optarg] = '\0';
			if (!parse_long(num, 1, 1L << 30, &v))
				return bad_input(rank, "--then %s: STEP must be a positive integer", optarg);
			a->then[a->nthen].step = v;
			a->then[a->nthen++].path = colon + 1;
			break;
		}
		case 'b':
			if (!parse_long(optarg, 1, 4096, &v))
				return bad_input(rank, "--micro-batch %s: expected 1 to 4096", optarg);
			a->micro_batch = (int)v;
			break;
		case OPT_LR:
			if (!parse_double(optarg, 0, 10, &d))
				return bad_input(rank, "--lr %s: expected 0 to 10", optarg);
			a->opt.lr = (float)d;
			break;
		case OPT_WD:
			if (!parse_double(optarg, 0, 10, &d))
				return bad_input(rank, "--weight-decay %s: expected 0 to 10", optarg);
			a->opt.weight_decay = (float)d;
			break;
		case OPT_TIMEOUT:
			if (!parse_double(optarg, 0.1, 86400, &a->timeout_s))
				return bad_input(rank, "--timeout-s %s: expected 0.1 to 86400", optarg);
			break;
		case OPT_CHECKPOINT:
			a->checkpoint = optarg;
			break;
		case OPT_RESUME:
			a->resume = optarg;
			break;
		case OPT_PLAN_DIR:
			a->plan_dir = optarg;
			break;
		case OPT_WORLD:
			a->world = optarg;
			break;
		case OPT_NODE:
			a->node = optarg;
			break;
		case 'p':
			a->profiles = optarg;
			break;
		case 'q':
			a->quiet = true;
			break;
		case 'v':
			a->verbose = true;
			break;
		case 'h':
			if (rank == 0)
				usage(stdout);
			return 0;
		case 'V':
			if (rank == 0)
				printf("arachne-gpt %s\n", PACKAGE_VERSION);
			return 0;
		default:
			if (rank == 0)
				usage(stderr);
			return 2;
		}
	}
	if (optind < argc)
		return bad_input(rank, "unexpected argument '%s'", argv[optind]);
	if (!a->model || !a->steps || !have_seed)
		return bad_input(rank, "--model, --steps and --seed are required (--help)");
	if (a->plan_dir && (a->plan || a->cluster || a->nthen || a->resume))
		return bad_input(rank, "--plan-dir takes the plans and the cluster from the plan directory: no --plan, --cluster, --then or --resume");
	if (a->plan_dir && !a->checkpoint)
		return bad_input(rank, "--plan-dir needs --checkpoint DIR: the state between the job's segments");
	if (!a->plan != !a->cluster)
		return bad_input(rank, "--plan and --cluster go together");
	if (a->nthen && !a->plan)
		return bad_input(rank, "--then needs --plan and --cluster");
	if (a->world && !a->plan)
		return bad_input(rank, "--world needs --plan and --cluster (with --plan-dir the plan directory is the meeting place)");
	if (a->node && !a->world && !a->plan_dir)
		return bad_input(rank, "--node goes with --world or --plan-dir");
	for (int i = 0; i < a->nthen; i++)
		if (a->then[i].step >= a->steps ||
		    (i && a->then[i].step <= a->then[i - 1].step))
			return bad_input(rank, "--then %ld: steps must increase and stay below --steps %ld",
					 a->then[i].step, a->steps);
	return -1;		/* go on */
}

/* ---------------------------------------------------------------------
 * The job: which GPU of the cluster each rank drives.
 * ------------------------------------------------------------------- */

/*
 * When the cluster's node names are the hosts the ranks run on (a real
 * allocation), each host's ranks take that node's GPUs in the order of
 * their ranks; otherwise rank i drives the cluster's i-th GPU (one host
 * running everything, as in the tests).  Every rank sees the same names,
 * so every rank makes the same choice.
 */
static int map_ranks(struct gpt_job *job)
{
	enum { NAME = 64 };
	const struct costmodel_cluster *cl = job->cl;
	char host[MPI_MAX_PROCESSOR_NAME] = "", *all;
	bool by_host = true;
	int len = 0, i = 0;

	job->node_of = calloc(job->size, sizeof(int));
	job->gpu_of = calloc(job->size, sizeof(int));
	all = calloc(job->size, NAME);
	if (!job->node_of || !job->gpu_of || !all) {
		free(all);
		return -ENOMEM;
	}
	MPI_Get_processor_name(host, &len);
	host[strcspn(host, ".")] = '\0';
	host[NAME - 1] = '\0';
	gpt_allgather(job->comm, host, NAME, GPT_BYTE, all);
	for (int r = 0; r < job->size && by_host; r++) {
		const char *h = all + (size_t)r * NAME;
		int node = costmodel_cluster_node_find(cl, h), k = 0;

		for (int q = 0; q < r; q++)
			k += !strcmp(all + (size_t)q * NAME, h);
		by_host = node >= 0 && k < cl->nodes[node].gpus;
		job->node_of[r] = node;
		job->gpu_of[r] = k;
	}
	free(all);
	if (by_host)
		return 0;
	for (size_t n = 0; n < cl->nnodes; n++)
		for (int g = 0; g < cl->nodes[n].gpus && i < job->size; g++, i++) {
			job->node_of[i] = (int)n;
			job->gpu_of[i] = g;
		}
	return 0;
}

static int load_plan(const struct gpt_job *job, const char *path,
		     struct gpt_plan **gpp)
{
	struct costmodel_plan *plan = NULL;
	json_t *root;
	int rc;

	*gpp = NULL;
	root = ar_json_load_file(path);
	if (!root)
		return ar_seterr(-AR_EINVAL, "%s", ar_errmsg());
	rc = costmodel_plan_from_json(job->cm, job->cl, root, &plan);
	json_decref(root);
	if (rc < 0)
		return ar_seterr(rc, "%s: %s", path, ar_errmsg());
	rc = gpt_plan_create(job, plan, gpp);
	if (rc < 0) {
		costmodel_plan_free(plan);
		return ar_seterr(rc, "%s: %s", path, ar_errmsg());
	}
	return 0;
}

static int check_size(const struct gpt_job *job, const char *what)
{
	int gpus = costmodel_cluster_total_gpus(job->cl);

	if (gpus != job->size)
		return ar_seterr(-AR_EINVAL, "%s has %d GPUs but %d ranks were started: start one rank per GPU",
				 what, gpus, job->size);
	return 0;
}

/*
 * The job's ranks come from several launches (two allocations, whose
 * steps share no MPI world): each launch's ranks take the GPUs of the
 * node they run on (--node, $SLURMD_NODENAME or the host name), in the
 * order of their ranks, so that job rank i drives the cluster's i-th GPU;
 * then every rank of every launch meets in @dir as @name and the job
 * trains over TCP.
 */
static const char *launch_node(const struct args *a, char *buf, size_t size)
{
	const char *env = getenv("SLURMD_NODENAME");

	if (a->node)
		return a->node;
	if (env && *env)
		return env;
	if (gethostname(buf, size) < 0)
		snprintf(buf, size, "localhost");
	buf[size - 1] = '\0';
	buf[strcspn(buf, ".")] = '\0';
	return buf;
}

static int join_world(const struct args *a, struct gpt_job *job,
		      const char *dir, const char *name, const char *called_off,
		      double wait_s)
{
	enum { NAME = 64 };
	const struct costmodel_cluster *cl = job->cl;
	char host[NAME] = "", buf[NAME], *all;
	int gpus = costmodel_cluster_total_gpus(cl), node, k = 0, rank, rc;
	struct migrate_rdzv_opts ro = {
		.dir = dir, .name = name, .size = gpus,
		.join_timeout_s = wait_s, .timeout_s = a->timeout_s,
		.called_off = called_off,
	};
	struct gpt_comm *world;

	snprintf(host, sizeof(host), "%s", launch_node(a, buf, sizeof(buf)));
	all = calloc(job->size, NAME);
	if (!all)
		return -ENOMEM;
	gpt_allgather(job->comm, host, NAME, GPT_BYTE, all);
	for (int q = 0; q < job->rank; q++)
		k += !strcmp(all + (size_t)q * NAME, host);
	free(all);
	node = costmodel_cluster_node_find(cl, host);
	if (node < 0)
		return ar_seterr(-AR_EINVAL, "this launch runs on node %s, which the cluster does not have (--node)",
				 host);
	if (k >= cl->nodes[node].gpus)
		return ar_seterr(-AR_EINVAL, "node %s has %d GPUs, but this launch started more ranks there",
				 host, cl->nodes[node].gpus);
	rank = k;
	for (int n = 0; n < node; n++)
		rank += cl->nodes[n].gpus;
	free(job->node_of);
	free(job->gpu_of);
	job->node_of = calloc(gpus, sizeof(int));
	job->gpu_of = calloc(gpus, sizeof(int));
	if (!job->node_of || !job->gpu_of)
		return -ENOMEM;
	for (size_t n = 0, i = 0; n < cl->nnodes; n++)
		for (int g = 0; g < cl->nodes[n].gpus; g++, i++) {
			job->node_of[i] = (int)n;
			job->gpu_of[i] = g;
		}
	ro.rank = rank;
	rc = gpt_comm_tcp(&ro, &world);
	if (rc < 0)
		return ar_seterr(rc, "%s: %s", dir, ar_errmsg());
	gpt_comm_free(job->comm);
	job->comm = world;
	job->rank = rank;
	job->size = gpus;
	return 0;
}

/*
 * Of two compositions, the one that has every node of the other (a join
 * adds nodes, a shrink or a leave takes some away): the cluster that both
 * plans of a pending change are placed on.  NULL (freeing both) when
 * neither has all of the other's nodes.
 */
static struct costmodel_cluster *cluster_union(struct costmodel_cluster *a,
					       struct costmodel_cluster *b)
{
	struct costmodel_cluster *in[2] = { a, b };

	for (int k = 0; k < 2; k++) {
		const struct costmodel_cluster *big = in[k], *small = in[1 - k];
		bool all = true;

		for (size_t n = 0; n < small->nnodes && all; n++) {
			int at = costmodel_cluster_node_find(big,
							     small->nodes[n].name);

			all = at >= 0 &&
			      big->nodes[at].gpus >= small->nodes[n].gpus;
		}
		if (all) {
			costmodel_cluster_free(in[1 - k]);
			return in[k];
		}
	}
	costmodel_cluster_free(a);
	costmodel_cluster_free(b);
	return NULL;
}

/*
 * --plan-dir: the generation the job's state is in, the cluster, its
 * plan, and the checkpoint to resume from when there is one.  The cluster
 * is the generation's composition, or, while a change is pending from it,
 * the larger of its and the pending one's, so that the change moves the
 * state at the start of this run.  When that cluster has more GPUs than
 * this launch has ranks, the others are another allocation's: every rank
 * meets them in the plan directory (join_world()) under a name of the
 * generations and the checkpoint's step, which every launch reads alike.
 * A checkpoint of another generation is taken only when that generation's
 * plan is the same (an aborted change makes the plan before it the next
 * generation).  1: nothing left to train (said), the run ends;
 * -AR_EABORT: the meeting failed (each rank said why).
 */
static int plandir_open(const struct args *a, struct gpt_job *job,
			struct costmodel_cluster **clp, unsigned *genp,
			struct gpt_plan **gpp, const char **resumep)
{
	char path[4096], what[4200], name[96], off[4200];
	json_t *comp = NULL, *pending_comp = NULL;
	struct costmodel_cluster *pending_cl = NULL;
	unsigned mark = 0, pending = 0;
	long mark_step = 0;
	int rc;

	rc = gpt_ckpt_marked(a->checkpoint, &mark, &mark_step);
	if (rc == 0)
		rc = gpt_plandir_start(job, a->plan_dir, mark, genp, &comp,
				       &pending, &pending_comp);
	if (rc == 0)
		rc = costmodel_cluster_from_json(job->cm, comp, clp);
	if (rc == 0 && pending_comp) {
		rc = costmodel_cluster_from_json(job->cm, pending_comp,
						 &pending_cl);
		if (rc == 0) {
			*clp = cluster_union(*clp, pending_cl);
			if (!*clp)
				rc = ar_seterr(-AR_EINVAL, "generation %u's composition and generation %u's each have nodes the other lacks",
					       *genp, pending);
		}
	}
	json_decref(comp);
	json_decref(pending_comp);
	if (rc < 0)
		return ar_seterr(rc, "%s: %s", a->plan_dir, ar_errmsg());
	job->cl = *clp;
	if (costmodel_cluster_total_gpus(job->cl) > job->size) {
		if (!pending && mark == *genp && mark_step >= a->steps) {
			if (job->rank == 0)
				fprintf(stderr, "arachne-gpt: the checkpoint is of step %ld: nothing left to train\n",
					mark_step);
			return 1;
		}
		snprintf(name, sizeof(name), "gpt-world-%u-%u-%ld", *genp,
			 pending, mark == *genp ? mark_step : 0);
		snprintf(off, sizeof(off), "%s/migration.%u.abandoned",
			 a->plan_dir, pending);
		/* The other allocation's segment may start later: wait as
		 * long as a change's deadline (an abort calls it off). */
		rc = join_world(a, job, a->plan_dir, name,
				pending ? off : NULL,
				a->timeout_s > PLANDIR_MEETING_S ? a->timeout_s :
								   PLANDIR_MEETING_S);
		if (rc < 0) {
			fprintf(stderr, "arachne-gpt: rank %d: %s\n", job->rank,
				ar_errmsg());
			return -AR_EABORT;
		}
	} else {
		snprintf(what, sizeof(what), "%s: generation %u's composition",
			 a->plan_dir, pending ? pending : *genp);
		rc = check_size(job, what);
		if (rc == 0)
			rc = map_ranks(job);
	}
	if (rc == 0)
		rc = gpt_plandir_plan(a->plan_dir, *genp, path, sizeof(path));
	if (rc == 0)
		rc = load_plan(job, path, gpp);
	if (rc < 0 || !mark)
		return rc;
	if (mark != *genp && !gpt_plandir_same(a->plan_dir, mark, *genp))
		return ar_seterr(-AR_EINVAL, "%s: its state is of generation %u, the job's is in generation %u, another plan",
				 a->checkpoint, mark, *genp);
	*resumep = a->checkpoint;
	return 0;
}

/* ---------------------------------------------------------------------
 * Progress.
 * ------------------------------------------------------------------- */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void progress(const struct args *a, const struct gpt_job *job,
		     long step, double loss, double step_s, double total_s)
{
	static int tty = -1;
	double tok_s = step_s > 0 ? job->cfg.global_batch * job->cfg.T / step_s : 0;

	if (a->quiet)
		return;
	if (tty < 0)
		tty = isatty(STDERR_FILENO);
	if (tty) {
		fprintf(stderr, "\rarachne-gpt: step %ld/%ld  loss %.4f  %.0f ms/step  %.0f tokens/s ",
			step, a->steps, loss, step_s * 1e3, tok_s);
		if (step == a->steps)
			fputc('\n', stderr);
	} else if (step == a->steps || step % (a->steps / 10 + 1) == 0) {
		fprintf(stderr, "arachne-gpt: step %ld/%ld loss %.4f, %.1f s so far\n",
			step, a->steps, loss, total_s);
	}
}

/* ---------------------------------------------------------------------
 * Training.
 * ------------------------------------------------------------------- */

/*
 * Every rank learns the step the checkpoint was written after; ranks
 * without state pass -1.  A rank that could not read its file makes
 * every rank stop.
 */
static int resume_step(const struct gpt_job *job, int rc, long step,
		       long *firstp)
{
	/* max of the steps, and max of minus the steps (ranks without state
	 * take no part in either) */
	long v[3] = { rc < 0, step < 0 ? -1 : step, step < 0 ? -LONG_MAX : -step };

	gpt_allreduce(job->comm, v, 3, GPT_LONG, GPT_MAX);
	if (v[0])
		return -AR_EABORT;
	if (v[1] < 0)
		return ar_seterr(-AR_EINVAL, "no rank of the plan found its checkpoint");
	if (v[1] != -v[2])
		return ar_seterr(-AR_EINVAL, "the checkpoint's files are of steps %ld to %ld: not one checkpoint",
				 -v[2], v[1]);
	*firstp = v[1] + 1;
	return 0;
}

/*
 * Every rank wrote its file of the checkpoint: rank 0 marks it as of plan
 * generation @gen, moved there by the change @op or NULL (with --plan-dir;
 * without it, nothing to mark).
 */
static int checkpoint_mark(const struct args *a, const struct gpt_job *job,
			   unsigned gen, long step, const char *op)
{
	int rc = 0;

	if (!a->plan_dir)
		return 0;
	gpt_barrier(job->comm);
	if (job->rank == 0)
		rc = gpt_ckpt_mark(a->checkpoint, gen, step, op);
	return rc;
}

static int migrate_after(const struct args *a, struct gpt_job *job,
			 struct gpt_trainer *tr, const struct then *t,
			 unsigned gen)
{
	struct gpt_live_opts lo = { .timeout_s = a->timeout_s,
				    .verbose = a->verbose };
	int rc = 0;

	if (a->checkpoint)
		rc = gpt_ckpt_save(tr, a->checkpoint, t->step);
	if (rc == 0)
		rc = checkpoint_mark(a, job, gen, t->step, NULL);
	if (rc < 0) {
		fprintf(stderr, "arachne-gpt: rank %d: checkpoint before the migration after step %ld: %s\n",
			job->rank, t->step, ar_errmsg());
		return rc;
	}
	rc = gpt_live_migrate(job, tr, t->gp, t->step, &lo);
	if (rc < 0)
		fprintf(stderr, "arachne-gpt: rank %d: the migration after step %ld failed: %s; migration aborted, the old state is intact%s%s\n",
			job->rank, t->step,
			*ar_errmsg() ? ar_errmsg() : ar_strerror(rc),
			a->checkpoint ? " and saved in " : "",
			a->checkpoint ? a->checkpoint : "");
	return rc;
}

/*
 * --plan-dir: a change pending from generation @gen after step @step.
 * The state moves to its place in the pending plan in-process, is written
 * as the checkpoint of that generation, and the run stops so that the
 * job's scripts commit the change (a shrink releases nodes this run still
 * holds) and start the next segment on it.  Returns 1 after the move, 2
 * when the pending plan has GPUs this run does not (a join: the next run
 * meets another allocation's ranks, plandir_open()), 0 when nothing is
 * pending, and
 * -AR_EABORT, the reason said, when the job must end.
 */
static int plandir_change(const struct args *a, struct gpt_job *job,
			  struct gpt_trainer *tr, unsigned *genp, long step,
			  struct gpt_plan **newp)
{
	struct then t = { .step = step };
	char path[4096], op[16];
	unsigned gen = *genp, now, next;
	int rc;

	rc = gpt_plandir_poll(job, a->plan_dir, gen, &now, &next, op);
	/* A replan to the same plan (a step that found the allocation
	 * changed, after an abort): nothing moves, the run goes on. */
	if (rc == 0 && now != gen && !next) {
		if (gpt_plandir_same(a->plan_dir, gen, now))
			*genp = now;
		else
			rc = ar_seterr(-AR_EINVAL, "%s: generation %u replaced generation %u without a migration: its state is lost",
				       a->plan_dir, now, gen);
	}
	if (rc < 0 && job->rank == 0)
		fprintf(stderr, "arachne-gpt: %s\n", ar_errmsg());
	if (rc < 0)
		return -AR_EABORT;
	if (!next)
		return 0;
	rc = gpt_plandir_plan(a->plan_dir, next, path, sizeof(path));
	if (rc == 0)
		rc = load_plan(job, path, &t.gp);
	if (rc < 0) {
		/* Every rank read the same plan and failed alike. */
		if (job->rank == 0)
			fprintf(stderr, "arachne-gpt: generation %u (%s): the plan needs GPUs this run does not have (%s): stopping after step %ld with the state of generation %u in %s; the next run, with the ranks of the other allocation, moves it\n",
				next, op, ar_errmsg(), step, gen, a->checkpoint);
		return 2;
	}
	t.path = path;
	*newp = t.gp;
	if (migrate_after(a, job, tr, &t, gen) < 0)
		return -AR_EABORT;
	rc = gpt_ckpt_save(tr, a->checkpoint, step);
	if (rc == 0)
		rc = gpt_ckpt_drop(tr, a->checkpoint);
	if (rc == 0)
		rc = checkpoint_mark(a, job, next, step, op);
	if (rc < 0) {
		fprintf(stderr, "arachne-gpt: rank %d: the checkpoint of generation %u: %s\n",
			job->rank, next, ar_errmsg());
		return -AR_EABORT;
	}
	if (job->rank == 0)
		fprintf(stderr, "arachne-gpt: generation %u (%s): the state moved after step %ld; stopping for the job's scripts to commit it\n",
		       next, op, step);
	return 1;
}

/*
 * @gen: the plan directory's generation of @gp (--plan-dir), 0 without
 * one.  Returns the exit status.
 */
static int train(const struct args *a, struct gpt_job *job,
		 struct gpt_plan *gp, struct gpt_data *data, unsigned gen,
		 const char *resume)
{
	struct gpt_plan *moved = NULL;
	struct gpt_trainer tr;
	double t_start = now_s();
	long first = 1, k = -1, last;
	int next = 0, rc, status = 0;

	rc = gpt_trainer_create(&tr, job, gp, a->seed, &a->opt);
	if (rc == 0)
		rc = gpt_trainer_comms(&tr);
	if (rc < 0)
		goto fail;
	if (resume) {
		rc = gpt_ckpt_load(&tr, resume, &k);
		if (rc < 0)
			fprintf(stderr, "arachne-gpt: rank %d: %s\n", job->rank,
				ar_errmsg());
		else if (k >= 0 && gpt_shard_step(&tr.shard, &job->cfg) != k)
			rc = ar_seterr(-AR_EINVAL, "%s: the state inside is of step %u, its index says %ld",
				       resume,
				       gpt_shard_step(&tr.shard, &job->cfg), k);
		rc = resume_step(job, rc, k, &first);
		if (rc < 0)
			goto fail;
		while (next < a->nthen && a->then[next].step < first - 1)
			next++;
	} else {
		gpt_shard_init(&tr.shard, &job->cfg, a->seed);
	}
	rc = gpt_trainer_sync_replicated(&tr);
	if (rc < 0)
		goto fail;
	/* A checkpoint written before a plan change resumes with the change. */
	if (next < a->nthen && a->then[next].step == first - 1) {
		if (migrate_after(a, job, &tr, &a->then[next], 0) < 0)
			goto abort;
		next++;
	}
	if (job->rank == 0 && first > a->steps)
		fprintf(stderr, "arachne-gpt: the checkpoint is of step %ld: nothing left to train\n",
			first - 1);
	last = first - 1;
	/* A change that came between segments moves before any step. */
	if (a->plan_dir) {
		rc = plandir_change(a, job, &tr, &gen, last, &moved);
		if (rc < 0)
			goto abort;
		if (rc == 1)
			goto done;
		status = rc == 2 ? 3 : 0;
	}
	for (long step = first; step <= a->steps && !status; step++) {
		double t0 = now_s(), loss = 0;

		rc = gpt_trainer_step(&tr, data, step);
		if (rc == 0)
			rc = gpt_trainer_report(&tr, &loss);
		if (rc < 0)
			goto fail;
		if (job->rank == 0) {
			printf("step %ld loss %.9f\n", step, loss);
			fflush(stdout);
			progress(a, job, step, loss, now_s() - t0,
				 now_s() - t_start);
		}
		last = step;
		if (next < a->nthen && a->then[next].step == step) {
			if (migrate_after(a, job, &tr, &a->then[next], 0) < 0)
				goto abort;
			next++;
		}
		if (a->plan_dir) {
			rc = plandir_change(a, job, &tr, &gen, step, &moved);
			if (rc < 0)
				goto abort;
			if (rc == 1)
				goto done;
			status = rc == 2 ? 3 : 0;
		}
	}
	if (a->checkpoint &&
	    (gpt_ckpt_save(&tr, a->checkpoint, last) < 0 ||
	     checkpoint_mark(a, job, gen, last, NULL) < 0)) {
		fprintf(stderr, "arachne-gpt: rank %d: checkpoint: %s\n",
			job->rank, ar_errmsg());
		goto abort;
	}
done:
	gpt_trainer_destroy(&tr);
	gpt_plan_free(moved);
	/* Idle and finished ranks wait here, not spinning in MPI_Finalize. */
	gpt_barrier(job->comm);
	return status;
fail:
	if (rc != -AR_EABORT)
		fprintf(stderr, "arachne-gpt: rank %d: %s\n", job->rank,
			*ar_errmsg() ? ar_errmsg() : ar_strerror(rc));
abort:
	gpt_trainer_destroy(&tr);
	gpt_plan_free(moved);
	/* Peers may wait on this rank forever: end the job. */
	gpt_comm_abort(job->comm);
}

static int run(int argc, char **argv, struct gpt_job *job)
{
	struct costmodel_opts copts = { 0 };
	struct costmodel *cm = NULL;
	struct costmodel_cluster *cl = NULL;
	struct gpt_plan *gp = NULL;
	struct gpt_data data = { 0 };
	const char *resume;
	unsigned gen = 0;
	struct args a;
	int rc;

	rc = parse_args(argc, argv, job->rank, &a);
	if (rc >= 0)
		return rc;
	copts.profiles_dir = a.profiles;
	copts.no_layer_profiles = true;
	rc = costmodel_load(a.model, &copts, &cm);
	if (rc < 0) {
		rc = bad_input(job->rank, "%s", ar_errmsg());
		goto out;
	}
	job->cm = cm;
	rc = gpt_config_init(&job->cfg, costmodel_model(cm));
	if (rc < 0) {
		rc = bad_input(job->rank, "%s", ar_errmsg());
		goto out;
	}
	resume = a.resume;
	if (a.plan_dir) {
		rc = plandir_open(&a, job, &cl, &gen, &gp, &resume);
		if (rc == 1 || rc == -AR_EABORT) {
			rc = rc == 1 ? 0 : 1;
			goto out;
		}
		if (rc < 0) {
			rc = bad_input(job->rank, "%s", ar_errmsg());
			goto out;
		}
	} else if (a.cluster) {
		rc = costmodel_cluster_load(cm, a.cluster, &cl);
		if (rc < 0) {
			rc = bad_input(job->rank, "%s", ar_errmsg());
			goto out;
		}
		job->cl = cl;
		if (a.world) {
			rc = join_world(&a, job, a.world, "arachne-gpt", NULL,
					a.timeout_s);
			if (rc < 0) {
				fprintf(stderr, "arachne-gpt: rank %d: %s\n",
					job->rank, ar_errmsg());
				rc = 1;
				goto out;
			}
		} else {
			rc = check_size(job, a.cluster);
			if (rc == 0)
				rc = map_ranks(job);
		}
		if (rc == 0)
			rc = load_plan(job, a.plan, &gp);
		for (int i = 0; i < a.nthen && rc == 0; i++)
			rc = load_plan(job, a.then[i].path, &a.then[i].gp);
		if (rc < 0) {
			rc = bad_input(job->rank, "%s", ar_errmsg());
			goto out;
		}
	} else {
		if (job->size != 1) {
			rc = bad_input(job->rank, "%d ranks but no --plan: without a plan arachne-gpt runs on one process",
				       job->size);
			goto out;
		}
		job->node_of = calloc(1, sizeof(int));
		job->gpu_of = calloc(1, sizeof(int));
		if (!job->node_of || !job->gpu_of) {
			rc = 1;
			goto out;
		}
		rc = gpt_plan_single(job, a.micro_batch, &gp);
		if (rc < 0) {
			rc = bad_input(job->rank, "%s", ar_errmsg());
			goto out;
		}
	}
	rc = gpt_data_load(&data, a.data, job->cfg.T);
	if (rc < 0) {
		rc = bad_input(job->rank, "%s", ar_errmsg());
		goto out;
	}
	if (a.checkpoint && mkdir(a.checkpoint, 0700) < 0 && errno != EEXIST) {
		rc = bad_input(job->rank, "--checkpoint %s: %s", a.checkpoint,
			       strerror(errno));
		goto out;
	}
	if (openblas_set_num_threads)
		openblas_set_num_threads(1);
	rc = train(&a, job, gp, &data, gen, resume);
out:
	for (int i = 0; i < a.nthen; i++)
		gpt_plan_free(a.then[i].gp);
	gpt_plan_free(gp);
	gpt_data_free(&data);
	costmodel_cluster_free(cl);
	costmodel_destroy(cm);
	return rc;
}

int main(int argc, char **argv)
{
	struct gpt_job job = { 0 };
	const char *trace = getenv("ARACHNE_GPT_TRACE");
	int rc;

	MPI_Init(&argc, &argv);
	if (gpt_comm_mpi(MPI_COMM_WORLD, &job.comm) < 0)
		MPI_Abort(MPI_COMM_WORLD, 1);
	job.rank = gpt_comm_rank(job.comm);
	job.size = gpt_comm_size(job.comm);
	job.trace = trace && *trace && strcmp(trace, "0");
	rc = run(argc, argv, &job);
	free(job.node_of);
	free(job.gpu_of);
	gpt_comm_free(job.comm);
	MPI_Finalize();
	return rc;
}
