/*
 * net.c - the policy network: a FiLM-conditioned MLP backbone and three
 * heads (depth, device, TP), forward and backward as readable pairs in the
 * manner of llm.c, matrix products through CBLAS, and Adam.
 *
 * Shapes: N decisions in a batch, SDIM = POLICY_STATE_DIM, HID = POLICY_HIDDEN,
 * HW = POLICY_HEAD, FHID = POLICY_FILM_HIDDEN, FOUT = POLICY_FILM_OUT, R rows of
 * candidate inputs (DEPTH_CANDS per depth decision, SLOTS per device
 * decision, NUM_TP per TP decision).  Every head scores each candidate
 * from its own row, so a candidate is judged by its own features.
 *
 *   comp (N, COMP) --film1+relu--> film_h (N, FHID) --film2--> film (N, FOUT)
 *   x (N, SDIM) --bb1--> bb1 (N, HID) --FiLM(gamma1, beta1)+relu--> h1
 *            --bb2--> bb2 (N, HID) --FiLM(gamma2, beta2)+relu--> z (N, HID)
 *   depth:  [z ; one-hot d ; d's features] --l1--> pre (R, HW)
 *   device: [z ; slot features]             --l1--> pre
 *   TP:     [z ; slot ; TP features]        --l1--> pre
 *   each:   pre --FiLM+relu--> h --l2--> 1 score per candidate (depth, slot or degree)
 *
 * FiLM scales by (1 + gamma) so that a zero generator leaves a layer as it is.
 */
#define AR_INTERNAL 1
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "ar.h"
#include "arachne_private.h"

#define FHID POLICY_FILM_HIDDEN
#define HID POLICY_HIDDEN
#define HW POLICY_HEAD
#define FOUT POLICY_FILM_OUT
#define SDIM POLICY_STATE_DIM
#define MAXC POLICY_MAX_CANDS
#define MAXROWS POLICY_DEPTH_CANDS	/* candidate rows per decision, at most */
#define IN_STRIDE (POLICY_TP_IN > POLICY_DEPTH_IN ? POLICY_TP_IN : POLICY_DEPTH_IN)

/* Floats between the state vectors of consecutive decisions. */
#define DEC_STRIDE ((int)(sizeof(struct policy_decision) / sizeof(float)))

static const struct policy_tensor_info tensor_info[POLICY_NUM_TENSORS] = {
	[PW_FILM1_W] = { "film.0.weight", FHID, POLICY_COMP_FEATURES },
	[PW_FILM1_B] = { "film.0.bias", FHID, 1 },
	[PW_FILM2_W] = { "film.1.weight", FOUT, FHID },
	[PW_FILM2_B] = { "film.1.bias", FOUT, 1 },
	[PW_BB1_W] = { "backbone.0.weight", HID, SDIM },
	[PW_BB1_B] = { "backbone.0.bias", HID, 1 },
	[PW_BB2_W] = { "backbone.1.weight", HID, HID },
	[PW_BB2_B] = { "backbone.1.bias", HID, 1 },
	[PW_DEPTH1_W] = { "depth.0.weight", HW, POLICY_DEPTH_IN },
	[PW_DEPTH1_B] = { "depth.0.bias", HW, 1 },
	[PW_DEPTH2_W] = { "depth.1.weight", 1, HW },
	[PW_DEPTH2_B] = { "depth.1.bias", 1, 1 },
	[PW_DEV1_W] = { "device.0.weight", HW, POLICY_DEV_IN },
	[PW_DEV1_B] = { "device.0.bias", HW, 1 },
	[PW_DEV2_W] = { "device.1.weight", 1, HW },
	[PW_DEV2_B] = { "device.1.bias", 1, 1 },
	[PW_TP1_W] = { "tp.0.weight", HW, POLICY_TP_IN },
	[PW_TP1_B] = { "tp.0.bias", HW, 1 },
	[PW_TP2_W] = { "tp.1.weight", 1, HW },
	[PW_TP2_B] = { "tp.1.bias", 1, 1 },
};

/* Per head: its layers, input width and candidate rows per decision (one score each). */
static const struct {
	enum policy_tensor w1, b1, w2, b2;
	int in;
	int rows;
} head_info[POLICY_NUM_HEADS] = {
	[POLICY_HEAD_DEPTH] = { PW_DEPTH1_W, PW_DEPTH1_B, PW_DEPTH2_W, PW_DEPTH2_B,
				POLICY_DEPTH_IN, POLICY_DEPTH_CANDS },
	[POLICY_HEAD_DEVICE] = { PW_DEV1_W, PW_DEV1_B, PW_DEV2_W, PW_DEV2_B,
				 POLICY_DEV_IN, POLICY_SLOTS },
	[POLICY_HEAD_TP] = { PW_TP1_W, PW_TP1_B, PW_TP2_W, PW_TP2_B,
			     POLICY_TP_IN, POLICY_NUM_TP },
};

/* Offsets into one FiLM output row. */
static int film_backbone_off(int layer)
{
	return layer * 2 * HID;
}

static int film_head_off(enum policy_head head)
{
	return POLICY_BACKBONE_LAYERS * 2 * HID + head * 2 * HW;
}

const struct policy_tensor_info *policy_tensor_info(enum policy_tensor t)
{
	return &tensor_info[t];
}

int policy_head_cands(enum policy_head head)
{
	return head_info[head].rows;
}

float *policy_net_tensor(struct policy_net *net, enum policy_tensor t)
{
	return net->params + net->offset[t];
}

float *policy_net_grad(struct policy_net *net, enum policy_tensor t)
{
	return net->grads + net->offset[t];
}

/* ---------------------------------------------------------------------
 * Layers.
 * ------------------------------------------------------------------- */

/* out (N, OUT) = inp (N, IN; row stride ld) . w (OUT, IN)^T + b (OUT). */
static void linear_forward(float *out, const float *inp, int ld, const float *w,
			   const float *b, int N, int IN, int OUT)
{
	if (N == 0)
		return;
	for (int n = 0; n < N; n++)
		memcpy(out + (size_t)n * OUT, b, OUT * sizeof(*out));
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OUT, IN, 1.0f,
		    inp, ld, w, IN, 1.0f, out, OUT);
}

/*
 * Accumulates: dinp (N, IN; stride ldd) += dout . w, dw (OUT, IN) += dout^T . inp,
 * db (OUT) += column sums of dout.  @dinp may be NULL (an input layer).
 */
static void linear_backward(float *dinp, int ldd, float *dw, float *db,
			    const float *dout, const float *inp, int ld,
			    const float *w, int N, int IN, int OUT)
{
	if (N == 0)
		return;
	if (dinp)
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IN, OUT,
			    1.0f, dout, OUT, w, IN, 1.0f, dinp, ldd);
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OUT, IN, N, 1.0f,
		    dout, OUT, inp, ld, 1.0f, dw, IN);
	for (int n = 0; n < N; n++)
		for (int o = 0; o < OUT; o++)
			db[o] += dout[(size_t)n * OUT + o];
}

/* out (C) = relu((1 + gamma) * pre + beta). */
static void film_relu_forward(float *out, const float *pre, const float *gamma,
			      const float *beta, int C)
{
	for (int c = 0; c < C; c++) {
		float v = (1.0f + gamma[c]) * pre[c] + beta[c];

		out[c] = v > 0.0f ? v : 0.0f;
	}
}

/*
 * Backward of film_relu_forward for one row: dpre = dout * relu' * (1+gamma)
 * (overwrites), dgamma += dout * relu' * pre, dbeta += dout * relu'.
 */
static void film_relu_backward(float *dpre, float *dgamma, float *dbeta,
			       const float *dout, const float *out,
			       const float *pre, const float *gamma, int C)
{
	for (int c = 0; c < C; c++) {
		float g = out[c] > 0.0f ? dout[c] : 0.0f;

		dpre[c] = g * (1.0f + gamma[c]);
		dgamma[c] += g * pre[c];
		dbeta[c] += g;
	}
}

static void relu_forward(float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (x[i] < 0.0f)
			x[i] = 0.0f;
}

/* dx *= relu'(out): zero where the output was clamped. */
static void relu_backward(float *dx, const float *out, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (out[i] <= 0.0f)
			dx[i] = 0.0f;
}

/* ---------------------------------------------------------------------
 * Candidate rows of the heads.
 * ------------------------------------------------------------------- */

/* One TP candidate's own features: one-hot degree, then the slot's numbers at k. */
static void tp_candidate_features(float *out, const float *slot, int k)
{
	memset(out, 0, POLICY_TP_FEATURES * sizeof(*out));
	out[k] = 1.0f;
	out[POLICY_NUM_TP + 0] = slot[PT_ALPHA + k];
	out[POLICY_NUM_TP + 1] = slot[PT_PHI + k];
	out[POLICY_NUM_TP + 2] = slot[PT_MU + k];
	out[POLICY_NUM_TP + 3] = slot[PT_NODES + k];
	out[POLICY_NUM_TP + 4] = slot[PT_TP_OK + k];
	out[POLICY_NUM_TP + 5] = slot[PT_REPLICAS + k];
	out[POLICY_NUM_TP + 6] = slot[PT_SHRINK + k];
}

/* Fill the candidate rows of decision @d (backbone output @z) at @rows. */
static void head_rows_fill(float *rows, const struct policy_decision *d,
			   const float *z)
{
	const float *types = d->x + POLICY_TYPES_OFF;

	switch (d->head) {
	case POLICY_HEAD_DEPTH:
		/* Candidate 0 is STOP (its one-hot alone); candidate d a
		 * d-stage pipeline: the replicas it leaves and its features. */
		for (int c = 0; c < POLICY_DEPTH_CANDS; c++) {
			float *row = rows + (size_t)c * IN_STRIDE;

			memset(row, 0, POLICY_DEPTH_IN * sizeof(*row));
			memcpy(row, z, HID * sizeof(*row));
			row[HID + c] = 1.0f;
			if (c == 0)
				continue;
			row[HID + POLICY_DEPTH_CANDS] =
				d->x[POLICY_GLOBAL_OFF + PG_PER_DEPTH + c - 1];
			memcpy(row + HID + POLICY_DEPTH_CANDS + 1,
			       d->x + POLICY_DEPTHF_OFF + (c - 1) * POLICY_DEPTH_FEATURES,
			       POLICY_DEPTH_FEATURES * sizeof(*row));
		}
		break;
	case POLICY_HEAD_DEVICE:
		for (int c = 0; c < POLICY_SLOTS; c++) {
			float *row = rows + (size_t)c * IN_STRIDE;

			memcpy(row, z, HID * sizeof(*row));
			memcpy(row + HID, types + c * POLICY_TYPE_FEATURES,
			       POLICY_TYPE_FEATURES * sizeof(*row));
		}
		break;
	case POLICY_HEAD_TP: {
		const float *slot = types + d->slot * POLICY_TYPE_FEATURES;

		for (int k = 0; k < POLICY_NUM_TP; k++) {
			float *row = rows + (size_t)k * IN_STRIDE;

			memcpy(row, z, HID * sizeof(*row));
			memcpy(row + HID, slot, POLICY_TYPE_FEATURES * sizeof(*row));
			tp_candidate_features(row + HID + POLICY_TYPE_FEATURES, slot, k);
		}
		break;
	}
	}
}

/* ---------------------------------------------------------------------
 * Construction and destruction.
 * ------------------------------------------------------------------- */

int policy_net_init(struct policy_net *net, uint64_t seed)
{
	struct policy_rng rng;
	size_t total = 0;

	memset(net, 0, sizeof(*net));
	for (int t = 0; t < POLICY_NUM_TENSORS; t++) {
		net->offset[t] = total;
		total += (size_t)tensor_info[t].rows * tensor_info[t].cols;
	}
	net->num_params = total;
	net->params = calloc(total, sizeof(*net->params));
	if (!net->params)
		return -ENOMEM;

	/*
	 * He initialization for the ReLU layers; the FiLM generator's output
	 * layer and the score layers start small, so that an untrained policy
	 * is close to uniform and every composition starts from the same net.
	 */
	policy_rng_seed(&rng, seed, 0x6e6574);
	for (int t = 0; t < POLICY_NUM_TENSORS; t++) {
		const struct policy_tensor_info *ti = &tensor_info[t];
		float *p = net->params + net->offset[t];
		float scale;

		if (ti->cols == 1)
			continue;	/* biases start at zero */
		scale = sqrtf(2.0f / ti->cols);
		if (t == PW_FILM2_W)
			scale = 0.01f;
		else if (t == PW_DEPTH2_W || t == PW_DEV2_W || t == PW_TP2_W)
			scale = 0.1f / sqrtf(ti->cols);
		for (int i = 0; i < ti->rows * ti->cols; i++)
			p[i] = scale * policy_rng_normal(&rng);
	}
	return 0;
}

int policy_net_enable_training(struct policy_net *net)
{
	if (net->grads)
		return 0;
	net->grads = calloc(net->num_params, sizeof(*net->grads));
	net->adam_m = calloc(net->num_params, sizeof(*net->adam_m));
	net->adam_v = calloc(net->num_params, sizeof(*net->adam_v));
	if (!net->grads || !net->adam_m || !net->adam_v) {
		free(net->grads);
		free(net->adam_m);
		free(net->adam_v);
		net->grads = net->adam_m = net->adam_v = NULL;
		return -ENOMEM;
	}
	net->adam_t = 0;
	return 0;
}

void policy_net_fini(struct policy_net *net)
{
	if (!net)
		return;
	free(net->params);
	free(net->grads);
	free(net->adam_m);
	free(net->adam_v);
	memset(net, 0, sizeof(*net));
}

int policy_work_init(struct policy_work *w, int cap)
{
	size_t rows = (size_t)cap * MAXROWS;
	size_t n = (size_t)cap;
	/* forward and backward views share one arena; sizes in floats */
	size_t sizes[] = {
		n * FHID, n * FOUT, n * HID, n * HID, n * HID, n * HID,
		rows * IN_STRIDE, rows * HW, rows * HW, n * MAXC,
		n * FHID, n * FOUT, n * HID, n * HID, n * HID, n * HID,
		rows * IN_STRIDE, rows * HW, rows * HW, n * MAXC,
		rows, rows,
	};
	float **views[] = {
		&w->film_h, &w->film, &w->bb1, &w->h1, &w->bb2, &w->z,
		&w->head_in, &w->head_pre, &w->head_h, &w->logits,
		&w->d_film_h, &w->d_film, &w->d_bb1, &w->d_h1, &w->d_bb2, &w->d_z,
		&w->d_head_in, &w->d_head_pre, &w->d_head_h, &w->d_logits,
		&w->scores, &w->d_scores,
	};
	size_t total = 0;
	float *p;

	memset(w, 0, sizeof(*w));
	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++)
		total += sizes[i];
	w->memory = calloc(total, sizeof(*w->memory));
	w->row_dec = calloc(rows, sizeof(*w->row_dec));
	w->row_of = calloc(n, sizeof(*w->row_of));
	if (!w->memory || !w->row_dec || !w->row_of) {
		policy_work_fini(w);
		return -ENOMEM;
	}
	p = w->memory;
	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		*views[i] = p;
		p += sizes[i];
	}
	w->cap = cap;
	return 0;
}

void policy_work_fini(struct policy_work *w)
{
	if (!w)
		return;
	free(w->memory);
	free(w->row_dec);
	free(w->row_of);
	memset(w, 0, sizeof(*w));
}

/* ---------------------------------------------------------------------
 * Forward and backward.
 * ------------------------------------------------------------------- */

#define P(t) (net->params + net->offset[t])

void policy_net_forward(const struct policy_net *net, struct policy_work *w,
			const struct policy_decision *d, int n)
{
	const float *x = d[0].x;
	int row = 0;

	/* FiLM generator from the composition summary. */
	linear_forward(w->film_h, x + POLICY_COMP_OFF, DEC_STRIDE, P(PW_FILM1_W),
		       P(PW_FILM1_B), n, POLICY_COMP_FEATURES, FHID);
	relu_forward(w->film_h, (size_t)n * FHID);
	linear_forward(w->film, w->film_h, FHID, P(PW_FILM2_W), P(PW_FILM2_B), n,
		       FHID, FOUT);

	/* Backbone. */
	linear_forward(w->bb1, x, DEC_STRIDE, P(PW_BB1_W), P(PW_BB1_B), n, SDIM, HID);
	for (int r = 0; r < n; r++) {
		const float *film = w->film + (size_t)r * FOUT + film_backbone_off(0);

		film_relu_forward(w->h1 + (size_t)r * HID, w->bb1 + (size_t)r * HID,
				  film, film + HID, HID);
	}
	linear_forward(w->bb2, w->h1, HID, P(PW_BB2_W), P(PW_BB2_B), n, HID, HID);
	for (int r = 0; r < n; r++) {
		const float *film = w->film + (size_t)r * FOUT + film_backbone_off(1);

		film_relu_forward(w->z + (size_t)r * HID, w->bb2 + (size_t)r * HID,
				  film, film + HID, HID);
	}

	/* Heads: the candidate rows of each head lie contiguous. */
	for (int h = 0; h < POLICY_NUM_HEADS; h++) {
		int start = row, count;

		w->head_start[h] = start;
		for (int r = 0; r < n; r++) {
			if (d[r].head != h)
				continue;
			w->row_of[r] = row;
			head_rows_fill(w->head_in + (size_t)row * IN_STRIDE, &d[r],
				       w->z + (size_t)r * HID);
			for (int c = 0; c < head_info[h].rows; c++)
				w->row_dec[row + c] = r;
			row += head_info[h].rows;
		}
		count = row - start;
		w->head_count[h] = count;
		linear_forward(w->head_pre + (size_t)start * HW,
			       w->head_in + (size_t)start * IN_STRIDE, IN_STRIDE,
			       P(head_info[h].w1), P(head_info[h].b1), count,
			       head_info[h].in, HW);
		for (int i = start; i < row; i++) {
			const float *film = w->film + (size_t)w->row_dec[i] * FOUT +
					    film_head_off(h);

			film_relu_forward(w->head_h + (size_t)i * HW,
					  w->head_pre + (size_t)i * HW, film,
					  film + HW, HW);
		}
		/* One score per candidate row, scattered into its decision's logits. */
		linear_forward(w->scores + start, w->head_h + (size_t)start * HW, HW,
			       P(head_info[h].w2), P(head_info[h].b2), count, HW, 1);
		for (int i = start; i < row; i++) {
			int r = w->row_dec[i];

			w->logits[(size_t)r * MAXC + (i - w->row_of[r])] = w->scores[i];
		}
	}

	for (int r = 0; r < n; r++) {
		int nc = policy_head_cands(d[r].head);
		float *lg = w->logits + (size_t)r * MAXC;

		for (int c = 0; c < MAXC; c++)
			if (c >= nc || !(d[r].mask & (1u << c)))
				lg[c] = -INFINITY;
	}
}

#define G(t) (grads + net->offset[t])

void policy_net_backward(const struct policy_net *net, struct policy_work *w,
			 const struct policy_decision *d, int n, float *grads)
{
	const float *x = d[0].x;

	memset(w->d_film, 0, (size_t)n * FOUT * sizeof(float));
	memset(w->d_z, 0, (size_t)n * HID * sizeof(float));

	/* Heads, in reverse. */
	for (int h = POLICY_NUM_HEADS - 1; h >= 0; h--) {
		int start = w->head_start[h], count = w->head_count[h];

		if (count == 0)
			continue;
		memset(w->d_head_h + (size_t)start * HW, 0,
		       (size_t)count * HW * sizeof(float));
		for (int i = start; i < start + count; i++) {
			int r = w->row_dec[i];

			w->d_scores[i] = w->d_logits[(size_t)r * MAXC + (i - w->row_of[r])];
		}
		linear_backward(w->d_head_h + (size_t)start * HW, HW,
				G(head_info[h].w2), G(head_info[h].b2),
				w->d_scores + start, w->head_h + (size_t)start * HW,
				HW, P(head_info[h].w2), count, HW, 1);
		for (int i = start; i < start + count; i++) {
			int r = w->row_dec[i];
			const float *film = w->film + (size_t)r * FOUT + film_head_off(h);
			float *dfilm = w->d_film + (size_t)r * FOUT + film_head_off(h);

			film_relu_backward(w->d_head_pre + (size_t)i * HW, dfilm,
					   dfilm + HW, w->d_head_h + (size_t)i * HW,
					   w->head_h + (size_t)i * HW,
					   w->head_pre + (size_t)i * HW, film, HW);
		}
		memset(w->d_head_in + (size_t)start * IN_STRIDE, 0,
		       (size_t)count * IN_STRIDE * sizeof(float));
		linear_backward(w->d_head_in + (size_t)start * IN_STRIDE, IN_STRIDE,
				G(head_info[h].w1), G(head_info[h].b1),
				w->d_head_pre + (size_t)start * HW,
				w->head_in + (size_t)start * IN_STRIDE, IN_STRIDE,
				P(head_info[h].w1), count, head_info[h].in, HW);
		/* Only the z part of a candidate row depends on the weights. */
		for (int i = start; i < start + count; i++) {
			float *dz = w->d_z + (size_t)w->row_dec[i] * HID;
			const float *din = w->d_head_in + (size_t)i * IN_STRIDE;

			for (int c = 0; c < HID; c++)
				dz[c] += din[c];
		}
	}

	/* Backbone layer 2. */
	for (int r = 0; r < n; r++) {
		const float *film = w->film + (size_t)r * FOUT + film_backbone_off(1);
		float *dfilm = w->d_film + (size_t)r * FOUT + film_backbone_off(1);

		film_relu_backward(w->d_bb2 + (size_t)r * HID, dfilm, dfilm + HID,
				   w->d_z + (size_t)r * HID, w->z + (size_t)r * HID,
				   w->bb2 + (size_t)r * HID, film, HID);
	}
	memset(w->d_h1, 0, (size_t)n * HID * sizeof(float));
	linear_backward(w->d_h1, HID, G(PW_BB2_W), G(PW_BB2_B), w->d_bb2, w->h1, HID,
			P(PW_BB2_W), n, HID, HID);

	/* Backbone layer 1; the state is an input, so no dx. */
	for (int r = 0; r < n; r++) {
		const float *film = w->film + (size_t)r * FOUT + film_backbone_off(0);
		float *dfilm = w->d_film + (size_t)r * FOUT + film_backbone_off(0);

		film_relu_backward(w->d_bb1 + (size_t)r * HID, dfilm, dfilm + HID,
				   w->d_h1 + (size_t)r * HID, w->h1 + (size_t)r * HID,
				   w->bb1 + (size_t)r * HID, film, HID);
	}
	linear_backward(NULL, 0, G(PW_BB1_W), G(PW_BB1_B), w->d_bb1, x, DEC_STRIDE,
			P(PW_BB1_W), n, SDIM, HID);

	/* FiLM generator. */
	memset(w->d_film_h, 0, (size_t)n * FHID * sizeof(float));
	linear_backward(w->d_film_h, FHID, G(PW_FILM2_W), G(PW_FILM2_B), w->d_film,
			w->film_h, FHID, P(PW_FILM2_W), n, FHID, FOUT);
	relu_backward(w->d_film_h, w->film_h, (size_t)n * FHID);
	linear_backward(NULL, 0, G(PW_FILM1_W), G(PW_FILM1_B), w->d_film_h,
			x + POLICY_COMP_OFF, DEC_STRIDE, P(PW_FILM1_W), n,
			POLICY_COMP_FEATURES, FHID);
}

void policy_net_adam(struct policy_net *net, float lr, float beta1, float beta2,
		     float eps, float weight_decay)
{
	float c1, c2;

	net->adam_t++;
	c1 = 1.0f - powf(beta1, (float)net->adam_t);
	c2 = 1.0f - powf(beta2, (float)net->adam_t);
	for (size_t i = 0; i < net->num_params; i++) {
		float g = net->grads[i];
		float m = beta1 * net->adam_m[i] + (1.0f - beta1) * g;
		float v = beta2 * net->adam_v[i] + (1.0f - beta2) * g * g;

		net->adam_m[i] = m;
		net->adam_v[i] = v;
		net->params[i] -= lr * ((m / c1) / (sqrtf(v / c2) + eps) +
					weight_decay * net->params[i]);
	}
}

void policy_log_softmax(const float *logits, uint32_t mask, int ncand,
			float *logp)
{
	float max = -INFINITY, sum = 0.0f, lse;

	for (int c = 0; c < ncand; c++)
		if ((mask & (1u << c)) && logits[c] > max)
			max = logits[c];
	for (int c = 0; c < ncand; c++)
		if (mask & (1u << c))
			sum += expf(logits[c] - max);
	lse = max + logf(sum);
	for (int c = 0; c < ncand; c++)
		logp[c] = (mask & (1u << c)) ? logits[c] - lse : -INFINITY;
}

void policy_blas_single_thread(void)
{
	/*
	 * The products here are small and our callers run one rollout or one
	 * composition per thread; OpenBLAS threads below that only contend.
	 */
#ifdef OPENBLAS_VERSION
	openblas_set_num_threads(1);
#endif
}
