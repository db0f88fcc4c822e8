/*
 * arachne-train - train the learned planner's policy for one model on
 * generated compositions and write its weights (safetensors).
 * See arachne-train(1) and docs/policy.md.
 */
#define AR_INTERNAL 1
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ar.h"
#include "arachne_private.h"
#include "costmodel.h"

#define DEFAULT_EPISODES	1000
/*
 * The paper's 94 are too few to imitate from: the policy learns them by
 * heart and plans the grid worse than before.  Imitation generalizes
 * with the number of compositions up to about 4000 (8000 gave no more),
 * with ten updates of 4 compositions per composition (docs/policy.md).
 */
#define DEFAULT_COMPOSITIONS	4000
#define DEFAULT_IMITATION	40000L
#define DEFAULT_GROUP		8
#define DEFAULT_BATCH		4
#define DEFAULT_MAX_GPUS	4096

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: arachne-train --model NAME --out FILE [options]\n"
		"Train the Arachne planning policy for one model.\n"
		"\n"
		"  -m, --model NAME        model profile (profiles/models/NAME.ini)\n"
		"  -o, --out FILE          weights to write (safetensors), also the checkpoint\n"
		"  -c, --clusters DIR      evaluation compositions to keep out of training\n"
		"                          (default: PROFILES/clusters)\n"
		"  -e, --episodes N        policy updates (default %d)\n"
		"  -s, --seed S            seed; the same seed gives the same weights (default 1)\n"
		"  -t, --threads N         rollout threads (default: online CPUs)\n"
		"  -p, --profiles DIR      profile directory (default: $AR_PROFILES or installed)\n"
		"      --compositions N    training compositions to generate (default %d)\n"
		"      --group N           rollouts per composition and update (default %d)\n"
		"      --batch N           compositions per update (default %d)\n"
		"      --max-gpus N        GPUs of the largest generated composition (default %d)\n"
		"      --checkpoint-every N  write the weights every N updates (default 25)\n"
		"      --init FILE         start from these weights\n"
		"      --no-expert         imitate rollouts only, not their climbed plans\n"
		"      --no-teacher        no climbed structured plan per composition to imitate\n"
		"      --imitation-steps N  updates imitating the teacher plans before the\n"
		"                          first rollout (default %ld)\n"
		"      --fit-report        after training, how closely the policy builds the\n"
		"                          best plan of each training composition (stdout)\n"
		"  -q, --quiet             no progress bar\n"
		"  -h, --help              this text\n"
		"  -V, --version           the version\n",
		DEFAULT_EPISODES, DEFAULT_COMPOSITIONS, DEFAULT_GROUP,
		DEFAULT_BATCH, DEFAULT_MAX_GPUS, DEFAULT_IMITATION);
}

/* An integer option of at least @min, or exit 2 naming it. */
static long parse_at_least(const char *opt, const char *arg, long min)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(arg, &end, 10);
	if (errno || *end || end == arg || v < min) {
		fprintf(stderr, "arachne-train: %s: \"%s\" is not an integer of %ld or more\n",
			opt, arg, min);
		exit(2);
	}
	return v;
}

static long parse_count(const char *opt, const char *arg)
{
	return parse_at_least(opt, arg, 1);
}

/* The command line as run, for the weights' metadata. */
static void command_line(int argc, char **argv, char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (int i = 0; i < argc && used + 1 < len; i++) {
		int n = snprintf(buf + used, len - used, "%s%s", i ? " " : "",
				 i == 0 ? "arachne-train" : argv[i]);

		if (n < 0)
			break;
		used += (size_t)n;
	}
}

/* The --fit-report lines: what the policy learned of its imitation targets. */
static void fit_print(const struct policy_train_result *res)
{
	printf("fit on %d training compositions, against the best plan of each:\n",
	       res->fit_compositions);
	if (res->fit_compositions == 0)
		return;
	printf("  decisions matched: depth %.3f, device %.3f, tp %.3f; whole plans %.3f\n",
	       res->fit_decisions[POLICY_HEAD_DEPTH],
	       res->fit_decisions[POLICY_HEAD_DEVICE],
	       res->fit_decisions[POLICY_HEAD_TP], res->fit_whole);
	printf("  greedy construction reaches it on %.3f (geometric mean %.3f)\n",
	       res->fit_greedy, res->fit_greedy_gmean);
	printf("  best of %d constructions reaches it on %.3f (geometric mean %.3f)\n",
	       POLICY_BATCH, res->fit_best, res->fit_best_gmean);
}

int main(int argc, char **argv)
{
	enum { OPT_COMPOSITIONS = 256, OPT_GROUP, OPT_BATCH, OPT_CKPT, OPT_INIT,
	       OPT_NO_EXPERT, OPT_MAX_GPUS,
	       OPT_NO_TEACHER, OPT_IMITATION, OPT_FIT_REPORT };
	static const struct option longopts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "out", required_argument, NULL, 'o' },
		{ "clusters", required_argument, NULL, 'c' },
		{ "episodes", required_argument, NULL, 'e' },
		{ "seed", required_argument, NULL, 's' },
		{ "threads", required_argument, NULL, 't' },
		{ "profiles", required_argument, NULL, 'p' },
		{ "compositions", required_argument, NULL, OPT_COMPOSITIONS },
		{ "group", required_argument, NULL, OPT_GROUP },
		{ "batch", required_argument, NULL, OPT_BATCH },
		{ "max-gpus", required_argument, NULL, OPT_MAX_GPUS },
		{ "checkpoint-every", required_argument, NULL, OPT_CKPT },
		{ "init", required_argument, NULL, OPT_INIT },
		{ "no-expert", no_argument, NULL, OPT_NO_EXPERT },
		{ "no-teacher", no_argument, NULL, OPT_NO_TEACHER },
		{ "imitation-steps", required_argument, NULL, OPT_IMITATION },
		{ "fit-report", no_argument, NULL, OPT_FIT_REPORT },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct policy_train_opts o = {
		.episodes = DEFAULT_EPISODES,
		.seed = 1,
		.compositions = DEFAULT_COMPOSITIONS,
		.group = DEFAULT_GROUP,
		.batch = DEFAULT_BATCH,
		.max_gpus = DEFAULT_MAX_GPUS,
		.imitation_steps = DEFAULT_IMITATION,
		.checkpoint_every = 25,
	};
	struct costmodel_opts copts = { 0 };
	struct policy_train_result res;
	struct costmodel *cm = NULL;
	char command[512], clusters[4096];
	long threads = sysconf(_SC_NPROCESSORS_ONLN);
	int c, rc;

	while ((c = getopt_long(argc, argv, "m:o:c:e:s:t:p:qhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'm':
			o.model = optarg;
			break;
		case 'o':
			o.out = optarg;
			break;
		case 'c':
			o.clusters_dir = optarg;
			break;
		case 'e':
			o.episodes = parse_count("--episodes", optarg);
			break;
		case 's': {
			char *end;

			errno = 0;
			o.seed = strtoul(optarg, &end, 10);
			if (errno || *end || end == optarg) {
				fprintf(stderr, "arachne-train: --seed: \"%s\" is not a number\n",
					optarg);
				return 2;
			}
			break;
		}
		case 't':
			threads = parse_count("--threads", optarg);
			break;
		case 'p':
			copts.profiles_dir = optarg;
			break;
		case OPT_COMPOSITIONS:
			o.compositions = (int)parse_count("--compositions", optarg);
			break;
		case OPT_GROUP:
			o.group = (int)parse_count("--group", optarg);
			break;
		case OPT_BATCH:
			o.batch = (int)parse_count("--batch", optarg);
			break;
		case OPT_MAX_GPUS:
			o.max_gpus = (int)parse_count("--max-gpus", optarg);
			break;
		case OPT_CKPT:
			o.checkpoint_every = parse_count("--checkpoint-every", optarg);
			break;
		case OPT_INIT:
			o.init = optarg;
			break;
		case OPT_NO_EXPERT:
			o.no_expert = true;
			break;
		case OPT_NO_TEACHER:
			o.no_teacher = true;
			break;
		case OPT_IMITATION:
			o.imitation_steps = parse_at_least("--imitation-steps", optarg, 0);
			break;
		case OPT_FIT_REPORT:
			o.fit_report = true;
			break;
		case 'q':
			o.quiet = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("arachne-train %s\n", PACKAGE_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "arachne-train: unexpected argument \"%s\"\n", argv[optind]);
		return 2;
	}
	if (!o.model || !o.out) {
		fprintf(stderr, "arachne-train: --model and --out are required\n");
		usage(stderr);
		return 2;
	}
	if (o.group < 2 || o.batch > 64) {
		fprintf(stderr, "arachne-train: --group needs 2 or more, --batch 64 or fewer\n");
		return 2;
	}
	if (o.max_gpus < 32 || o.max_gpus > 65536) {
		fprintf(stderr, "arachne-train: --max-gpus needs 32 to 65536\n");
		return 2;
	}
	o.threads = threads > 0 ? (int)threads : 1;
	command_line(argc, argv, command, sizeof(command));
	o.command = command;

	rc = costmodel_load(o.model, &copts, &cm);
	if (rc < 0) {
		fprintf(stderr, "arachne-train: %s\n", ar_errmsg());
		return rc == -AR_ENOTFOUND || rc == -AR_EINVAL ? 2 : 1;
	}
	if (!o.clusters_dir) {
		snprintf(clusters, sizeof(clusters), "%s/clusters",
			 costmodel_profiles_dir(cm));
		o.clusters_dir = clusters;
	}
	rc = policy_train(cm, &o, &res);
	costmodel_destroy(cm);
	if (rc < 0) {
		fprintf(stderr, "arachne-train: %s\n",
			*ar_errmsg() ? ar_errmsg() : ar_strerror(rc));
		return rc == -AR_EINVAL ? 2 : 1;
	}
	if (!o.quiet)
		fprintf(stderr,
			"arachne-train: %s: mean normalized throughput %.4f -> %.4f (best %.4f), %d teacher plans, %ld climbed plans imitated, in %.0f s\n",
			o.out, res.first_mean, res.last_mean, res.best, res.teachers,
			res.distilled, res.elapsed_s);
	if (!o.quiet && res.imitation_windows > 0)
		fprintf(stderr,
			"arachne-train: imitation loss per decision %.3g first, %.3g lowest (update %ld), %.3g last; %d rollbacks\n",
			res.imitation_first, res.imitation_lowest,
			res.imitation_lowest_update, res.imitation_last,
			res.imitation_rollbacks);
	if (o.fit_report)
		fit_print(&res);
	return 0;
}
