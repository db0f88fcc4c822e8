/*
 * arachne-plan - plan a cluster, or price a given plan, with the cost
 * model every planner shares.  Exit status: 0 a plan, 1 no feasible plan
 * (with the reason), 2 bad input.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ar.h"
#include "policy.h"

#define EXIT_INFEASIBLE 1
#define EXIT_BADINPUT 2

static const char *prog = "arachne-plan";

static void usage(FILE *f)
{
	const char *const *names = policy_planner_names();

	fprintf(f,
"Usage: %s --model NAME --cluster FILE [options]\n"
"       %s --evaluate PLAN.json --model NAME --cluster FILE [options]\n"
"\n"
"Plan distributed training of model NAME on the GPUs of cluster FILE, or\n"
"price the plan in PLAN.json, with Arachne's cost model.\n"
"\n"
"  -m, --model NAME        model profile (profiles/models/NAME.ini)\n"
"  -c, --cluster FILE      cluster composition (JSON)\n"
"  -p, --planner NAME      planner:", prog, prog);
	for (; *names; names++)
		fprintf(f, " %s", *names);
	fprintf(f, "\n"
"                          (default: arachne, the learned planner)\n"
"  -e, --evaluate FILE     price this plan instead of planning\n"
"      --framework NAME    megatron: only plans stock Megatron-LM runs (one\n"
"                          template of one TP degree, its layer splits), and\n"
"                          the throughput that costs against the planner's\n"
"                          unrestricted plan; with --evaluate, whether it\n"
"                          runs the plan (exit 1 naming what it cannot)\n"
"  -b, --global-batch N    samples per iteration (default: the model's)\n"
"  -s, --seq-len N         sequence length (default: the model's; with\n"
"                          --evaluate, the plan's)\n"
"      --no-overlap        price the gradient reduction and the parameter\n"
"                          gather after the compute, not under it\n"
"  -B, --budget-s S        planning time budget in seconds (default 60;\n"
"                          the paper and bench/plan-grid give 600)\n"
"  -P, --policy FILE       policy weights for the arachne planner\n"
"  -d, --profiles DIR      profiles directory (default: $AR_PROFILES or\n"
"                          the installed profiles)\n"
"  -f, --format FMT        text (default) or json\n"
"  -o, --output FILE       write the plan JSON to FILE (atomically)\n"
"  -j, --threads N         planning threads (default: all CPUs)\n"
"      --seed N            random seed (default 1)\n"
"      --starts WHICH      arachne: all (default) or rollouts, to climb from\n"
"                          the policy's own plans alone\n"
"      --no-climb          arachne: the best of the policy's rollouts as built\n"
"      --seed-planners     arachne: fast search planners' plans seed the climb\n"
"                          and stand when faster (off by default)\n"
"      --evaluations N     random: templates to price (default: as many\n"
"                          constructions as arachne's rollouts)\n"
"      --steering HOW      baselines: published (default: each chooses with\n"
"                          its own published estimator; only its choice is\n"
"                          priced) or shared (the cost model inside each)\n"
"      --objective WHAT    throughput (default) or cost: dollars per sample\n"
"                          at the GPU profiles' prices\n"
"      --min-samples-per-s R  with --objective cost: the least throughput a\n"
"                          plan must reach (default 0)\n"
"  -q, --quiet             no progress on stderr\n"
"  -h, --help              this help\n"
"  -V, --version           the version\n");
}

static int parse_int(const char *opt, const char *s, long min, long max,
		     long *out)
{
	char *end;

	errno = 0;
	*out = strtol(s, &end, 10);
	if (end == s || *end || errno || *out < min || *out > max) {
		fprintf(stderr, "%s: %s: \"%s\" is not an integer in [%ld, %ld]\n",
			prog, opt, s, min, max);
		return -1;
	}
	return 0;
}

static void print_text(const struct costmodel *cm,
		       const struct costmodel_cluster *cl,
		       const struct costmodel_plan *plan, bool evaluated)
{
	int used = costmodel_plan_total_gpus(plan);
	int total = costmodel_cluster_total_gpus(cl);

	printf("%s on %s: %d of %d GPUs in %d template%s, micro-batch %d, global batch %d\n",
	       costmodel_model(cm)->name, cl->name, used, total,
	       plan->ntemplates, plan->ntemplates == 1 ? "" : "s",
	       plan->micro_batch, plan->global_batch);
	if (!evaluated) {
		printf("planner %s%s%s%s: %.3f s, %ld states explored, %ld plans priced, search %s\n",
		       plan->planner, plan->steering[0] ? " (" : "",
		       plan->steering, plan->steering[0] ? " steering)" : "",
		       plan->planning_s, plan->states_explored, plan->plans_priced,
		       plan->search_complete ? "complete" : "stopped by the budget");
		if (plan->planner_estimate_samples_per_s > 0)
			printf("its own estimate of this plan: %.1f samples/s\n",
			       plan->planner_estimate_samples_per_s);
	}
	for (int j = 0; j < plan->ntemplates; j++) {
		const struct costmodel_template *t = &plan->templates[j];

		printf("\ntemplate %d: %d replica%s x %d stage%s, %d micro-batches per replica\n",
		       j + 1, t->replicas, t->replicas == 1 ? "" : "s",
		       t->nstages, t->nstages == 1 ? "" : "s", t->micro_batches);
		printf("  %-5s %-13s %3s %-9s %-15s %-10s %9s %9s\n", "stage",
		       "gpu", "tp", "layers", "memory GiB", "ep/etp/edp",
		       "ms/mb", "sync ms");
		for (int s = 0; s < t->nstages; s++) {
			const struct costmodel_stage *st = &t->stages[s];
			const struct costmodel_gpu *g = costmodel_gpu(cm, st->gpu);
			char layers[32], mem[32], tiling[32];

			snprintf(layers, sizeof(layers), "%d-%d", st->first_layer,
				 st->last_layer);
			snprintf(mem, sizeof(mem), "%.1f / %.0f", st->peak_mem_gib,
				 g->memory_gib);
			snprintf(tiling, sizeof(tiling), "%d/%d/%d", st->ep,
				 st->etp, st->edp);
			printf("  %-5d %-13s %3d %-9s %-15s %-10s %9.2f %9.2f%s",
			       s, g->name, st->tp, layers, mem, tiling,
			       st->time_s * 1e3, st->sync_s * 1e3,
			       costmodel_stage_dp(st) > 1 ? "" : "\n");
			if (costmodel_stage_dp(st) > 1)
				printf("  (dp %d: %d groups of tp %d)\n", st->dp,
				       st->dp, st->tp);
		}
	}
	if (used < total)
		printf("\nunused: %d GPU%s\n", total - used,
		       total - used == 1 ? "" : "s");
	printf("\nrecompute %s, distributed optimizer %s, overlap %s\n",
	       costmodel_recompute_name(plan->recompute),
	       plan->distributed_optimizer ? "on" : "off",
	       plan->overlap_grad_reduce ? "on" : "off");
	printf("predicted: %.3f s per iteration (pipeline %.3f s + gradient sync %.3f s + optimizer step %.3f s), %.4f iterations/s, %.1f samples/s\n",
	       plan->predicted.iter_s, plan->predicted.pipeline_s,
	       plan->predicted.sync_s, plan->predicted.step_s,
	       plan->predicted.iters_per_s, plan->predicted.samples_per_s);
	printf("cost: %.2f USD per hour, %.4f USD per 1000 samples\n",
	       plan->predicted.usd_per_hour,
	       plan->predicted.usd_per_sample * 1000);
}

static const char *framework_title(enum policy_framework fw)
{
	return fw == POLICY_FRAMEWORK_MEGATRON ? "Megatron-LM" :
	       policy_framework_name(fw);
}

/*
 * With --framework: that the framework runs the plan, and when planning,
 * what the restriction costs against the unrestricted plan.
 */
static void print_framework(FILE *f, const struct policy_request *req,
			    const struct costmodel_plan *plan,
			    const struct costmodel_plan *unrestricted,
			    bool evaluated)
{
	double a = plan->predicted.samples_per_s, u;

	if (req->framework == POLICY_FRAMEWORK_ANY)
		return;
	if (evaluated || !unrestricted) {
		fprintf(f, "framework %s: stock %s runs this plan\n",
			policy_framework_name(req->framework),
			framework_title(req->framework));
		return;
	}
	u = unrestricted->predicted.samples_per_s;
	fprintf(f, "framework %s: %.1f samples/s, the best plan stock %s runs; the unrestricted plan (%s) %.1f samples/s: %.1f %% given up\n",
		policy_framework_name(req->framework), a,
		framework_title(req->framework), unrestricted->planner, u,
		u > 0 ? 100.0 * (u - a) / u : 0.0);
}

/* Map a library error to the exit status of ARCHITECTURE.md. */
static int exit_for(int rc)
{
	if (rc == -AR_EINFEASIBLE || rc == -AR_ETIMEOUT)
		return EXIT_INFEASIBLE;
	return EXIT_BADINPUT;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "cluster", required_argument, NULL, 'c' },
		{ "planner", required_argument, NULL, 'p' },
		{ "evaluate", required_argument, NULL, 'e' },
		{ "global-batch", required_argument, NULL, 'b' },
		{ "seq-len", required_argument, NULL, 's' },
		{ "budget-s", required_argument, NULL, 'B' },
		{ "policy", required_argument, NULL, 'P' },
		{ "profiles", required_argument, NULL, 'd' },
		{ "format", required_argument, NULL, 'f' },
		{ "output", required_argument, NULL, 'o' },
		{ "threads", required_argument, NULL, 'j' },
		{ "seed", required_argument, NULL, 'S' },
		{ "starts", required_argument, NULL, 'T' },
		{ "no-overlap", no_argument, NULL, 'n' },
		{ "no-climb", no_argument, NULL, 'N' },
		{ "seed-planners", no_argument, NULL, 'D' },
		{ "evaluations", required_argument, NULL, 'E' },
		{ "steering", required_argument, NULL, 'G' },
		{ "objective", required_argument, NULL, 'O' },
		{ "min-samples-per-s", required_argument, NULL, 'R' },
		{ "framework", required_argument, NULL, 'F' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 }
	};
	const char *model = NULL, *cluster = NULL, *evaluate = NULL;
	const char *output = NULL;
	struct costmodel_opts copts = { 0 };
	struct policy_request req = { .planner = "arachne", .seed = 1 };
	struct costmodel *cm = NULL;
	struct costmodel_cluster *cl = NULL;
	struct costmodel_plan *plan = NULL, *unrestricted = NULL;
	bool json = false;
	json_t *out = NULL;
	int c, rc, status = EXIT_BADINPUT;
	long v;

	while ((c = getopt_long(argc, argv, "m:c:p:e:b:s:B:P:d:f:o:j:qhV",
				longopts, NULL)) != -1) {
		switch (c) {
		case 'm': model = optarg; break;
		case 'c': cluster = optarg; break;
		case 'p': req.planner = optarg; break;
		case 'e': evaluate = optarg; break;
		case 'P': req.policy_path = optarg; break;
		case 'd': copts.profiles_dir = optarg; break;
		case 'o': output = optarg; break;
		case 'q': req.quiet = true; break;
		case 'n': copts.no_overlap = true; break;
		case 'b':
			if (parse_int("--global-batch", optarg, 1, 1 << 24, &v) < 0)
				return EXIT_BADINPUT;
			copts.global_batch = (int)v;
			break;
		case 's':
			if (parse_int("--seq-len", optarg, 1, 1 << 20, &v) < 0)
				return EXIT_BADINPUT;
			copts.seq_len = (int)v;
			break;
		case 'j':
			if (parse_int("--threads", optarg, 1, 64, &v) < 0)
				return EXIT_BADINPUT;
			req.threads = (int)v;
			break;
		case 'S':
			if (parse_int("--seed", optarg, 0, LONG_MAX, &v) < 0)
				return EXIT_BADINPUT;
			req.seed = (unsigned long)v;
			break;
		case 'T':
			if (strcmp(optarg, "rollouts") == 0) {
				req.rollout_starts_only = true;
			} else if (strcmp(optarg, "all") != 0) {
				fprintf(stderr, "%s: --starts: \"%s\" is not all or rollouts\n",
					prog, optarg);
				return EXIT_BADINPUT;
			}
			break;
		case 'N':
			req.no_climb = true;
			break;
		case 'D':
			req.seed_planners = true;
			break;
		case 'E':
			if (parse_int("--evaluations", optarg, 1, LONG_MAX, &v) < 0)
				return EXIT_BADINPUT;
			req.evaluations = v;
			break;
		case 'G':
			if ((rc = policy_steering_find(optarg)) < 0) {
				fprintf(stderr, "%s: --steering: \"%s\" is not published or shared\n",
					prog, optarg);
				return EXIT_BADINPUT;
			}
			req.steering = rc;
			break;
		case 'O':
			if ((rc = policy_objective_find(optarg)) < 0) {
				fprintf(stderr, "%s: --objective: \"%s\" is not throughput or cost\n",
					prog, optarg);
				return EXIT_BADINPUT;
			}
			req.objective = rc;
			break;
		case 'R': {
			char *end;

			req.min_samples_per_s = strtod(optarg, &end);
			if (end == optarg || *end || !(req.min_samples_per_s >= 0) ||
			    !isfinite(req.min_samples_per_s)) {
				fprintf(stderr, "%s: --min-samples-per-s: \"%s\" is not a number of samples/s\n",
					prog, optarg);
				return EXIT_BADINPUT;
			}
			break;
		}
		case 'B': {
			char *end;

			req.budget_s = strtod(optarg, &end);
			if (end == optarg || *end || !(req.budget_s > 0)) {
				fprintf(stderr, "%s: --budget-s: \"%s\" is not a positive number of seconds\n",
					prog, optarg);
				return EXIT_BADINPUT;
			}
			break;
		}
		case 'F':
			rc = policy_framework_find(optarg);
			if (rc <= POLICY_FRAMEWORK_ANY) {
				fprintf(stderr, "%s: --framework: \"%s\" is not megatron\n",
					prog, optarg);
				return EXIT_BADINPUT;
			}
			req.framework = rc;
			break;
		case 'f':
			if (strcmp(optarg, "json") == 0) {
				json = true;
			} else if (strcmp(optarg, "text") != 0) {
				fprintf(stderr, "%s: --format: \"%s\" is not text or json\n",
					prog, optarg);
				return EXIT_BADINPUT;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("arachne-plan %s\n", PACKAGE_VERSION);
			return 0;
		default:
			usage(stderr);
			return EXIT_BADINPUT;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "%s: unexpected argument \"%s\"\n", prog, argv[optind]);
		return EXIT_BADINPUT;
	}
	if (!model || !cluster) {
		fprintf(stderr, "%s: --model and --cluster are required (see --help)\n",
			prog);
		return EXIT_BADINPUT;
	}

	json_t *evaluated = NULL;

	if (evaluate) {
		/* The plan says the batch and sequence it was made for. */
		evaluated = ar_json_load_file(evaluate);
		if (!evaluated) {
			fprintf(stderr, "%s: %s\n", prog, ar_errmsg());
			return EXIT_BADINPUT;
		}
		if (!copts.seq_len && json_is_integer(json_object_get(evaluated, "seq_len")))
			copts.seq_len = (int)json_integer_value(json_object_get(evaluated, "seq_len"));
		if (!copts.global_batch &&
		    json_is_integer(json_object_get(evaluated, "global_batch")))
			copts.global_batch = (int)json_integer_value(
				json_object_get(evaluated, "global_batch"));
		if (copts.seq_len < 0 || copts.seq_len > 1 << 20 ||
		    copts.global_batch < 0 || copts.global_batch > 1 << 24) {
			fprintf(stderr, "%s: %s: seq_len or global_batch out of range\n",
				prog, evaluate);
			json_decref(evaluated);
			return EXIT_BADINPUT;
		}
	}
	rc = costmodel_load(model, &copts, &cm);
	if (rc < 0) {
		fprintf(stderr, "%s: %s\n", prog, ar_errmsg()[0] ? ar_errmsg() :
			ar_strerror(rc));
		json_decref(evaluated);
		return EXIT_BADINPUT;
	}
	rc = costmodel_cluster_load(cm, cluster, &cl);
	if (rc < 0) {
		fprintf(stderr, "%s: %s\n", prog, ar_errmsg()[0] ? ar_errmsg() :
			ar_strerror(rc));
		goto out;
	}

	if (evaluate) {
		rc = costmodel_plan_from_json(cm, cl, evaluated, &plan);
		if (rc == 0)
			rc = costmodel_plan_price(cm, cl, plan);
		if (rc < 0) {
			fprintf(stderr, "%s: %s: %s\n", prog, evaluate, ar_errmsg());
			status = exit_for(rc);
			goto out;
		}
		rc = policy_framework_check(cm, plan, req.framework);
		if (rc < 0) {
			fprintf(stderr, "%s: %s: stock %s cannot run this plan: %s\n",
				prog, evaluate, framework_title(req.framework),
				ar_errmsg());
			status = exit_for(rc);
			goto out;
		}
	} else {
		req.cm = cm;
		req.cl = cl;
		rc = policy_plan(&req, &plan);
		if (rc < 0) {
			fprintf(stderr, "%s: no plan for %s on %s: %s\n", prog,
				model, cl->name, ar_errmsg()[0] ? ar_errmsg() :
				ar_strerror(rc));
			status = exit_for(rc);
			goto out;
		}
		if (req.framework != POLICY_FRAMEWORK_ANY) {
			struct policy_request any = req;

			any.framework = POLICY_FRAMEWORK_ANY;
			rc = policy_plan(&any, &unrestricted);
			if (rc < 0) {
				fprintf(stderr, "%s: no unrestricted plan for %s on %s: %s\n",
					prog, model, cl->name, ar_errmsg());
				status = exit_for(rc);
				goto out;
			}
		}
	}

	out = costmodel_plan_to_json(cm, cl, plan);
	if (!out) {
		fprintf(stderr, "%s: out of memory\n", prog);
		goto out;
	}
	if (output) {
		char *text = json_dumps(out, JSON_INDENT(2));

		rc = text ? ar_file_write_output(output, text, strlen(text), 0644) :
			    ar_seterr(-ENOMEM, "%s: out of memory", output);
		free(text);
		if (rc < 0) {
			fprintf(stderr, "%s: %s\n", prog, ar_errmsg());
			goto out;
		}
	}
	if (json) {
		json_dumpf(out, stdout, JSON_INDENT(2));
		putchar('\n');
	} else {
		print_text(cm, cl, plan, evaluate != NULL);
	}
	print_framework(json ? stderr : stdout, &req, plan, unrestricted,
			evaluate != NULL);
	status = 0;
out:
	json_decref(evaluated);
	json_decref(out);
	costmodel_plan_free(unrestricted);
	costmodel_plan_free(plan);
	costmodel_cluster_free(cl);
	costmodel_destroy(cm);
	return status;
}
