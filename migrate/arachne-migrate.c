/*
 * arachne-migrate - move a job's model state from its old plan to its new
 * plan, GPU to GPU (arachne-migrate(1)).
 *
 * Two ways to start the ranks:
 *   - with --rendezvous DIR, each process is started on its own (one srun
 *     in each allocation of an elastic job): it reads the migration
 *     itself, finds its rank from its node and GPU, and meets the others
 *     through DIR (rdzv.c); transfers go over TCP, or NCCL;
 *   - without, under mpirun: rank 0 computes the migration (or reads it)
 *     and broadcasts it, transfers go over MPI, or NCCL.
 * Either way every rank executes the very same tuples.  Each rank loads
 * its old shard file, runs the migration, stages its new file, and renames
 * it into place only after every rank agreed that all of them succeeded.
 * On any failure the staged files are removed and the old files were
 * never touched.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef HAVE_MPI
#include <mpi.h>
#endif

#include "ar.h"
#include "costmodel.h"
#include "migrate.h"
#include "statedir.h"

#define EXIT_FAILED	1
#define EXIT_BADINPUT	2

struct args {
	const char *from, *to, *cluster, *model, *profiles;
	const char *migration;		/* a precomputed migration file */
	const char *state_dir;
	const char *output;		/* write the migration and stop */
	const char *transport;
	double timeout_s;
	bool verbose;
	/* --rendezvous: ranks started separately */
	const char *rendezvous;
	const char *node;		/* this process's node, GPU, or rank */
	int gpu;
	int rank;
	double wait_s;			/* for every rank to arrive */
	const char *address;
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: arachne-migrate --from OLD.json --to NEW.json --cluster C.json --model NAME\n"
		"                       [--profiles DIR] --state-dir DIR [--transport mpi|nccl]\n"
		"                       [--timeout-s S] [--verbose]\n"
		"       arachne-migrate --migration FILE --state-dir DIR [options]\n"
		"       arachne-migrate --migration FILE --state-dir DIR --rendezvous DIR\n"
		"                       [--node NAME --gpu N | --rank R] [--wait-s S] [--address IP]\n"
		"       arachne-migrate --from ... --to ... --cluster ... --model ... --output FILE\n"
		"       arachne-migrate --help | --version\n"
		"Without --rendezvous it runs under mpirun with one rank per GPU of the\n"
		"migration; with it, each process is started on its own (one srun per\n"
		"allocation) and the processes meet through the directory.\n");
}

static int parse_args(int argc, char **argv, struct args *a)
{
	static const struct option opts[] = {
		{ "from", required_argument, NULL, 'f' },
		{ "to", required_argument, NULL, 't' },
		{ "cluster", required_argument, NULL, 'c' },
		{ "model", required_argument, NULL, 'm' },
		{ "profiles", required_argument, NULL, 'p' },
		{ "migration", required_argument, NULL, 'M' },
		{ "state-dir", required_argument, NULL, 'd' },
		{ "output", required_argument, NULL, 'o' },
		{ "transport", required_argument, NULL, 'T' },
		{ "timeout-s", required_argument, NULL, 's' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "rendezvous", required_argument, NULL, 'R' },
		{ "node", required_argument, NULL, 'N' },
		{ "gpu", required_argument, NULL, 'G' },
		{ "rank", required_argument, NULL, 'r' },
		{ "wait-s", required_argument, NULL, 'W' },
		{ "address", required_argument, NULL, 'A' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	char *end;
	int c;

	*a = (struct args){ .transport = NULL, .timeout_s = 60.0,
			    .gpu = -1, .rank = -1, .wait_s = 600.0 };
	while ((c = getopt_long(argc, argv, "vV", opts, NULL)) != -1) {
		switch (c) {
		case 'f': a->from = optarg; break;
		case 't': a->to = optarg; break;
		case 'c': a->cluster = optarg; break;
		case 'm': a->model = optarg; break;
		case 'p': a->profiles = optarg; break;
		case 'M': a->migration = optarg; break;
		case 'd': a->state_dir = optarg; break;
		case 'o': a->output = optarg; break;
		case 'T': a->transport = optarg; break;
		case 'v': a->verbose = true; break;
		case 'R': a->rendezvous = optarg; break;
		case 'N': a->node = optarg; break;
		case 'A': a->address = optarg; break;
		case 's':
		case 'W': {
			double v = strtod(optarg, &end);

			if (*end || !(v > 0.0) || v > 1e7) {
				fprintf(stderr, "arachne-migrate: --%s %s: expected a positive number of seconds\n",
					c == 's' ? "timeout-s" : "wait-s", optarg);
				return -1;
			}
			*(c == 's' ? &a->timeout_s : &a->wait_s) = v;
			break;
		}
		case 'G':
		case 'r': {
			long v = strtol(optarg, &end, 10);

			if (*end || end == optarg || v < 0 || v > 1 << 20) {
				fprintf(stderr, "arachne-migrate: --%s %s: expected a non-negative integer\n",
					c == 'G' ? "gpu" : "rank", optarg);
				return -1;
			}
			*(c == 'G' ? &a->gpu : &a->rank) = (int)v;
			break;
		}
		case 'h':
			usage(stdout);
			exit(0);
		case 'V':
			printf("arachne-migrate %s\n", PACKAGE_VERSION);
			exit(0);
		default:
			usage(stderr);
			return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "arachne-migrate: unexpected argument %s\n",
			argv[optind]);
		return -1;
	}
	if (!a->migration && !(a->from && a->to && a->cluster && a->model)) {
		fprintf(stderr, "arachne-migrate: give --migration FILE, or --from, --to, --cluster and --model\n");
		return -1;
	}
	if (a->migration && (a->from || a->to)) {
		fprintf(stderr, "arachne-migrate: --migration excludes --from and --to\n");
		return -1;
	}
	if (!a->output && !a->state_dir) {
		fprintf(stderr, "arachne-migrate: --state-dir is required\n");
		return -1;
	}
	if (!a->transport)
		a->transport = a->rendezvous ? "tcp" : "mpi";
	if (strcmp(a->transport, a->rendezvous ? "tcp" : "mpi") &&
	    strcmp(a->transport, "nccl")) {
		fprintf(stderr, "arachne-migrate: --transport %s: expected %s or nccl\n",
			a->transport, a->rendezvous ? "tcp (with --rendezvous)" :
						      "mpi");
		return -1;
	}
	if (!a->rendezvous && (a->node || a->gpu >= 0 || a->rank >= 0)) {
		fprintf(stderr, "arachne-migrate: --node, --gpu and --rank name a process of a --rendezvous\n");
		return -1;
	}
	if (a->rank >= 0 && (a->node || a->gpu >= 0)) {
		fprintf(stderr, "arachne-migrate: --rank excludes --node and --gpu\n");
		return -1;
	}
	return 0;
}

static int load_plan(const struct costmodel *cm,
		     const struct costmodel_cluster *cl, const char *path,
		     struct costmodel_plan **planp)
{
	json_t *root = ar_json_load_file(path);
	int rc;

	*planp = NULL;
	if (!root)
		return -AR_EINVAL;
	rc = costmodel_plan_from_json(cm, cl, root, planp);
	json_decref(root);
	if (rc < 0) {
		char msg[768];

		snprintf(msg, sizeof(msg), "%s", ar_errmsg());
		return ar_seterr(rc, "%s: %s", path, msg);
	}
	return 0;
}

/*
 * The migration from the two plans, through the cost model, loaded with
 * the new plan's global batch and sequence length (a plan is priced, and
 * checked, at the ones it was made for).
 */
static int compute_migration(const struct args *a, struct migrate **mp)
{
	struct costmodel_opts copts = { .profiles_dir = a->profiles };
	struct costmodel *cm = NULL;
	struct costmodel_cluster *cl = NULL;
	struct costmodel_plan *old_plan = NULL, *new_plan = NULL;
	json_t *to = ar_json_load_file(a->to);
	int rc;

	if (!to)
		return -AR_EINVAL;
	copts.global_batch = (int)json_integer_value(json_object_get(to,
							"global_batch"));
	copts.seq_len = (int)json_integer_value(json_object_get(to, "seq_len"));
	json_decref(to);
	rc = costmodel_load(a->model, &copts, &cm);
	if (!rc)
		rc = costmodel_cluster_load(cm, a->cluster, &cl);
	if (!rc)
		rc = load_plan(cm, cl, a->from, &old_plan);
	if (!rc)
		rc = load_plan(cm, cl, a->to, &new_plan);
	if (!rc)
		rc = migrate_diff_costmodel(cm, cl, old_plan, new_plan, NULL,
					    mp);
	costmodel_plan_free(old_plan);
	costmodel_plan_free(new_plan);
	costmodel_cluster_free(cl);
	costmodel_destroy(cm);
	return rc;
}

static int build_migration(const struct args *a, struct migrate **mp)
{
	json_t *root;
	int rc;

	if (!a->migration)
		return compute_migration(a, mp);
	root = ar_json_load_file_max(a->migration, AR_LIMIT_MIGRATION_BYTES);
	if (!root)
		return -AR_EINVAL;
	rc = migrate_from_json(root, mp);
	json_decref(root);
	if (rc < 0) {
		char msg[768];

		snprintf(msg, sizeof(msg), "%s", ar_errmsg());
		return ar_seterr(rc, "%s: %s", a->migration, msg);
	}
	return 0;
}

/* @bytes in the largest decimal unit that keeps the number >= 1. */
static const char *fmt_bytes(char *buf, size_t size, uint64_t bytes)
{
	static const char *const units[] = { "B", "kB", "MB", "GB", "TB" };
	double v = (double)bytes;
	int u = 0;

	while (v >= 1000.0 && u < 4) {
		v /= 1000.0;
		u++;
	}
	snprintf(buf, size, u ? "%.3g %s" : "%.0f %s", v, units[u]);
	return buf;
}

static void print_prediction(FILE *f, const struct migrate *m)
{
	const struct migrate_stats *st = &m->stats;
	char moved[32], min[32], kept[32];

	fprintf(f, "arachne-migrate: %d ranks, %ld transfers, %d rounds; %s moved (minimum %s), %s kept in place\n",
		m->nranks, st->ntuples, st->nrounds,
		fmt_bytes(moved, sizeof(moved), st->bytes_moved),
		fmt_bytes(min, sizeof(min), st->bytes_min),
		fmt_bytes(kept, sizeof(kept), st->bytes_local));
	fprintf(f, "arachne-migrate: predicted %.3f s (stage 1 %.3f s, stage 2 %.3f s), lower bound %.3f s\n",
		st->time_s, st->stage1_s, st->stage2_s, st->lower_bound_s);
}

#ifdef HAVE_MPI
/*
 * Rank 0 builds the migration and broadcasts its JSON text; a failure is
 * broadcast as the message, so every rank exits with the same reason.
 */
static int share_migration(const struct args *a, int rank, struct migrate **mp)
{
	char *text = NULL;
	long len = 0;
	int rc = 0;
	json_t *root;

	if (rank == 0) {
		struct migrate *m = NULL;
		json_t *j = NULL;

		rc = build_migration(a, &m);
		if (!rc && !(j = migrate_to_json(m)))
			rc = -ENOMEM;
		if (!rc)
			text = json_dumps(j, JSON_COMPACT);
		json_decref(j);
		migrate_free(m);
		if (rc < 0 || !text) {
			const char *msg = rc < 0 ? ar_errmsg() : "out of memory";

			text = strdup(*msg ? msg : ar_strerror(rc));
			len = -(long)strlen(text) - 1;
		} else {
			len = (long)strlen(text) + 1;
		}
	}
	MPI_Bcast(&len, 1, MPI_LONG, 0, MPI_COMM_WORLD);
	if (rank != 0)
		text = malloc(len < 0 ? -len : len);
	if (!text)
		return -ENOMEM;
	MPI_Bcast(text, (int)(len < 0 ? -len : len), MPI_CHAR, 0,
		  MPI_COMM_WORLD);
	if (len < 0) {
		rc = ar_seterr(-AR_EINVAL, "%s", text);
		free(text);
		return rc;
	}
	root = json_loads(text, 0, NULL);
	free(text);
	if (!root)
		return ar_seterr(-AR_EPROTO, "the broadcast migration does not parse");
	rc = migrate_from_json(root, mp);
	json_decref(root);
	return rc;
}

#endif /* HAVE_MPI */

/*
 * When a peer dies, the launcher terminates every rank.  The staged file
 * is removed and the reason printed; both are async-signal-safe calls.
 */
static char sig_staged[4096];
static char sig_msg[512];
static volatile sig_atomic_t sig_committing;

static void on_terminate(int sig)
{
	ssize_t unused;

	if (!sig_committing && sig_staged[0])
		unlink(sig_staged);
	unused = write(STDERR_FILENO, sig_msg, strlen(sig_msg));
	(void)unused;
	_exit(EXIT_FAILED);
}

static void install_terminate_handler(const char *dir,
				      const struct migrate *m, int rank)
{
	const struct migrate_rank *rk = &m->ranks[rank];
	struct sigaction sa;

	statedir_path(sig_staged, sizeof(sig_staged), dir,
		      m->topo->nodes[rk->node].name, rk->gpu, true);
	snprintf(sig_msg, sizeof(sig_msg),
		 "arachne-migrate: rank %d (%s GPU %d): terminated by the launcher, a peer failed; migration aborted, old shard files unchanged\n",
		 rank, m->topo->nodes[rk->node].name, rk->gpu);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_terminate;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
}

/*
 * ARACHNE_MIGRATE_FAULT=kill:R or stall:R makes rank R die or stop before
 * the migration's second step (the system tests' failure injection).
 */
struct fault {
	int rank;
	bool kill;
};

static void fault_progress(void *arg, int step, int nsteps)
{
	const struct fault *f = arg;
	int at = nsteps > 1 ? 1 : 0;

	if (step != at)
		return;
	if (f->kill)
		raise(SIGKILL);
	for (;;)
		pause();
}

static bool fault_parse(int rank, struct fault *f)
{
	const char *spec = getenv("ARACHNE_MIGRATE_FAULT");
	int r;

	if (!spec)
		return false;
	if (sscanf(spec, "kill:%d", &r) == 1)
		f->kill = true;
	else if (sscanf(spec, "stall:%d", &r) == 1)
		f->kill = false;
	else
		return false;
	f->rank = r;
	return r == rank;
}

#ifdef HAVE_MPI
/*
 * Which migration rank this process is.  When the cluster's node names are
 * the hosts the ranks run on (a real allocation), each host's ranks take
 * that node's GPUs in the order of their world ranks, however the launcher
 * numbered them; otherwise (anonymous node names, or one host running
 * everything) world rank i is migration rank i.  Every rank sees the same
 * names, so every rank makes the same choice.
 */
static int place_ranks(const struct migrate *m, MPI_Comm *commp, int *rankp)
{
	enum { NAME = 64 };
	char host[MPI_MAX_PROCESSOR_NAME] = "", *all;
	int *mapped, wrank, wsize, len = 0, key;
	bool match = true;

	MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
	MPI_Comm_size(MPI_COMM_WORLD, &wsize);
	MPI_Get_processor_name(host, &len);
	host[strcspn(host, ".")] = '\0';
	host[NAME - 1] = '\0';
	all = calloc(wsize, NAME);
	mapped = calloc(wsize, sizeof(int));
	if (!all || !mapped) {
		free(all);
		free(mapped);
		return -ENOMEM;
	}
	MPI_Allgather(host, NAME, MPI_CHAR, all, NAME, MPI_CHAR,
		      MPI_COMM_WORLD);
	for (int i = 0; i < wsize && match; i++) {
		const char *h = all + (size_t)i * NAME;
		int node = -1, k = 0, r;

		for (int n = 0; n < m->topo->nnodes && node < 0; n++)
			if (!strcmp(m->topo->nodes[n].name, h))
				node = n;
		for (int j = 0; j < i; j++)
			k += !strcmp(all + (size_t)j * NAME, h);
		for (r = 0; node >= 0 && r < m->nranks; r++)
			if (m->ranks[r].node == node && k-- == 0)
				break;
		match = node >= 0 && r < m->nranks;
		mapped[i] = r;
	}
	key = match ? mapped[wrank] : wrank;
	free(all);
	free(mapped);
	MPI_Comm_split(MPI_COMM_WORLD, 0, key, commp);
	MPI_Comm_rank(*commp, rankp);
	return 0;
}

#endif /* HAVE_MPI */

static void abort_job(bool mpi)
{
#ifdef HAVE_MPI
	if (mpi)
		MPI_Abort(MPI_COMM_WORLD, EXIT_FAILED);
#endif
}

/*
 * One rank's migration over @tp: load, transfer, stage, commit.  After a
 * failure in the transfers an MPI rank ends the job with MPI_Abort (MPI
 * cannot cancel sends to a silent peer); a rendezvous rank just exits,
 * its peers having seen its connections close.
 */
static int run_rank(const struct args *a, const struct migrate *m,
		    struct migrate_transport *tp, int rank, bool mpi)
{
	const struct migrate_rank *rk = &m->ranks[rank];
	const char *node = m->topo->nodes[rk->node].name;
	struct migrate_run_opts ropts = { .timeout_s = a->timeout_s };
	struct fault fault;
	void *old_host = NULL, *new_host = NULL, *old_dev = NULL,
	     *new_dev = NULL;
	size_t old_bytes = migrate_rank_old_bytes(m, rank);
	size_t new_bytes = migrate_rank_new_bytes(m, rank);
	double t0;
	int rc, agreed;
	bool nccl = !strcmp(a->transport, "nccl");

	/* Phase 1: every rank has its old state, or nobody starts. */
	rc = statedir_load(a->state_dir, m, rank, &old_host);
	new_host = malloc(new_bytes ? new_bytes : 1);
	if (!rc && !new_host)
		rc = -ENOMEM;
	if (!rc && nccl) {
		old_dev = migrate_transport_alloc(tp, old_bytes);
		new_dev = migrate_transport_alloc(tp, new_bytes);
		rc = old_dev && new_dev ? 0 : -ENOMEM;
		if (!rc)
			rc = migrate_transport_from_host(tp, old_dev, old_host,
							 old_bytes);
	}
	if (rc < 0)
		fprintf(stderr, "arachne-migrate: rank %d (%s GPU %d): %s\n",
			rank, node, rk->gpu, ar_errmsg());
	agreed = migrate_agree(tp, rc == 0, a->timeout_s);
	if (agreed < 0) {
		if (rc == 0)
			fprintf(stderr, "arachne-migrate: rank %d: %s; nothing was moved\n",
				rank, ar_errmsg());
		rc = agreed;
		goto out;
	}

	/* Phase 2: the transfers. */
	if (fault_parse(rank, &fault)) {
		ropts.progress = fault_progress;
		ropts.progress_arg = &fault;
	}
	t0 = ar_now();
	rc = migrate_run(m, tp, nccl ? old_dev : old_host,
			 nccl ? new_dev : new_host, &ropts);
	if (!rc && nccl)
		rc = migrate_transport_to_host(tp, new_host, new_dev,
					       new_bytes);
	if (!rc)
		rc = statedir_stage(a->state_dir, m, rank, new_host);
	if (rc < 0) {
		fprintf(stderr, "arachne-migrate: rank %d (%s GPU %d): migration failed: %s; old shard files unchanged\n",
			rank, node, rk->gpu, ar_errmsg());
		statedir_unstage(a->state_dir, m, rank);
		/*
		 * Peers may still hold requests towards a dead or stopped
		 * rank that MPI cannot cancel: give the live ones a moment
		 * to report, then end the job.  MPI_Abort is the last
		 * resort, after cleanup.
		 */
		migrate_agree(tp, false,
			      a->timeout_s < 5.0 ? a->timeout_s : 5.0);
		abort_job(mpi);
		goto out;
	}

	/* Phase 3: every rank staged its file; now they replace the old. */
	agreed = migrate_agree(tp, true, a->timeout_s);
	if (agreed < 0) {
		fprintf(stderr, "arachne-migrate: rank %d (%s GPU %d): %s; old shard files unchanged\n",
			rank, node, rk->gpu, ar_errmsg());
		statedir_unstage(a->state_dir, m, rank);
		abort_job(mpi);
		goto out;
	}
	sig_committing = 1;
	rc = statedir_commit(a->state_dir, m, rank);
	if (rc < 0)
		fprintf(stderr, "arachne-migrate: rank %d (%s GPU %d): commit failed: %s\n",
			rank, node, rk->gpu, ar_errmsg());
	agreed = migrate_agree(tp, rc == 0, a->timeout_s);
	if (rank == 0 && agreed == 0) {
		char moved[32];

		printf("arachne-migrate: migrated %s in %.3f s over %s (predicted %.3f s, lower bound %.3f s)\n",
		       fmt_bytes(moved, sizeof(moved), m->stats.bytes_moved),
		       ar_now() - t0,
		       migrate_transport_name(tp), m->stats.time_s,
		       m->stats.lower_bound_s);
		fflush(stdout);
	}
	if (!rc)
		rc = agreed;
out:
	migrate_transport_release(tp, old_dev);
	migrate_transport_release(tp, new_dev);
	free(old_host);
	free(new_host);
	return rc < 0 ? EXIT_FAILED : 0;
}

/* --output: compute the migration and write it; no transfers, no MPI. */
static int write_output(const struct args *a)
{
	struct migrate *m = NULL;
	json_t *j;
	char *text;
	int rc;

	rc = build_migration(a, &m);
	if (rc < 0) {
		fprintf(stderr, "arachne-migrate: %s\n", ar_errmsg());
		return EXIT_BADINPUT;
	}
	j = migrate_to_json(m);
	text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	rc = text ? ar_file_write_output(a->output, text, strlen(text), 0644) :
		    ar_seterr(-ENOMEM, "%s: out of memory", a->output);
	if (rc < 0)
		fprintf(stderr, "arachne-migrate: %s\n", ar_errmsg());
	else
		print_prediction(stdout, m);
	free(text);
	migrate_free(m);
	/* As arachne-plan: an output that cannot be written is bad input. */
	return rc < 0 ? EXIT_BADINPUT : 0;
}

/*
 * The name of a migration's meeting: the same on every process that read
 * the same migration, different for another one, so a retry after a
 * failure meets under the same name and an unrelated meeting never does.
 */
static void meeting_name(const struct migrate *m, char *buf, size_t len)
{
	json_t *j = migrate_to_json(m);
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	uint64_t h = 0xcbf29ce484222325ull;	/* FNV-1a */

	for (const char *p = text; p && *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
	snprintf(buf, len, "migration-%016" PRIx64, h);
	free(text);
	json_decref(j);
}

/*
 * This process's migration rank: --rank, or its (node, GPU): --node or
 * SLURMD_NODENAME or the host name, and --gpu or ARACHNE_LOCAL_GPU (the
 * plugin's index among the job's GPUs on the node) or SLURM_LOCALID.
 * -1 with the reason in @why when the migration has no such GPU.
 */
static int find_rank(const struct args *a, const struct migrate *m,
		     char *why, size_t len)
{
	const char *node = a->node, *env;
	char host[256];
	int gpu = a->gpu, idx = -1, rank;

	if (a->rank >= 0) {
		if (a->rank < m->nranks)
			return a->rank;
		snprintf(why, len, "--rank %d: the migration has %d ranks",
			 a->rank, m->nranks);
		return -1;
	}
	if (!node)
		node = getenv("SLURMD_NODENAME");
	if (!node) {
		if (gethostname(host, sizeof(host)) < 0)
			host[0] = '\0';
		host[sizeof(host) - 1] = '\0';
		host[strcspn(host, ".")] = '\0';
		node = host;
	}
	if (gpu < 0) {
		env = getenv("ARACHNE_LOCAL_GPU");
		if (!env)
			env = getenv("SLURM_LOCALID");
		gpu = env ? atoi(env) : 0;
	}
	for (int n = 0; n < m->topo->nnodes && idx < 0; n++)
		if (!strcmp(m->topo->nodes[n].name, node))
			idx = n;
	rank = idx < 0 ? -1 : migrate_rank_find(m, idx, gpu);
	if (rank < 0)
		snprintf(why, len, "%s GPU %d %s", node, gpu,
			 idx < 0 ? "is not on a node of the migration" :
				   "holds state in neither plan");
	return rank;
}

/*
 * The file whose appearance calls off the meeting for the migration file
 * @migration (DIR/migration.G.json: DIR/migration.G.abandoned, which
 * arachnectl abort writes); "" when there is no such file name.
 */
static void called_off_path(const char *migration, char *buf, size_t len)
{
	size_t n = migration ? strlen(migration) : 0;

	buf[0] = '\0';
	if (n > 5 && !strcmp(migration + n - 5, ".json") && n - 5 + 11 < len)
		snprintf(buf, len, "%.*s.abandoned", (int)(n - 5), migration);
}

/* --rendezvous: one process of a migration whose ranks started apart. */
static int run_rendezvous(const struct args *a)
{
	struct migrate_transport *tp = NULL;
	struct migrate_rdzv *r = NULL;
	struct migrate *m = NULL;
	char why[512], name[64], called_off[4096];
	double t0 = ar_now();
	int rank, rc;

	rc = build_migration(a, &m);
	if (rc < 0) {
		fprintf(stderr, "arachne-migrate: %s\n", ar_errmsg());
		return EXIT_BADINPUT;
	}
	rank = find_rank(a, m, why, sizeof(why));
	if (rank < 0 && a->rank >= 0) {
		fprintf(stderr, "arachne-migrate: %s\n", why);
		migrate_free(m);
		return EXIT_BADINPUT;
	}
	if (rank < 0) {
		/* srun starts a task per GPU; some may have nothing to do. */
		printf("arachne-migrate: %s: nothing to move here\n", why);
		migrate_free(m);
		return 0;
	}
	if (rank == 0 && a->verbose)
		print_prediction(stderr, m);
	if (m->stats.bytes_local + m->stats.bytes_moved == 0) {
		if (rank == 0)
			printf("arachne-migrate: nothing to migrate: the old plan holds no state\n");
		migrate_free(m);
		return 0;
	}
	meeting_name(m, name, sizeof(name));
	called_off_path(a->migration, called_off, sizeof(called_off));
	rc = migrate_rdzv_join(&(struct migrate_rdzv_opts){
				.dir = a->rendezvous, .name = name,
				.rank = rank, .size = m->nranks,
				.join_timeout_s = a->wait_s,
				.timeout_s = a->timeout_s,
				.addr = a->address,
				.called_off = called_off[0] ? called_off :
							      NULL }, &r);
	if (rc == 0 && rank == 0)
		printf("arachne-migrate: %d ranks met in %.3f s\n", m->nranks,
		       ar_now() - t0);
	fflush(stdout);
	if (rc == 0)
		rc = !strcmp(a->transport, "nccl") ?
		     migrate_transport_nccl_rdzv_create(r, m->ranks[rank].gpu,
							&tp) :
		     migrate_transport_tcp_create(r, &tp);
	if (rc < 0) {
		fprintf(stderr, "arachne-migrate: rank %d (%s GPU %d): %s; nothing was moved\n",
			rank, m->topo->nodes[m->ranks[rank].node].name,
			m->ranks[rank].gpu, ar_errmsg());
		migrate_rdzv_close(r);
		migrate_free(m);
		return EXIT_FAILED;
	}
	install_terminate_handler(a->state_dir, m, rank);
	rc = run_rank(a, m, tp, rank, false);
	migrate_transport_destroy(tp);
	migrate_rdzv_close(r);
	migrate_free(m);
	return rc;
}

#ifdef HAVE_MPI
/* Without --rendezvous: every rank under one mpirun. */
static int run_mpi(const struct args *a, int argc, char **argv)
{
	struct migrate_transport *tp = NULL;
	struct migrate *m = NULL;
	MPI_Comm comm;
	int rank = 0, size = 0, rc;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);

	rc = share_migration(a, rank, &m);
	if (rc < 0) {
		fprintf(stderr, "arachne-migrate: rank %d: %s\n", rank,
			ar_errmsg());
		MPI_Finalize();
		return EXIT_BADINPUT;
	}
	if (size != m->nranks) {
		if (rank == 0)
			fprintf(stderr, "arachne-migrate: the migration has %d GPUs but %d ranks were started; start one rank per GPU, in (node, gpu) order, or start each allocation's ranks apart with --rendezvous\n",
				m->nranks, size);
		migrate_free(m);
		MPI_Finalize();
		return EXIT_BADINPUT;
	}
	if (rank == 0 && a->verbose)
		print_prediction(stderr, m);
	if (m->stats.bytes_local + m->stats.bytes_moved == 0) {
		if (rank == 0)
			printf("arachne-migrate: nothing to migrate: the old plan holds no state\n");
		migrate_free(m);
		MPI_Finalize();
		return 0;
	}

	rc = place_ranks(m, &comm, &rank);
	if (rc < 0) {
		fprintf(stderr, "arachne-migrate: %s\n", ar_strerror(rc));
		MPI_Abort(MPI_COMM_WORLD, EXIT_FAILED);
	}
	rc = !strcmp(a->transport, "nccl") ?
	     migrate_transport_nccl_create(&comm, m->ranks[rank].gpu, &tp) :
	     migrate_transport_mpi_create(&comm, &tp);
	if (rc < 0) {
		fprintf(stderr, "arachne-migrate: rank %d (%s GPU %d): %s transport: %s\n",
			rank, m->topo->nodes[m->ranks[rank].node].name,
			m->ranks[rank].gpu, a->transport, ar_errmsg());
		rc = EXIT_FAILED;
	} else {
		install_terminate_handler(a->state_dir, m, rank);
		rc = run_rank(a, m, tp, rank, true);
		migrate_transport_destroy(tp);
	}
	MPI_Comm_free(&comm);
	migrate_free(m);
	MPI_Finalize();
	return rc;
}
#endif /* HAVE_MPI */

int main(int argc, char **argv)
{
	struct args a;

	if (parse_args(argc, argv, &a) < 0)
		return EXIT_BADINPUT;
	if (a.output)
		return write_output(&a);
	if (a.rendezvous)
		return run_rendezvous(&a);
#ifdef HAVE_MPI
	return run_mpi(&a, argc, argv);
#else
	fprintf(stderr, "arachne-migrate: built without MPI: start the ranks with --rendezvous DIR\n");
	return EXIT_BADINPUT;
#endif
}
