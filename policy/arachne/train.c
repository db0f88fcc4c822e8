/*
 * train.c - training one policy across compositions (§5.5).
 *
 * First, every composition's teacher plan (its best structured plan,
 * climbed as at planning time) enters its replay buffer, and the policy
 * imitates the teacher plans alone for a number of updates.  Then one
 * update ("episode" on the command line):
 *   1. draw a batch of training compositions; on each run a group of
 *      rollouts in parallel threads.  One rollout per group draws its GPU
 *      types uniformly; the others are forced, with a probability that
 *      decays from 0.8 to 0.25 over training, to a uniform feasible depth.
 *   2. advantages: each rollout's return against its own group (GRPO),
 *      so compositions of any scale weigh alike; no value network.
 *   3. per composition, the gradient of the PPO clipped surrogate plus an
 *      entropy bonus per decision (divided by the decisions of its step),
 *      plus, every SIL_EVERY updates, self-imitation of the best plans in the
 *      composition's replay buffers (one per first depth).  Before each
 *      imitation, the best rollout of every composition is improved by a
 *      short local climb (improve.c) and the climbed plan is replayed
 *      through the masks into the buffers (expert iteration): the policy
 *      learns to build what the search finds from its plans, so that at
 *      inference its own rollouts start where the climb would end.
 *   4. PCGrad: where two compositions' gradients conflict, each loses its
 *      component along the other; the sum takes an Adam step.
 * Every random draw comes from generators seeded by (seed, what, where),
 * and per-composition gradients are summed in a fixed order, so a seed
 * reproduces a run whatever the thread count.
 */
#define AR_INTERNAL 1
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ar.h"
#include "arachne_private.h"

#define PPO_EPOCHS		2
#define PPO_CLIP		0.2f
#define LEARNING_RATE		3e-4f	/* 1e-3 undid the imitation in 200 updates */
#define IMITATION_RATE		1e-3f	/* behaviour cloning of the teachers */
#define ENTROPY_COEF		0.01f
#define GRAD_CLIP		1.0
#define SIL_EVERY		1	/* self-imitation every N updates */
#define SIL_WEIGHT		4.0f	/* the imitation anchors the PPO updates */
#define SIL_KEEP		0.9	/* imitate entries within 10% of the best */
#define FORCE_START		0.8
#define FORCE_END		0.25
#define MAX_EVAL_CLUSTERS	256
/* The climb of a composition's best rollout before imitation, in
 * policy_candidate_work() units: a quarter of one inference start. */
#define EXPERT_WORK		(POLICY_START_WORK / 4)

/* The best rollout seen for one (composition, first depth). */
struct sil_entry {
	struct policy_decision *dec;
	int ndec;
	float ret;
	double throughput;		/* samples/s of its plan */
};

/* How closely the trained policy builds one composition's best entry. */
struct fit {
	int decisions[POLICY_NUM_HEADS];	/* the entry's, per head */
	int matched[POLICY_NUM_HEADS];	/* where the argmax is the entry's */
	bool whole;			/* every decision matched */
	double target;			/* the entry's samples/s; 0: none */
	double greedy;			/* samples/s the greedy construction reaches */
	double best;			/* the best of POLICY_BATCH constructions */
	int rc;				/* < 0: it could not be measured (no memory) */
};

struct comp {
	struct costmodel_cluster *cl;	/* owned when generated */
	bool owned;
	struct policy_env env;
	struct sil_entry sil[POLICY_DMAX + 1];
	float best_ret;
};

struct trainer {
	const struct costmodel *cm;
	const struct policy_train_opts *o;
	struct policy_net net;
	struct comp *comps;
	int ncomps;
	int threads;
	/* this update */
	long update;
	double force_p;
	int *batch;			/* [batch] composition indices */
	struct policy_trace *traces;	/* [batch * group] */
	int *trace_rc;
	float *adv;			/* [batch * group] */
	bool sil_now;
	float **grads;			/* [batch] per-composition gradients */
	struct policy_work *work;	/* [threads] */
	struct policy_decision **rows_dec;	/* [threads] batch buffers */
	struct policy_loss_row **rows_loss;
	int *rows_cap;
	float *losses;			/* [batch] */
	struct policy_trace *expert;	/* [batch] climbed plans, replayed */
	int *expert_rc;
	long expert_kept;		/* climbed plans that entered a buffer */
	int *teacher_rc;		/* [ncomps] 1: its teacher plan is in a buffer */
	int teachers;
};

/* ---------------------------------------------------------------------
 * Compositions.
 * ------------------------------------------------------------------- */

/* Evaluation-grid compositions under @dir, so training can avoid them. */
static int eval_clusters_load(const struct costmodel *cm, const char *dir,
			      struct costmodel_cluster **out, int max)
{
	struct dirent **names = NULL;
	int n, count = 0;

	if (!dir)
		return 0;
	n = scandir(dir, &names, NULL, alphasort);
	if (n < 0)
		return 0;	/* no grid: nothing to avoid */
	for (int i = 0; i < n; i++) {
		size_t len = strlen(names[i]->d_name);
		char path[4096];

		if (count < max && len > 5 &&
		    strcmp(names[i]->d_name + len - 5, ".json") == 0) {
			snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
			if (costmodel_cluster_load(cm, path, &out[count]) == 0)
				count++;
		}
		free(names[i]);
	}
	free(names);
	return count;
}

/* A composition the model can be planned on at all. */
static bool comp_usable(struct comp *c)
{
	struct policy_episode ep;
	bool ok;

	if (policy_env_init(&c->env, c->env.cm, c->cl) < 0)
		return false;
	if (policy_episode_init(&ep, &c->env) < 0)
		return false;
	ok = policy_mask_depth(&ep) != 0;
	policy_episode_fini(&ep);
	return ok;
}

static int comps_build(struct trainer *tr)
{
	const struct policy_train_opts *o = tr->o;
	struct costmodel_cluster *grid[MAX_EVAL_CLUSTERS];
	struct policy_compose_opts co = { .min_types = 2, .max_types = 4,
					  .min_gpus = 16,
					  .max_gpus = o->max_gpus > 16 ? o->max_gpus : 1024 };
	struct policy_rng rng;
	int ngrid, want, tries = 0;

	want = o->nfixed > 0 ? o->nfixed : o->compositions;
	tr->comps = calloc(want, sizeof(*tr->comps));
	if (!tr->comps)
		return -ENOMEM;
	if (o->nfixed > 0) {
		for (int i = 0; i < o->nfixed; i++) {
			struct comp *c = &tr->comps[tr->ncomps];

			c->cl = (struct costmodel_cluster *)o->fixed[i];
			c->env.cm = tr->cm;
			if (!comp_usable(c))
				return ar_seterr(-AR_EINFEASIBLE,
						 "training composition %d cannot hold the model",
						 i);
			tr->ncomps++;
		}
		return 0;
	}

	ngrid = eval_clusters_load(tr->cm, o->clusters_dir, grid, MAX_EVAL_CLUSTERS);
	policy_rng_seed(&rng, o->seed, 0xc0);
	while (tr->ncomps < want && tries++ < 100 * want) {
		struct comp *c = &tr->comps[tr->ncomps];
		bool dup = false;

		c->cl = policy_compose_random(tr->cm, &rng, &co);
		if (!c->cl)
			break;
		c->owned = true;
		for (int g = 0; g < ngrid && !dup; g++)
			dup = policy_compose_equal(c->cl, grid[g]);
		for (int i = 0; i < tr->ncomps && !dup; i++)
			dup = policy_compose_equal(c->cl, tr->comps[i].cl);
		c->env.cm = tr->cm;
		if (dup || !comp_usable(c)) {
			policy_compose_free(c->cl);
			memset(c, 0, sizeof(*c));
			continue;
		}
		tr->ncomps++;
	}
	for (int g = 0; g < ngrid; g++)
		costmodel_cluster_free(grid[g]);
	if (tr->ncomps == 0)
		return ar_seterr(-AR_EINFEASIBLE,
				 "no generated composition can hold model %s",
				 costmodel_model(tr->cm)->name);
	return 0;
}

/* ---------------------------------------------------------------------
 * Rollouts of one update.
 * ------------------------------------------------------------------- */

static void rollout_task(void *p, int thread, int i)
{
	struct trainer *tr = p;
	int group = tr->o->group, b = i / group, g = i % group;
	struct comp *c = &tr->comps[tr->batch[b]];
	struct policy_rollout_opts opts = {
		.draw = POLICY_DRAW_SAMPLE,
		.depth_temperature = 1.0f,
		.stage_temperature = 1.0f,
		.record = true,
		.forced_depth_p = g == 0 ? 0.0 : tr->force_p,
		.uniform_devices = g == 0,
	};
	struct policy_episode ep;
	struct policy_rng rng;
	int rc;

	policy_rng_seed(&rng, tr->o->seed,
			((uint64_t)tr->update << 20) ^ ((uint64_t)b << 10) ^ g ^
			0x5eed000000000000ULL);
	rc = policy_episode_init(&ep, &c->env);
	if (rc == 0) {
		rc = policy_rollout(&ep, &tr->net, &tr->work[thread], &rng, &opts,
				    &tr->traces[i]);
		policy_episode_fini(&ep);
	}
	tr->trace_rc[i] = rc;
}

/*
 * Expert iteration for composition @b of this update: climb from its best
 * rollout and replay the climbed plan into tr->expert[b].  A climb that
 * gains nothing, or a plan the masks refuse, leaves expert_rc[b] < 0.
 */
/*
 * Replay plan @x on composition @c into @out, decision by decision under
 * the masks, with the generator of (seed, @where).  A plan the masks
 * refuse, or with a template the fill skips, gives -AR_EINFEASIBLE.
 */
static int replay_plan(struct trainer *tr, int thread, struct comp *c,
		       struct policy_candidate *x, uint64_t where,
		       struct policy_trace *out)
{
	struct policy_rollout_opts opts = { .draw = POLICY_DRAW_GREEDY,
					    .record = true, .follow = x };
	struct policy_episode ep;
	struct policy_rng rng;
	int rc;

	rc = policy_candidate_drop_unplaced(&c->env, x);
	if (rc < 0)
		return rc;
	if (x->n == 0 || x->n > POLICY_MAX_STEPS)
		return -AR_EINFEASIBLE;
	policy_rng_seed(&rng, tr->o->seed, where);
	rc = policy_episode_init(&ep, &c->env);
	if (rc < 0)
		return rc;
	rc = policy_rollout(&ep, &tr->net, &tr->work[thread], &rng, &opts, out);
	policy_episode_fini(&ep);
	return rc;
}

static void expert_task(void *p, int thread, int b)
{
	struct trainer *tr = p;
	int group = tr->o->group;
	struct comp *c = &tr->comps[tr->batch[b]];
	struct planner_deadline dl = { .start = ar_now(), .end = INFINITY };
	struct policy_priced priced_set;
	struct policy_climb climb = { .env = &c->env, .threads = 1, .dl = &dl,
				      .priced_set = &priced_set };
	struct policy_candidate x;
	bool *ok = calloc(group, sizeof(*ok));
	double start;
	int rc;

	tr->expert_rc[b] = ok ? -AR_EINFEASIBLE : -ENOMEM;
	if (!ok)
		return;
	for (int g = 0; g < group; g++)
		ok[g] = tr->trace_rc[b * group + g] == 0;
	rc = policy_rollout_starts(&tr->traces[b * group], ok, group, &x, 1);
	free(ok);
	if (rc != 1) {
		if (rc == -ENOMEM)
			tr->expert_rc[b] = rc;
		return;
	}
	start = x.thr;
	policy_priced_init(&priced_set);
	rc = policy_climb_run(&climb, &x, EXPERT_WORK);
	policy_priced_fini(&priced_set);
	if (rc < 0 || x.thr <= start)
		return;
	tr->expert_rc[b] = replay_plan(tr, thread, c, &x, 0xe4be47ULL ^ (uint64_t)b,
				       &tr->expert[b]);
}

/* ---------------------------------------------------------------------
 * Gradients.
 * ------------------------------------------------------------------- */

static int rows_reserve(struct trainer *tr, int thread, int n)
{
	if (n <= tr->rows_cap[thread])
		return 0;
	free(tr->rows_dec[thread]);
	free(tr->rows_loss[thread]);
	policy_work_fini(&tr->work[thread]);
	tr->rows_dec[thread] = malloc(n * sizeof(struct policy_decision));
	tr->rows_loss[thread] = malloc(n * sizeof(struct policy_loss_row));
	if (!tr->rows_dec[thread] || !tr->rows_loss[thread] ||
	    policy_work_init(&tr->work[thread], n) < 0) {
		tr->rows_cap[thread] = 0;
		return -ENOMEM;
	}
	tr->rows_cap[thread] = n;
	return 0;
}

/* Gradient of composition @b's loss into tr->grads[b]. */
static void grad_task(void *p, int thread, int b)
{
	struct trainer *tr = p;
	int group = tr->o->group, n = 0, cap = 0;
	struct comp *c = &tr->comps[tr->batch[b]];
	struct policy_loss_opts lo = { .clip = PPO_CLIP };
	int sil_n = 0;
	struct policy_decision *dec;
	struct policy_loss_row *rows;

	memset(tr->grads[b], 0, tr->net.num_params * sizeof(float));
	tr->losses[b] = NAN;	/* no rows */
	for (int g = 0; g < group; g++)
		if (tr->trace_rc[b * group + g] == 0)
			cap += tr->traces[b * group + g].ndec;
	if (tr->sil_now)
		for (int d = 0; d <= POLICY_DMAX; d++)
			if (c->sil[d].dec && c->sil[d].ret >= SIL_KEEP * c->best_ret) {
				cap += c->sil[d].ndec;
				sil_n++;
			}
	if (cap == 0 || rows_reserve(tr, thread, cap) < 0)
		return;
	dec = tr->rows_dec[thread];
	rows = tr->rows_loss[thread];

	for (int g = 0; g < group; g++) {
		const struct policy_trace *t = &tr->traces[b * group + g];

		if (tr->trace_rc[b * group + g] < 0)
			continue;
		for (int i = 0; i < t->ndec; i++) {
			int per_step = t->decisions_in_step[t->dec_step[i]];

			dec[n] = t->dec[i];
			rows[n] = (struct policy_loss_row){
				.advantage = tr->adv[b * group + g],
				.entropy_weight = ENTROPY_COEF / (per_step ? per_step : 1),
				.scale = 1.0f / group,
			};
			n++;
		}
	}
	if (tr->sil_now)
		for (int d = 0; d <= POLICY_DMAX; d++) {
			const struct sil_entry *e = &c->sil[d];

			if (!e->dec || e->ret < SIL_KEEP * c->best_ret)
				continue;
			for (int i = 0; i < e->ndec; i++) {
				dec[n] = e->dec[i];
				rows[n] = (struct policy_loss_row){
					.imitation_weight = SIL_WEIGHT,
					.scale = 1.0f / (sil_n * e->ndec),
				};
				n++;
			}
		}
	policy_net_forward(&tr->net, &tr->work[thread], dec, n);
	tr->losses[b] = policy_loss(&tr->work[thread], dec, rows, n, &lo);
	policy_net_backward(&tr->net, &tr->work[thread], dec, n, tr->grads[b]);
}

static double dot(const float *a, const float *b, size_t n)
{
	double s = 0.0;

	for (size_t i = 0; i < n; i++)
		s += (double)a[i] * b[i];
	return s;
}

/*
 * PCGrad (Yu et al.): for each composition's gradient, in turn against the
 * others in a fixed rotation, remove the component along any it conflicts
 * with.  The projected gradients are averaged into net->grads.
 */
static void pcgrad_combine(struct trainer *tr, int nb)
{
	size_t P = tr->net.num_params;
	float *proj = malloc(P * sizeof(float));
	double norm2[64];
	double total = 0.0;

	memset(tr->net.grads, 0, P * sizeof(float));
	if (!proj)
		return;
	for (int j = 0; j < nb; j++)
		norm2[j] = dot(tr->grads[j], tr->grads[j], P);
	for (int i = 0; i < nb; i++) {
		memcpy(proj, tr->grads[i], P * sizeof(float));
		for (int r = 1; r < nb; r++) {
			int j = (i + r) % nb;
			double d;

			if (norm2[j] <= 0.0)
				continue;
			d = dot(proj, tr->grads[j], P);
			if (d < 0.0) {
				float f = (float)(d / norm2[j]);

				for (size_t p = 0; p < P; p++)
					proj[p] -= f * tr->grads[j][p];
			}
		}
		for (size_t p = 0; p < P; p++)
			tr->net.grads[p] += proj[p] / nb;
	}
	free(proj);
	total = sqrt(dot(tr->net.grads, tr->net.grads, P));
	if (total > GRAD_CLIP)
		for (size_t p = 0; p < P; p++)
			tr->net.grads[p] *= (float)(GRAD_CLIP / total);
}

/* ---------------------------------------------------------------------
 * Bookkeeping.
 * ------------------------------------------------------------------- */

static void advantages(struct trainer *tr, int nb)
{
	int group = tr->o->group;

	for (int b = 0; b < nb; b++) {
		double mean = 0.0, var = 0.0;
		int n = 0;

		for (int g = 0; g < group; g++)
			if (tr->trace_rc[b * group + g] == 0) {
				mean += tr->traces[b * group + g].ret;
				n++;
			}
		mean = n ? mean / n : 0.0;
		for (int g = 0; g < group; g++)
			if (tr->trace_rc[b * group + g] == 0) {
				double d = tr->traces[b * group + g].ret - mean;

				var += d * d;
			}
		var = n > 1 ? var / (n - 1) : 0.0;
		for (int g = 0; g < group; g++) {
			double a = tr->traces[b * group + g].ret - mean;

			tr->adv[b * group + g] = var > 1e-12 ?
				(float)(a / sqrt(var)) : 0.0f;
		}
	}
}

/* Keep @t in @c's replay buffer of its first depth when it beats the entry. */
static int sil_offer(struct comp *c, const struct policy_trace *t)
{
	struct sil_entry *e;
	struct policy_decision *copy;

	if (t->ret <= 0 || t->first_depth <= 0)
		return 0;
	e = &c->sil[t->first_depth];
	if (e->dec && t->ret <= e->ret)
		return 0;
	copy = malloc(t->ndec * sizeof(*copy));
	if (!copy)
		return -ENOMEM;
	memcpy(copy, t->dec, t->ndec * sizeof(*copy));
	free(e->dec);
	e->dec = copy;
	e->ndec = t->ndec;
	e->ret = t->ret;
	e->throughput = t->throughput;
	if (t->ret > c->best_ret)
		c->best_ret = t->ret;
	return 1;
}

static int sil_update(struct trainer *tr, int nb)
{
	int group = tr->o->group, rc;

	for (int b = 0; b < nb; b++) {
		struct comp *c = &tr->comps[tr->batch[b]];

		for (int g = 0; g < group; g++) {
			if (tr->trace_rc[b * group + g] < 0)
				continue;
			rc = sil_offer(c, &tr->traces[b * group + g]);
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

/* The climbed plans of this update into the replay buffers. */
static int expert_update(struct trainer *tr, int nb)
{
	int rc;

	planner_parallel(expert_task, tr, nb, tr->threads);
	for (int b = 0; b < nb; b++) {
		if (tr->expert_rc[b] == -ENOMEM)
			return -ENOMEM;
		if (tr->expert_rc[b] < 0)
			continue;
		rc = sil_offer(&tr->comps[tr->batch[b]], &tr->expert[b]);
		if (rc < 0)
			return rc;
		tr->expert_kept += rc;
	}
	return 0;
}

/* Draw into @bar (31 bytes at least) a bar of @done out of @total. */
static void bar_draw(char *bar, long done, long total)
{
	int width = 30, fill = (int)(width * done / (total ? total : 1));

	for (int i = 0; i < width; i++)
		bar[i] = i < fill ? '#' : '.';
	bar[width] = '\0';
}

/*
 * The same bar for the phases before the first rollout, with the loss of
 * the last window of updates where there is one (NAN: none).
 */
static void phase_progress(const struct trainer *tr, const char *what,
			   long done, long total, double t0, double loss)
{
	char bar[64];

	if (tr->o->quiet)
		return;
	bar_draw(bar, done, total);
	fprintf(stderr, "\r[%s] %s %ld/%ld  %.0fs ", bar, what, done, total,
		ar_now() - t0);
	if (!isnan(loss))
		fprintf(stderr, " loss %.3g ", loss);
	if (done == total)
		fputc('\n', stderr);
	fflush(stderr);
}

/*
 * The teacher plan of composition @i, before training: the structured
 * start climbed as far as one inference start climbs, replayed into the
 * composition's replay buffer.  From the first imitation on, the policy
 * learns to build in one pass what the full planner reaches on this
 * composition; the rollouts' own bests replace it where they pass it.
 */
static void teacher_task(void *p, int thread, int i)
{
	struct trainer *tr = p;
	struct comp *c = &tr->comps[i];
	struct planner_deadline dl = { .start = ar_now(), .end = INFINITY };
	struct policy_priced priced_set;
	struct policy_climb climb = { .env = &c->env, .threads = 1, .dl = &dl,
				      .priced_set = &priced_set };
	struct policy_trace trace = { 0 };
	struct policy_candidate x;
	long priced = 0;
	int rc;

	tr->teacher_rc[i] = policy_structured_start(&c->env, 1, &x, &priced);
	if (tr->teacher_rc[i] != 1)
		return;
	policy_priced_init(&priced_set);
	rc = policy_climb_run(&climb, &x, POLICY_START_WORK);
	policy_priced_fini(&priced_set);
	if (rc == 0)
		rc = replay_plan(tr, thread, c, &x, 0x7eac4e7ULL ^ (uint64_t)i, &trace);
	if (rc == 0)
		rc = sil_offer(c, &trace);
	policy_trace_fini(&trace);
	tr->teacher_rc[i] = rc;
}

#define TEACHER_CHUNK	64

struct teacher_chunk {
	struct trainer *tr;
	int first;
};

static void teacher_chunk_task(void *p, int thread, int i)
{
	struct teacher_chunk *ch = p;

	teacher_task(ch->tr, thread, ch->first + i);
}

/* Every composition's teacher plan into its replay buffer. */
static int teachers_build(struct trainer *tr)
{
	double t0 = ar_now();
	int kept = 0;

	tr->teacher_rc = calloc(tr->ncomps, sizeof(*tr->teacher_rc));
	if (!tr->teacher_rc)
		return -ENOMEM;
	/* in chunks, for the progress bar; each composition climbs alone */
	for (int first = 0; first < tr->ncomps; first += TEACHER_CHUNK) {
		struct teacher_chunk ch = { tr, first };
		int n = tr->ncomps - first < TEACHER_CHUNK ? tr->ncomps - first :
							      TEACHER_CHUNK;

		planner_parallel(teacher_chunk_task, &ch, n, tr->threads);
		phase_progress(tr, "teacher plans", first + n, tr->ncomps, t0, NAN);
	}
	for (int i = 0; i < tr->ncomps; i++) {
		if (tr->teacher_rc[i] == -ENOMEM)
			return -ENOMEM;
		kept += tr->teacher_rc[i] == 1;
	}
	tr->teachers = kept;
	return 0;
}

/* @nb distinct compositions into tr->batch. */
static void batch_draw(struct trainer *tr, struct policy_rng *pick, int nb)
{
	for (int b = 0; b < nb; b++) {
		int j;
		bool seen;

		do {
			j = policy_rng_below(pick, tr->ncomps);
			seen = false;
			for (int q = 0; q < b; q++)
				seen |= tr->batch[q] == j;
		} while (seen);
		tr->batch[b] = j;
	}
}

/*
 * The imitation's loss, the mean negative log-likelihood per decision of
 * the teacher plans, is watched per window of updates.  Adam's steps do
 * not shrink with the gradient, and this network (FiLM products of
 * several layers) can grow sharp enough that they raise the loss: a
 * spike that then runs away (1000 compositions: 0.43 at 21,000 updates,
 * 1e15 at 40,000; docs/policy.md).  So a window whose loss rises well
 * above the lowest so far takes the weights and Adam's moments back to
 * the end of that lowest window and halves the rate, as large training
 * runs recover from loss spikes.  A run whose loss never rises that far
 * (make policies' four) trains exactly as it would without it.
 */
#define IMITATION_WINDOW	500
#define IMITATION_RISE		1.25	/* a window above lowest * this + slack */
#define IMITATION_SLACK		0.005
#define IMITATION_MAX_ROLLBACKS	8

struct imitation_snapshot {
	float *params, *adam_m, *adam_v;
	long adam_t;
};

static int snapshot_alloc(struct imitation_snapshot *s, size_t num_params)
{
	s->params = malloc(num_params * sizeof(float));
	s->adam_m = malloc(num_params * sizeof(float));
	s->adam_v = malloc(num_params * sizeof(float));
	return s->params && s->adam_m && s->adam_v ? 0 : -ENOMEM;
}

static void snapshot_free(struct imitation_snapshot *s)
{
	free(s->params);
	free(s->adam_m);
	free(s->adam_v);
}

static void snapshot_take(struct imitation_snapshot *s,
			  const struct policy_net *net)
{
	size_t bytes = net->num_params * sizeof(float);

	memcpy(s->params, net->params, bytes);
	memcpy(s->adam_m, net->adam_m, bytes);
	memcpy(s->adam_v, net->adam_v, bytes);
	s->adam_t = net->adam_t;
}

static void snapshot_restore(const struct imitation_snapshot *s,
			     struct policy_net *net)
{
	size_t bytes = net->num_params * sizeof(float);

	memcpy(net->params, s->params, bytes);
	memcpy(net->adam_m, s->adam_m, bytes);
	memcpy(net->adam_v, s->adam_v, bytes);
	net->adam_t = s->adam_t;
}

/*
 * Before the first rollout: @steps updates of imitation alone, each on a
 * batch of compositions' teacher plans (behaviour cloning), so that the
 * rollouts start from a policy that already builds the search's plans.
 */
static int imitate_teachers(struct trainer *tr, struct policy_rng *pick,
			    long steps, struct policy_train_result *res)
{
	int nb = tr->o->batch < tr->ncomps ? tr->o->batch : tr->ncomps;
	double t0 = ar_now(), window_sum = 0.0;
	long window_n = 0, window_rows = 0;
	float rate = IMITATION_RATE;
	struct imitation_snapshot best = { 0 };

	if (snapshot_alloc(&best, tr->net.num_params) < 0) {
		snapshot_free(&best);
		return -ENOMEM;
	}
	for (int i = 0; i < nb * tr->o->group; i++)
		tr->trace_rc[i] = -AR_EINFEASIBLE;	/* no rollout rows */
	/* the first window is the lowest: a rollback always has a snapshot */
	res->imitation_lowest = INFINITY;
	for (long k = 0; k < steps; k++) {
		double loss;

		batch_draw(tr, pick, nb);
		tr->sil_now = true;
		planner_parallel(grad_task, tr, nb, tr->threads);
		/* the loss of the weights before this update */
		for (int b = 0; b < nb; b++)
			if (!isnan(tr->losses[b])) {
				window_sum += tr->losses[b] / SIL_WEIGHT;
				window_rows++;
			}
		pcgrad_combine(tr, nb);
		policy_net_adam(&tr->net, rate, 0.9f, 0.999f, 1e-8f, 0.0f);
		if (++window_n < IMITATION_WINDOW && k < steps - 1)
			continue;

		loss = window_rows ? window_sum / window_rows : NAN;
		window_sum = 0.0;
		window_n = window_rows = 0;
		if (isnan(loss))
			continue;
		if (res->imitation_windows++ == 0)
			res->imitation_first = loss;
		res->imitation_last = loss;
		if (loss < res->imitation_lowest) {
			res->imitation_lowest = loss;
			res->imitation_lowest_update = k + 1;
			snapshot_take(&best, &tr->net);
		} else if (loss > res->imitation_lowest * IMITATION_RISE +
				  IMITATION_SLACK) {
			snapshot_restore(&best, &tr->net);
			rate /= 2.0f;
			res->imitation_rollbacks++;
			if (!tr->o->quiet)
				fprintf(stderr,
					"\nimitation loss %.3g at update %ld, lowest %.3g: back to update %ld, rate %.3g\n",
					loss, k + 1, res->imitation_lowest,
					res->imitation_lowest_update, rate);
			if (res->imitation_rollbacks == IMITATION_MAX_ROLLBACKS)
				break;
		}
		phase_progress(tr, "imitation update", k + 1, steps, t0, loss);
	}
	snapshot_free(&best);
	tr->sil_now = false;
	return 0;
}

static void progress(const struct trainer *tr, long done, double mean,
		     double best, double t0)
{
	long total = tr->o->episodes;
	char bar[64];

	if (tr->o->quiet)
		return;
	bar_draw(bar, done, total);
	fprintf(stderr, "\r[%s] episode %ld/%ld  mean %.4f  best %.4f  distilled %ld  %.0fs ",
		bar, done, total, mean, best, tr->expert_kept, ar_now() - t0);
	if (done == total)
		fputc('\n', stderr);
	fflush(stderr);
}

/* ---------------------------------------------------------------------
 * The fit report (--fit-report).
 * ------------------------------------------------------------------- */

struct fit_ctx {
	struct trainer *tr;
	struct fit *fit;		/* [ncomps] */
};

/* The entry of @c's replay buffers with the best return, or NULL. */
static const struct sil_entry *best_entry(const struct comp *c)
{
	const struct sil_entry *best = NULL;

	for (int d = 0; d <= POLICY_DMAX; d++)
		if (c->sil[d].dec && (!best || c->sil[d].ret > best->ret))
			best = &c->sil[d];
	return best;
}

/*
 * Composition @i: the policy's argmax at each decision of the best entry
 * (teacher-forced, the states the entry went through), then the
 * constructions planning makes (one greedy, the rest sampled, seeded as
 * arachne-plan --seed S seeds them, S the training seed) against the
 * entry's samples/s.
 */
static void fit_task(void *p, int thread, int i)
{
	struct fit_ctx *fc = p;
	struct trainer *tr = fc->tr;
	struct comp *c = &tr->comps[i];
	struct fit *f = &fc->fit[i];
	const struct sil_entry *e = best_entry(c);
	struct policy_work *w = &tr->work[thread];

	if (!e || e->throughput <= 0.0)
		return;
	f->rc = rows_reserve(tr, thread, e->ndec);
	if (f->rc < 0)
		return;
	policy_net_forward(&tr->net, w, e->dec, e->ndec);
	f->whole = true;
	for (int r = 0; r < e->ndec; r++) {
		const struct policy_decision *d = &e->dec[r];
		int argmax = policy_masked_argmax(w->logits + (size_t)r * POLICY_MAX_CANDS,
						  d->mask, policy_head_cands(d->head));

		f->decisions[d->head]++;
		f->matched[d->head] += argmax == d->action;
		f->whole &= argmax == d->action;
	}
	for (int k = 0; k < POLICY_BATCH; k++) {
		struct policy_rollout_opts opts = {
			.draw = k == 0 ? POLICY_DRAW_GREEDY : POLICY_DRAW_SAMPLE,
			.depth_temperature = POLICY_PLAN_DEPTH_TEMPERATURE,
			.stage_temperature = POLICY_PLAN_STAGE_TEMPERATURE,
		};
		struct policy_trace t = { 0 };
		struct policy_episode ep;
		struct policy_rng rng;

		policy_rng_seed(&rng, tr->o->seed, (uint64_t)k + 1);
		f->rc = policy_episode_init(&ep, &c->env);
		if (f->rc < 0)
			return;
		if (policy_rollout(&ep, &tr->net, w, &rng, &opts, &t) == 0) {
			if (k == 0)
				f->greedy = t.throughput;
			f->best = fmax(f->best, t.throughput);
		}
		policy_trace_fini(&t);
		policy_episode_fini(&ep);
	}
	f->target = e->throughput;
}

/* A construction reaches its target: to a relative 1e-4, as the grid's counts compare. */
#define FIT_REACHED(x, target)	((x) >= (target) * (1.0 - 1e-4))

static int fit_report(struct trainer *tr, struct policy_train_result *res)
{
	struct fit_ctx fc = { tr, calloc(tr->ncomps, sizeof(*fc.fit)) };
	long decisions[POLICY_NUM_HEADS] = { 0 }, matched[POLICY_NUM_HEADS] = { 0 };
	double log_greedy = 0.0, log_best = 0.0;
	int n = 0, whole = 0, greedy = 0, best = 0;

	if (!fc.fit)
		return -ENOMEM;
	planner_parallel(fit_task, &fc, tr->ncomps, tr->threads);
	for (int i = 0; i < tr->ncomps; i++) {
		const struct fit *f = &fc.fit[i];

		if (f->rc < 0) {
			int rc = f->rc;

			free(fc.fit);
			return rc;
		}
		if (f->target <= 0.0)
			continue;
		n++;
		for (int h = 0; h < POLICY_NUM_HEADS; h++) {
			decisions[h] += f->decisions[h];
			matched[h] += f->matched[h];
		}
		whole += f->whole;
		greedy += FIT_REACHED(f->greedy, f->target);
		best += FIT_REACHED(f->best, f->target);
		/* a construction that built nothing counts as a hundredth */
		log_greedy += log(fmax(f->greedy, 0.01 * f->target) / f->target);
		log_best += log(fmax(f->best, 0.01 * f->target) / f->target);
	}
	free(fc.fit);
	res->fit_compositions = n;
	if (n == 0)
		return 0;
	for (int h = 0; h < POLICY_NUM_HEADS; h++)
		res->fit_decisions[h] = decisions[h] ?
			(double)matched[h] / decisions[h] : 1.0;
	res->fit_whole = (double)whole / n;
	res->fit_greedy = (double)greedy / n;
	res->fit_greedy_gmean = exp(log_greedy / n);
	res->fit_best = (double)best / n;
	res->fit_best_gmean = exp(log_best / n);
	return 0;
}

static int save(const struct trainer *tr, long episodes)
{
	struct policy_meta meta = { .feature_version = POLICY_FEATURE_VERSION,
				    .seed = tr->o->seed, .episodes = episodes };

	snprintf(meta.model, sizeof(meta.model), "%s", costmodel_model(tr->cm)->name);
	snprintf(meta.command, sizeof(meta.command), "%s",
		 tr->o->command ? tr->o->command : "");
	return policy_weights_save(&tr->net, &meta, tr->o->out);
}

static void trainer_fini(struct trainer *tr)
{
	int nb = tr->o->batch, ng = nb * tr->o->group;

	for (int i = 0; i < tr->ncomps; i++) {
		for (int d = 0; d <= POLICY_DMAX; d++)
			free(tr->comps[i].sil[d].dec);
		if (tr->comps[i].owned)
			policy_compose_free(tr->comps[i].cl);
	}
	free(tr->comps);
	free(tr->teacher_rc);
	if (tr->traces)
		for (int i = 0; i < ng; i++)
			policy_trace_fini(&tr->traces[i]);
	free(tr->traces);
	free(tr->trace_rc);
	if (tr->expert)
		for (int b = 0; b < nb; b++)
			policy_trace_fini(&tr->expert[b]);
	free(tr->expert);
	free(tr->expert_rc);
	free(tr->adv);
	free(tr->batch);
	free(tr->losses);
	if (tr->grads)
		for (int b = 0; b < nb; b++)
			free(tr->grads[b]);
	free(tr->grads);
	for (int t = 0; t < tr->threads; t++) {
		if (tr->work)
			policy_work_fini(&tr->work[t]);
		if (tr->rows_dec)
			free(tr->rows_dec[t]);
		if (tr->rows_loss)
			free(tr->rows_loss[t]);
	}
	free(tr->work);
	free(tr->rows_dec);
	free(tr->rows_loss);
	free(tr->rows_cap);
	policy_net_fini(&tr->net);
}

static int trainer_alloc(struct trainer *tr)
{
	int nb = tr->o->batch, ng = nb * tr->o->group;

	tr->traces = calloc(ng, sizeof(*tr->traces));
	tr->trace_rc = calloc(ng, sizeof(*tr->trace_rc));
	tr->adv = calloc(ng, sizeof(*tr->adv));
	tr->batch = calloc(nb, sizeof(*tr->batch));
	tr->losses = calloc(nb, sizeof(*tr->losses));
	tr->grads = calloc(nb, sizeof(*tr->grads));
	tr->work = calloc(tr->threads, sizeof(*tr->work));
	tr->rows_dec = calloc(tr->threads, sizeof(*tr->rows_dec));
	tr->rows_loss = calloc(tr->threads, sizeof(*tr->rows_loss));
	tr->rows_cap = calloc(tr->threads, sizeof(*tr->rows_cap));
	tr->expert = calloc(nb, sizeof(*tr->expert));
	tr->expert_rc = calloc(nb, sizeof(*tr->expert_rc));
	if (!tr->expert || !tr->expert_rc)
		return -ENOMEM;
	if (!tr->traces || !tr->trace_rc || !tr->adv || !tr->batch ||
	    !tr->losses || !tr->grads || !tr->work || !tr->rows_dec ||
	    !tr->rows_loss || !tr->rows_cap)
		return -ENOMEM;
	for (int b = 0; b < nb; b++) {
		tr->grads[b] = calloc(tr->net.num_params, sizeof(float));
		if (!tr->grads[b])
			return -ENOMEM;
	}
	for (int t = 0; t < tr->threads; t++)
		if (policy_work_init(&tr->work[t], 1) < 0)
			return -ENOMEM;
	return 0;
}

int policy_train(const struct costmodel *cm, const struct policy_train_opts *o,
		 struct policy_train_result *res)
{
	struct trainer tr = { .cm = cm, .o = o };
	struct policy_rng pick;
	double t0 = ar_now(), sum_first = 0.0, sum_last = 0.0, best = -INFINITY;
	long n_first = 0, n_last = 0, window;
	int rc;

	memset(res, 0, sizeof(*res));
	if (o->batch < 1 || o->batch > 64 || o->group < 2 || o->episodes < 1)
		return ar_seterr(-AR_EINVAL,
				 "training needs 1-64 compositions an update, groups of 2 or more and 1 episode or more");
	policy_blas_single_thread();
	tr.threads = o->threads > 0 ? o->threads : 1;
	rc = policy_net_init(&tr.net, o->seed);
	if (rc < 0)
		return rc;
	if (o->init) {
		rc = policy_weights_load(&tr.net, NULL, o->init);
		if (rc < 0)
			goto out;
	}
	rc = policy_net_enable_training(&tr.net);
	if (rc < 0)
		goto out;
	rc = comps_build(&tr);
	if (rc < 0)
		goto out;
	rc = trainer_alloc(&tr);
	if (rc < 0)
		goto out;
	if (!o->no_teacher) {
		if (!o->quiet)
			fprintf(stderr, "climbing a teacher plan on each of %d compositions\n",
				tr.ncomps);
		rc = teachers_build(&tr);
		if (rc < 0)
			goto out;
	}

	window = o->episodes / 10 > 0 ? o->episodes / 10 : 1;
	policy_rng_seed(&pick, o->seed, 0xba7c4);
	if (tr.teachers > 0 && o->imitation_steps > 0) {
		if (!o->quiet)
			fprintf(stderr, "imitating %d teacher plans for %ld updates\n",
				tr.teachers, o->imitation_steps);
		rc = imitate_teachers(&tr, &pick, o->imitation_steps, res);
		if (rc < 0)
			goto out;
	}
	for (tr.update = 0; tr.update < o->episodes; tr.update++) {
		int nb = o->batch < tr.ncomps ? o->batch : tr.ncomps;
		int ng = nb * o->group, counted = 0;
		double frac = o->episodes > 1 ?
			(double)tr.update / (o->episodes - 1) : 1.0;
		double mean = 0.0;

		tr.force_p = FORCE_START + (FORCE_END - FORCE_START) * frac;
		batch_draw(&tr, &pick, nb);
		planner_parallel(rollout_task, &tr, ng, tr.threads);
		for (int i = 0; i < ng; i++) {
			if (tr.trace_rc[i] == -ENOMEM) {
				rc = -ENOMEM;
				goto out;
			}
			if (tr.trace_rc[i] < 0)
				continue;
			mean += tr.traces[i].ret;
			counted++;
			if (tr.traces[i].ret > best)
				best = tr.traces[i].ret;
		}
		mean = counted ? mean / counted : 0.0;
		if (tr.update < window) {
			sum_first += mean;
			n_first++;
		}
		if (tr.update >= o->episodes - window) {
			sum_last += mean;
			n_last++;
		}
		advantages(&tr, nb);
		rc = sil_update(&tr, nb);
		if (rc < 0)
			goto out;
		tr.sil_now = tr.update % SIL_EVERY == SIL_EVERY - 1;
		if (tr.sil_now && !o->no_expert) {
			rc = expert_update(&tr, nb);
			if (rc < 0)
				goto out;
		}
		for (int e = 0; e < PPO_EPOCHS; e++) {
			planner_parallel(grad_task, &tr, nb, tr.threads);
			pcgrad_combine(&tr, nb);
			policy_net_adam(&tr.net, LEARNING_RATE, 0.9f, 0.999f, 1e-8f,
					0.0f);
			tr.sil_now = false;	/* imitate once per interval */
		}
		progress(&tr, tr.update + 1, mean, best, t0);
		if (o->checkpoint_every > 0 && o->out &&
		    (tr.update + 1) % o->checkpoint_every == 0 &&
		    tr.update + 1 < o->episodes) {
			rc = save(&tr, tr.update + 1);
			if (rc < 0)
				goto out;
		}
	}
	if (o->out) {
		rc = save(&tr, o->episodes);
		if (rc < 0)
			goto out;
	}
	/* after the save: a report that fails loses no training */
	if (o->fit_report) {
		rc = fit_report(&tr, res);
		if (rc < 0)
			goto out;
	}
	res->first_mean = n_first ? sum_first / n_first : 0.0;
	res->last_mean = n_last ? sum_last / n_last : 0.0;
	res->best = best;
	res->elapsed_s = ar_now() - t0;
	res->distilled = tr.expert_kept;
	res->teachers = tr.teachers;
	rc = 0;
out:
	trainer_fini(&tr);
	return rc;
}
