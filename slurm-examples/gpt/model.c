/*
 * model.c - one micro-batch through this rank's stage: the embedding, the
 * blocks and the head of GPT-2 over the TP units the rank holds, with the
 * tensor-parallel collectives of its stage.
 *
 * Shapes: B samples of T tokens, N = B * T rows, C wide; this rank holds
 * nu units (Cu attention columns, hu heads, Fu MLP columns, Vu vocabulary
 * rows each).  Per block:
 *
 *   x (N,C) -ln1-> ln1 -[unit j: QKV_j]-> qkv_j (N,3Cu) -attention-> atty_j (N,Cu)
 *     -[sum_j atty_j . Wproj_j^T, all-reduce]-> + bias -> + x = res2
 *   res2 -ln2-> ln2 -[unit j: FC_j]-> fc_j (N,Fu) -gelu-> fcg_j
 *     -[sum_j fcg_j . Wfcproj_j^T, all-reduce]-> + bias -> + res2 = x'
 *
 * Column-parallel products (QKV, FC, the vocabulary) are one GEMM per
 * unit; row-parallel ones (the projections, and the input gradients of the
 * column-parallel ones) give one FP32 partial per unit, summed in FP64 in
 * unit order and then over the TP group.  A sum of four FP32 numbers in
 * FP64 is exact unless their exponents span more than 26 bits, so the
 * result, rounded once to FP32, does not depend on how the units are
 * spread over ranks (docs/gpt.md).
 */
#include "config.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"

struct block_acts {
	float *ln1, *ln1_mean, *ln1_rstd;
	float *qkv;			/* nu x (N, 3 Cu) */
	float *att;			/* nu x (B, hu, T, T) */
	float *atty;			/* nu x (N, Cu) */
	float *res2;
	float *ln2, *ln2_mean, *ln2_rstd;
	float *fc, *fcg;		/* nu x (N, Fu) */
};

struct gpt_acts {
	long step;
	int sample0, B;
	int *tokens, *targets;		/* (B, T) */
	float *x;			/* (nblocks + 1) x (N, C) */
	struct block_acts *blk;		/* [nblocks] */
	float *lnf, *lnf_mean, *lnf_rstd;
	float *probs;			/* nu x (N, Vu) */
	double loss;			/* sum over the micro-batch's tokens */
	float *dsend;			/* (N, C): gradient for the previous stage */
	float *mem;
};

struct gpt_scratch {
	float *part;			/* (N, C) one unit's partial product */
	double *acc;			/* (N, C) the units' FP64 sum */
	float *wscr;			/* one unit's weight gradient in FP32 */
	float *dx, *dx2, *dln;		/* (N, C) */
	float *dqkv;			/* (N, 3 Cu) */
	float *datty;			/* (N, Cu) */
	float *dfc, *dfcg;		/* (N, Fu) */
	float *dlogits;			/* (N, Vu) */
	float *rowmax;			/* (N) */
	float *attscr;			/* 2 T */
	double *rowsum;			/* 2 N: sum of exp and target logit */
	void *mem;
};

/* Blocks this rank holds, and the layer of the first. */
static int local_blocks(const struct gpt_trainer *tr, int *first_block)
{
	const struct gpt_config *c = &tr->job->cfg;
	int lo = tr->shard.first < 1 ? 1 : tr->shard.first;
	int hi = tr->shard.last > c->blocks ? c->blocks : tr->shard.last;

	*first_block = lo;
	return hi >= lo ? hi - lo + 1 : 0;
}

static bool has_embed(const struct gpt_trainer *tr)
{
	return gpt_shard_has_layer(&tr->shard, 0);
}

static bool has_head(const struct gpt_trainer *tr)
{
	return gpt_shard_has_layer(&tr->shard, tr->job->cfg.nlayers - 1);
}

/* A bump allocator over one block of floats (every size is in floats). */
struct carve {
	float *base;
	size_t used;
};

static float *carve(struct carve *cv, size_t n)
{
	float *p = cv->base ? cv->base + cv->used : NULL;

	cv->used += (n + 15) & ~(size_t)15;	/* 64-byte aligned */
	return p;
}

static size_t acts_layout(const struct gpt_trainer *tr, struct gpt_acts *a,
			  float *base)
{
	const struct gpt_config *c = &tr->job->cfg;
	struct carve cv = { base, 0 };
	size_t N = (size_t)tr->gp->mbs * c->T, nu = tr->shard.nu;
	int fb, nb = local_blocks(tr, &fb);

	a->tokens = (int *)carve(&cv, N);
	a->targets = (int *)carve(&cv, N);
	a->x = carve(&cv, (nb + 1) * N * c->C);
	for (int k = 0; k < nb; k++) {
		struct block_acts *b = &a->blk[k];

		b->ln1 = carve(&cv, N * c->C);
		b->ln1_mean = carve(&cv, N);
		b->ln1_rstd = carve(&cv, N);
		b->qkv = carve(&cv, nu * N * 3 * c->Cu);
		b->att = carve(&cv, nu * tr->gp->mbs * c->hu * c->T * c->T);
		b->atty = carve(&cv, nu * N * c->Cu);
		b->res2 = carve(&cv, N * c->C);
		b->ln2 = carve(&cv, N * c->C);
		b->ln2_mean = carve(&cv, N);
		b->ln2_rstd = carve(&cv, N);
		b->fc = carve(&cv, nu * N * c->Fu);
		b->fcg = carve(&cv, nu * N * c->Fu);
	}
	if (has_head(tr)) {
		a->lnf = carve(&cv, N * c->C);
		a->lnf_mean = carve(&cv, N);
		a->lnf_rstd = carve(&cv, N);
		a->probs = carve(&cv, nu * N * c->Vu);
	}
	a->dsend = carve(&cv, N * c->C);
	return cv.used;
}

struct gpt_acts *gpt_acts_alloc(const struct gpt_trainer *tr, int nslots)
{
	int fb, nb = local_blocks(tr, &fb);
	struct gpt_acts *a = calloc(nslots, sizeof(*a));

	if (!a)
		return NULL;
	for (int s = 0; s < nslots; s++) {
		size_t n;

		a[s].blk = calloc(nb ? nb : 1, sizeof(*a[s].blk));
		if (!a[s].blk)
			goto fail;
		n = acts_layout(tr, &a[s], NULL);
		a[s].mem = aligned_alloc(64, n * sizeof(float));
		if (!a[s].mem)
			goto fail;
		acts_layout(tr, &a[s], a[s].mem);
	}
	return a;
fail:
	gpt_acts_free(a, nslots);
	return NULL;
}

void gpt_acts_free(struct gpt_acts *a, int nslots)
{
	for (int s = 0; a && s < nslots; s++) {
		free(a[s].blk);
		free(a[s].mem);
	}
	free(a);
}

struct gpt_acts *gpt_acts_slot(struct gpt_acts *a, int slot)
{
	return &a[slot];
}

float *gpt_acts_input(struct gpt_acts *a)
{
	return a->x;
}

float *gpt_acts_output(struct gpt_acts *a, const struct gpt_trainer *tr)
{
	int fb, nb = local_blocks(tr, &fb);

	return a->x + (size_t)nb * a->B * tr->job->cfg.T * tr->job->cfg.C;
}

float *gpt_acts_dinput(struct gpt_acts *a)
{
	return a->dsend;
}

double gpt_acts_loss(const struct gpt_acts *a)
{
	return a->loss;
}

int *gpt_acts_tokens(struct gpt_acts *a)
{
	return a->tokens;
}

float *gpt_acts_probs(struct gpt_acts *a)
{
	return a->probs;
}

static size_t scratch_layout(const struct gpt_trainer *tr,
			     struct gpt_scratch *s, float *base)
{
	const struct gpt_config *c = &tr->job->cfg;
	struct carve cv = { base, 0 };
	size_t N = (size_t)tr->gp->mbs * c->T;
	size_t w = (size_t)3 * c->Cu * c->C;

	if ((size_t)c->Fu * c->C > w)
		w = (size_t)c->Fu * c->C;
	if ((size_t)c->Vu * c->C > w)
		w = (size_t)c->Vu * c->C;
	s->part = carve(&cv, N * c->C);
	s->acc = (double *)carve(&cv, 2 * N * c->C);
	s->wscr = carve(&cv, w);
	s->dx = carve(&cv, N * c->C);
	s->dx2 = carve(&cv, N * c->C);
	s->dln = carve(&cv, N * c->C);
	s->dqkv = carve(&cv, N * 3 * c->Cu);
	s->datty = carve(&cv, N * c->Cu);
	s->dfc = carve(&cv, N * c->Fu);
	s->dfcg = carve(&cv, N * c->Fu);
	s->dlogits = carve(&cv, N * c->Vu);
	s->rowmax = carve(&cv, N);
	s->attscr = carve(&cv, 2 * c->T);
	s->rowsum = (double *)carve(&cv, 4 * N);
	return cv.used;
}

void *gpt_scratch_alloc(const struct gpt_trainer *tr)
{
	struct gpt_scratch *s = calloc(1, sizeof(*s));
	size_t n;

	if (!s)
		return NULL;
	n = scratch_layout(tr, s, NULL);
	s->mem = aligned_alloc(64, n * sizeof(float));
	if (!s->mem) {
		free(s);
		return NULL;
	}
	scratch_layout(tr, s, s->mem);
	return s;
}

void gpt_scratch_free(void *scratch)
{
	struct gpt_scratch *s = scratch;

	if (s)
		free(s->mem);
	free(s);
}

void gpt_acts_set_batch(struct gpt_acts *a, const struct gpt_trainer *tr,
			const struct gpt_data *data, long step, int sample0,
			int B)
{
	int T = tr->job->cfg.T;

	a->step = step;
	a->sample0 = sample0;
	a->B = B;
	a->loss = 0;
	for (int b = 0; b < B; b++)
		gpt_data_sample(data, tr->seed, step, sample0 + b, T,
				a->tokens + (size_t)b * T,
				a->targets + (size_t)b * T);
}

/* ---------------------------------------------------------------------
 * Tensor-parallel sums.
 * ------------------------------------------------------------------- */

static void tp_sum(struct gpt_trainer *tr, double *buf, size_t n)
{
	if (tr->tp > 1)
		gpt_allreduce(tr->tp_comm, buf, n, GPT_DOUBLE, GPT_SUM);
}

static void acc_add(double *acc, const float *part, size_t n)
{
	for (size_t i = 0; i < n; i++)
		acc[i] += part[i];
}

/* out (N, C) = the TP group's FP64 sum in @acc, plus @bias, rounded once. */
static void acc_finish(struct gpt_trainer *tr, float *out, double *acc,
		       const float *bias, int N, int C)
{
	tp_sum(tr, acc, (size_t)N * C);
	for (int n = 0; n < N; n++)
		for (int i = 0; i < C; i++)
			out[(size_t)n * C + i] =
				(float)(acc[(size_t)n * C + i] +
					(bias ? bias[i] : 0.0));
}

/* db (C) += column sums of d (N, C), in row order. */
static void colsum_add(double *db, const float *d, int N, int C)
{
	for (int n = 0; n < N; n++)
		for (int i = 0; i < C; i++)
			db[i] += d[(size_t)n * C + i];
}

/*
 * Row-parallel product: out (N, C) = sum over the units j of
 * inp_j (N, IC) . W_j (C, IC)^T, plus bias.  The units' inputs lie @stride
 * floats apart.
 */
static void row_parallel_forward(struct gpt_trainer *tr, float *out,
				 const float *inp, size_t stride, int layer,
				 enum gpt_param w, const float *bias, int N,
				 int IC)
{
	const struct gpt_config *c = &tr->job->cfg;
	struct gpt_scratch *s = tr->scratch;
	size_t n = (size_t)N * c->C;

	memset(s->acc, 0, n * sizeof(double));
	for (int j = 0; j < tr->shard.nu; j++) {
		matmul_forward(s->part, inp + j * stride, IC,
			       gpt_weight(&tr->shard, c, layer, j, w), NULL,
			       N, IC, c->C);
		acc_add(s->acc, s->part, n);
	}
	acc_finish(tr, out, s->acc, bias, N, c->C);
}

/* ---------------------------------------------------------------------
 * Embedding (layer 0): the vocabulary is split by units, so a token's row
 * lives on one rank; the others add zeros, which is exact.
 * ------------------------------------------------------------------- */

static void embed_forward(struct gpt_trainer *tr, struct gpt_acts *a)
{
	const struct gpt_config *c = &tr->job->cfg;
	const struct gpt_shard *sh = &tr->shard;
	int N = a->B * c->T, lo = sh->u0 * c->Vu, hi = lo + sh->nu * c->Vu;
	const float *wpe = gpt_rep(sh, c, 0, P_WPE);
	struct gpt_scratch *s = tr->scratch;
	float *x = a->x;

	for (int n = 0; n < N; n++) {
		int tok = a->tokens[n];
		float *row = x + (size_t)n * c->C;

		if (tok >= lo && tok < hi) {
			int j = (tok - lo) / c->Vu, r = (tok - lo) % c->Vu;

			memcpy(row, gpt_weight(sh, c, 0, j, P_WTE) +
					    (size_t)r * c->C,
			       c->C * sizeof(float));
		} else {
			memset(row, 0, c->C * sizeof(float));
		}
	}
	if (tr->tp > 1) {
		for (size_t i = 0; i < (size_t)N * c->C; i++)
			s->acc[i] = x[i];
		tp_sum(tr, s->acc, (size_t)N * c->C);
		for (size_t i = 0; i < (size_t)N * c->C; i++)
			x[i] = (float)s->acc[i];
	}
	for (int n = 0; n < N; n++) {
		const float *pos = wpe + (size_t)(n % c->T) * c->C;

		for (int i = 0; i < c->C; i++)
			x[(size_t)n * c->C + i] += pos[i];
	}
}

static void embed_backward(struct gpt_trainer *tr, struct gpt_acts *a,
			   const float *dx)
{
	const struct gpt_config *c = &tr->job->cfg;
	const struct gpt_shard *sh = &tr->shard;
	int N = a->B * c->T, lo = sh->u0 * c->Vu, hi = lo + sh->nu * c->Vu;
	double *dwpe = gpt_rep_grad(sh, c, 0, P_WPE);

	for (int n = 0; n < N; n++) {
		const float *d = dx + (size_t)n * c->C;
		double *dp = dwpe + (size_t)(n % c->T) * c->C;
		int tok = a->tokens[n];

		for (int i = 0; i < c->C; i++)
			dp[i] += d[i];
		if (tok >= lo && tok < hi) {
			int j = (tok - lo) / c->Vu, r = (tok - lo) % c->Vu;
			double *dw = gpt_grad(sh, c, 0, j, P_WTE) +
				     (size_t)r * c->C;

			for (int i = 0; i < c->C; i++)
				dw[i] += d[i];
		}
	}
}

/* ---------------------------------------------------------------------
 * A transformer block.
 * ------------------------------------------------------------------- */

static void block_forward(struct gpt_trainer *tr, struct gpt_acts *a,
			  int layer, struct block_acts *b, const float *x,
			  float *out)
{
	const struct gpt_config *c = &tr->job->cfg;
	const struct gpt_shard *sh = &tr->shard;
	int B = a->B, T = c->T, C = c->C, N = B * T;
	size_t qs = (size_t)N * 3 * c->Cu, ys = (size_t)N * c->Cu;
	size_t as = (size_t)B * c->hu * T * T, fs = (size_t)N * c->Fu;
	float *y = tr->scratch ? ((struct gpt_scratch *)tr->scratch)->dx2 : NULL;

	layernorm_forward(b->ln1, b->ln1_mean, b->ln1_rstd, x,
			  gpt_rep(sh, c, layer, P_LN1W),
			  gpt_rep(sh, c, layer, P_LN1B), N, C);
	for (int j = 0; j < sh->nu; j++) {
		matmul_forward(b->qkv + j * qs, b->ln1, C,
			       gpt_weight(sh, c, layer, j, P_QKVW),
			       gpt_weight(sh, c, layer, j, P_QKVB), N, C,
			       3 * c->Cu);
		attention_forward(b->atty + j * ys, b->att + j * as,
				  b->qkv + j * qs, B, T, c->Cu, c->hu);
	}
	row_parallel_forward(tr, y, b->atty, ys, layer, P_ATTPROJW,
			     gpt_rep(sh, c, layer, P_ATTPROJB), N, c->Cu);
	residual_forward(b->res2, x, y, (size_t)N * C);

	layernorm_forward(b->ln2, b->ln2_mean, b->ln2_rstd, b->res2,
			  gpt_rep(sh, c, layer, P_LN2W),
			  gpt_rep(sh, c, layer, P_LN2B), N, C);
	for (int j = 0; j < sh->nu; j++) {
		matmul_forward(b->fc + j * fs, b->ln2, C,
			       gpt_weight(sh, c, layer, j, P_FCW),
			       gpt_weight(sh, c, layer, j, P_FCB), N, C, c->Fu);
		gelu_forward(b->fcg + j * fs, b->fc + j * fs, fs);
	}
	row_parallel_forward(tr, y, b->fcg, fs, layer, P_FCPROJW,
			     gpt_rep(sh, c, layer, P_FCPROJB), N, c->Fu);
	residual_forward(out, b->res2, y, (size_t)N * C);
}

/* dx (N, C): in, the gradient of the block's output; out, of its input. */
static void block_backward(struct gpt_trainer *tr, struct gpt_acts *a,
			   int layer, struct block_acts *b, const float *x,
			   float *dx)
{
	const struct gpt_config *c = &tr->job->cfg;
	const struct gpt_shard *sh = &tr->shard;
	struct gpt_scratch *s = tr->scratch;
	int B = a->B, T = c->T, C = c->C, N = B * T;
	size_t qs = (size_t)N * 3 * c->Cu, ys = (size_t)N * c->Cu;
	size_t as = (size_t)B * c->hu * T * T, fs = (size_t)N * c->Fu;
	size_t nc = (size_t)N * C;

	/* x' = res2 + proj(gelu(fc(ln2(res2)))): dres2 = dx + ... */
	colsum_add(gpt_rep_grad(sh, c, layer, P_FCPROJB), dx, N, C);
	memset(s->acc, 0, nc * sizeof(double));
	for (int j = 0; j < sh->nu; j++) {
		matmul_backward_weight(gpt_grad(sh, c, layer, j, P_FCPROJW),
				       NULL, s->wscr, dx, b->fcg + j * fs,
				       c->Fu, N, c->Fu, C);
		matmul_backward_input(s->dfcg, dx,
				      gpt_weight(sh, c, layer, j, P_FCPROJW),
				      N, c->Fu, C);
		gelu_backward(s->dfc, b->fc + j * fs, s->dfcg, fs);
		matmul_backward_weight(gpt_grad(sh, c, layer, j, P_FCW),
				       gpt_grad(sh, c, layer, j, P_FCB),
				       s->wscr, s->dfc, b->ln2, C, N, C, c->Fu);
		matmul_backward_input(s->part, s->dfc,
				      gpt_weight(sh, c, layer, j, P_FCW), N, C,
				      c->Fu);
		acc_add(s->acc, s->part, nc);
	}
	acc_finish(tr, s->dln, s->acc, NULL, N, C);
	layernorm_backward(dx, gpt_rep_grad(sh, c, layer, P_LN2W),
			   gpt_rep_grad(sh, c, layer, P_LN2B), s->dln, b->res2,
			   gpt_rep(sh, c, layer, P_LN2W), b->ln2_mean,
			   b->ln2_rstd, N, C);

	/* res2 = x + proj(attention(qkv(ln1(x)))): dx += ... */
	colsum_add(gpt_rep_grad(sh, c, layer, P_ATTPROJB), dx, N, C);
	memset(s->acc, 0, nc * sizeof(double));
	for (int j = 0; j < sh->nu; j++) {
		matmul_backward_weight(gpt_grad(sh, c, layer, j, P_ATTPROJW),
				       NULL, s->wscr, dx, b->atty + j * ys,
				       c->Cu, N, c->Cu, C);
		matmul_backward_input(s->datty, dx,
				      gpt_weight(sh, c, layer, j, P_ATTPROJW),
				      N, c->Cu, C);
		attention_backward(s->dqkv, s->attscr, s->datty,
				   b->qkv + j * qs, b->att + j * as, B, T,
				   c->Cu, c->hu);
		matmul_backward_weight(gpt_grad(sh, c, layer, j, P_QKVW),
				       gpt_grad(sh, c, layer, j, P_QKVB),
				       s->wscr, s->dqkv, b->ln1, C, N, C,
				       3 * c->Cu);
		matmul_backward_input(s->part, s->dqkv,
				      gpt_weight(sh, c, layer, j, P_QKVW), N, C,
				      3 * c->Cu);
		acc_add(s->acc, s->part, nc);
	}
	acc_finish(tr, s->dln, s->acc, NULL, N, C);
	layernorm_backward(dx, gpt_rep_grad(sh, c, layer, P_LN1W),
			   gpt_rep_grad(sh, c, layer, P_LN1B), s->dln, x,
			   gpt_rep(sh, c, layer, P_LN1W), b->ln1_mean,
			   b->ln1_rstd, N, C);
}

/* ---------------------------------------------------------------------
 * The head: final LayerNorm, logits against this rank's vocabulary units
 * and the cross-entropy over the whole vocabulary (a max and two sums
 * over the TP group).
 * ------------------------------------------------------------------- */

static void head_forward(struct gpt_trainer *tr, struct gpt_acts *a,
			 const float *x)
{
	const struct gpt_config *c = &tr->job->cfg;
	const struct gpt_shard *sh = &tr->shard;
	struct gpt_scratch *s = tr->scratch;
	int N = a->B * c->T, C = c->C, Vu = c->Vu, H = c->nlayers - 1;
	int lo = sh->u0 * Vu, hi = lo + sh->nu * Vu;
	size_t ps = (size_t)N * Vu;

	layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, x,
			  gpt_rep(sh, c, H, P_LNFW), gpt_rep(sh, c, H, P_LNFB),
			  N, C);
	for (int j = 0; j < sh->nu; j++)
		matmul_forward(a->probs + j * ps, a->lnf, C,
			       gpt_weight(sh, c, H, j, P_HEAD_WTE), NULL, N, C,
			       Vu);
	for (int n = 0; n < N; n++) {
		float m = -FLT_MAX;

		for (int j = 0; j < sh->nu; j++)
			for (int v = 0; v < Vu; v++)
				m = fmaxf(m, a->probs[j * ps + (size_t)n * Vu + v]);
		s->rowmax[n] = m;
	}
	if (tr->tp > 1)
		gpt_allreduce(tr->tp_comm, s->rowmax, (size_t)N, GPT_FLOAT, GPT_MAX);
	/* rowsum[2n]: sum of exp; rowsum[2n + 1]: the target's logit */
	for (int n = 0; n < N; n++) {
		int tgt = a->targets[n];
		double sum = 0, tl = 0;

		for (int j = 0; j < sh->nu; j++) {
			float *l = a->probs + j * ps + (size_t)n * Vu;
			double unit_sum = 0;

			for (int v = 0; v < Vu; v++) {
				if (lo + j * Vu + v == tgt)
					tl = l[v];
				l[v] = expf(l[v] - s->rowmax[n]);
				unit_sum += l[v];
			}
			sum += unit_sum;
		}
		s->rowsum[2 * n] = sum;
		s->rowsum[2 * n + 1] = tgt >= lo && tgt < hi ? tl : 0.0;
	}
	tp_sum(tr, s->rowsum, 2 * (size_t)N);
	a->loss = 0;
	for (int n = 0; n < N; n++) {
		double sum = s->rowsum[2 * n];

		a->loss += log(sum) + s->rowmax[n] - s->rowsum[2 * n + 1];
		for (int j = 0; j < sh->nu; j++) {
			float *p = a->probs + j * ps + (size_t)n * Vu;

			for (int v = 0; v < Vu; v++)
				p[v] = (float)(p[v] / sum);
		}
	}
}

/* dx (N, C) = the gradient of the head's input. */
static void head_backward(struct gpt_trainer *tr, struct gpt_acts *a,
			  const float *x, float *dx)
{
	const struct gpt_config *c = &tr->job->cfg;
	const struct gpt_shard *sh = &tr->shard;
	struct gpt_scratch *s = tr->scratch;
	int N = a->B * c->T, C = c->C, Vu = c->Vu, H = c->nlayers - 1;
	int lo = sh->u0 * Vu;
	size_t ps = (size_t)N * Vu, nc = (size_t)N * C;
	/* the loss is the mean over every token of the global batch */
	double dloss = 1.0 / ((double)tr->gp->global_batch * c->T);

	memset(s->acc, 0, nc * sizeof(double));
	for (int j = 0; j < sh->nu; j++) {
		for (int n = 0; n < N; n++) {
			const float *p = a->probs + j * ps + (size_t)n * Vu;
			float *d = s->dlogits + (size_t)n * Vu;

			for (int v = 0; v < Vu; v++) {
				double onehot = lo + j * Vu + v == a->targets[n];

				d[v] = (float)((p[v] - onehot) * dloss);
			}
		}
		matmul_backward_weight(gpt_grad(sh, c, H, j, P_HEAD_WTE), NULL,
				       s->wscr, s->dlogits, a->lnf, C, N, C, Vu);
		matmul_backward_input(s->part, s->dlogits,
				      gpt_weight(sh, c, H, j, P_HEAD_WTE), N, C,
				      Vu);
		acc_add(s->acc, s->part, nc);
	}
	acc_finish(tr, s->dln, s->acc, NULL, N, C);
	memset(dx, 0, nc * sizeof(float));
	layernorm_backward(dx, gpt_rep_grad(sh, c, H, P_LNFW),
			   gpt_rep_grad(sh, c, H, P_LNFB), s->dln, x,
			   gpt_rep(sh, c, H, P_LNFW), a->lnf_mean, a->lnf_rstd,
			   N, C);
}

/* ---------------------------------------------------------------------
 * The stage.
 * ------------------------------------------------------------------- */

void gpt_stage_forward(struct gpt_trainer *tr, struct gpt_acts *a)
{
	const struct gpt_config *c = &tr->job->cfg;
	size_t nc = (size_t)a->B * c->T * c->C;
	int fb, nb = local_blocks(tr, &fb);

	if (has_embed(tr))
		embed_forward(tr, a);
	for (int k = 0; k < nb; k++)
		block_forward(tr, a, fb + k, &a->blk[k], a->x + k * nc,
			      a->x + (k + 1) * nc);
	if (has_head(tr))
		head_forward(tr, a, a->x + nb * nc);
}

void gpt_stage_backward(struct gpt_trainer *tr, struct gpt_acts *a,
			const float *dout)
{
	const struct gpt_config *c = &tr->job->cfg;
	struct gpt_scratch *s = tr->scratch;
	size_t nc = (size_t)a->B * c->T * c->C;
	int fb, nb = local_blocks(tr, &fb);

	if (has_head(tr))
		head_backward(tr, a, a->x + nb * nc, s->dx);
	else
		memcpy(s->dx, dout, nc * sizeof(float));
	for (int k = nb - 1; k >= 0; k--)
		block_backward(tr, a, fb + k, &a->blk[k], a->x + k * nc, s->dx);
	if (has_embed(tr))
		embed_backward(tr, a, s->dx);
	else
		memcpy(a->dsend, s->dx, nc * sizeof(float));
}
