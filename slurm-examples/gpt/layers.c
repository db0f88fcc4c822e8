/*
 * layers.c - the layers of arachne-gpt, forward and backward as pairs, in
 * the manner of llm.c's train_gpt2.c.  Pure arithmetic: no MPI, no
 * knowledge of plans.  Matrix products go through CBLAS.
 *
 * Shapes: B samples of T tokens, N = B * T rows; C the model width; a
 * TP unit holds Cu = C / U columns of attention (hu heads of hd), Fu = F / U
 * of the MLP and Vu = V / U rows of the vocabulary (gpt.h).
 *
 * Summation order.  Every forward result depends only on its own row and
 * the weights, and every weight gradient is one product over the N rows
 * of one micro-batch, accumulated into FP64: so a row computes the same
 * bits whatever else shares its micro-batch, and the plan only decides
 * which process adds which exact FP64 terms (docs/gpt.md).
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include <cblas.h>

#include "gpt.h"

#define LN_EPS 1e-5f

/* out (N, C) = (inp - mean) * rstd * w + b; mean, rstd (N) kept. */
void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
		       const float *w, const float *b, int N, int C)
{
	for (int n = 0; n < N; n++) {
		const float *x = inp + (size_t)n * C;
		float *o = out + (size_t)n * C;
		float m = 0.0f, v = 0.0f, s;

		for (int i = 0; i < C; i++)
			m += x[i];
		m /= C;
		for (int i = 0; i < C; i++)
			v += (x[i] - m) * (x[i] - m);
		v /= C;
		s = 1.0f / sqrtf(v + LN_EPS);
		for (int i = 0; i < C; i++)
			o[i] = (x[i] - m) * s * w[i] + b[i];
		mean[n] = m;
		rstd[n] = s;
	}
}

/* dinp (N, C) += ...; dw, db (C) += ... in FP64. */
void layernorm_backward(float *dinp, double *dw, double *db, const float *dout,
			const float *inp, const float *w, const float *mean,
			const float *rstd, int N, int C)
{
	for (int n = 0; n < N; n++) {
		const float *x = inp + (size_t)n * C;
		const float *d = dout + (size_t)n * C;
		float *dx = dinp + (size_t)n * C;
		float m = mean[n], s = rstd[n];
		float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;

		for (int i = 0; i < C; i++) {
			float norm = (x[i] - m) * s;
			float dnorm = w[i] * d[i];

			dnorm_mean += dnorm;
			dnorm_norm_mean += dnorm * norm;
		}
		dnorm_mean /= C;
		dnorm_norm_mean /= C;
		for (int i = 0; i < C; i++) {
			float norm = (x[i] - m) * s;
			float dnorm = w[i] * d[i];

			db[i] += d[i];
			dw[i] += norm * d[i];
			dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
		}
	}
}

/* out (N, OC) = inp (N, IC; row stride ldi) . w (OC, IC)^T + b (OC); b may be NULL. */
void matmul_forward(float *out, const float *inp, int ldi, const float *w,
		    const float *b, int N, int IC, int OC)
{
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f,
		    inp, ldi, w, IC, 0.0f, out, OC);
	if (!b)
		return;
	for (int n = 0; n < N; n++)
		for (int o = 0; o < OC; o++)
			out[(size_t)n * OC + o] += b[o];
}

/*
 * dw (OC, IC) += dout (N, OC)^T . inp (N, IC; stride ldi) and db (OC) += the
 * column sums of dout, both in FP64; the product is formed in FP32 in
 * @scratch (OC * IC floats) first.  db may be NULL.
 */
void matmul_backward_weight(double *dw, double *db, float *scratch,
			    const float *dout, const float *inp, int ldi,
			    int N, int IC, int OC)
{
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, N, 1.0f,
		    dout, OC, inp, ldi, 0.0f, scratch, IC);
	for (size_t k = 0; k < (size_t)OC * IC; k++)
		dw[k] += scratch[k];
	if (!db)
		return;
	for (int n = 0; n < N; n++)
		for (int o = 0; o < OC; o++)
			db[o] += dout[(size_t)n * OC + o];
}

/* dinp (N, IC) = dout (N, OC) . w (OC, IC): overwritten, not accumulated. */
void matmul_backward_input(float *dinp, const float *dout, const float *w,
			   int N, int IC, int OC)
{
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f,
		    dout, OC, w, IC, 0.0f, dinp, IC);
}

/*
 * Causal self-attention of one TP unit.  qkv (B, T, 3 Cu) holds, per
 * token, the unit's queries, keys and values, each hu heads of hd; out
 * (B, T, Cu); att (B, hu, T, T) keeps the probabilities (row t uses
 * columns 0..t) for the backward.
 */
void attention_forward(float *out, float *att, const float *qkv, int B, int T,
		       int Cu, int hu)
{
	int hd = Cu / hu, C3 = 3 * Cu;
	float scale = 1.0f / sqrtf((float)hd);

	for (int b = 0; b < B; b++) {
		for (int h = 0; h < hu; h++) {
			for (int t = 0; t < T; t++) {
				const float *q = qkv + ((size_t)b * T + t) * C3 + h * hd;
				float *a = att + (((size_t)b * hu + h) * T + t) * T;
				float *o = out + ((size_t)b * T + t) * Cu + h * hd;
				float maxv = -INFINITY, sum = 0.0f;

				for (int t2 = 0; t2 <= t; t2++) {
					const float *k = qkv + ((size_t)b * T + t2) * C3 +
							 Cu + h * hd;
					float dot = 0.0f;

					for (int i = 0; i < hd; i++)
						dot += q[i] * k[i];
					dot *= scale;
					a[t2] = dot;
					if (dot > maxv)
						maxv = dot;
				}
				for (int t2 = 0; t2 <= t; t2++) {
					a[t2] = expf(a[t2] - maxv);
					sum += a[t2];
				}
				for (int t2 = 0; t2 <= t; t2++)
					a[t2] /= sum;
				for (int t2 = t + 1; t2 < T; t2++)
					a[t2] = 0.0f;
				for (int i = 0; i < hd; i++)
					o[i] = 0.0f;
				for (int t2 = 0; t2 <= t; t2++) {
					const float *v = qkv + ((size_t)b * T + t2) * C3 +
							 2 * Cu + h * hd;

					for (int i = 0; i < hd; i++)
						o[i] += a[t2] * v[i];
				}
			}
		}
	}
}

/*
 * dqkv (B, T, 3 Cu) = the gradient of attention_forward's inputs
 * (overwritten); @scratch holds 2 T floats.
 */
void attention_backward(float *dqkv, float *scratch, const float *dout,
			const float *qkv, const float *att, int B, int T,
			int Cu, int hu)
{
	int hd = Cu / hu, C3 = 3 * Cu;
	float scale = 1.0f / sqrtf((float)hd);
	float *datt = scratch, *dpre = scratch + T;

	memset(dqkv, 0, (size_t)B * T * C3 * sizeof(*dqkv));
	for (int b = 0; b < B; b++) {
		for (int h = 0; h < hu; h++) {
			for (int t = 0; t < T; t++) {
				const float *q = qkv + ((size_t)b * T + t) * C3 + h * hd;
				float *dq = dqkv + ((size_t)b * T + t) * C3 + h * hd;
				const float *a = att + (((size_t)b * hu + h) * T + t) * T;
				const float *d = dout + ((size_t)b * T + t) * Cu + h * hd;
				float dot_sum = 0.0f;

				/* out = sum a v: gradients of a and of v */
				for (int t2 = 0; t2 <= t; t2++) {
					size_t row = ((size_t)b * T + t2) * C3;
					const float *v = qkv + row + 2 * Cu + h * hd;
					float *dv = dqkv + row + 2 * Cu + h * hd;
					float g = 0.0f;

					for (int i = 0; i < hd; i++) {
						g += d[i] * v[i];
						dv[i] += a[t2] * d[i];
					}
					datt[t2] = g;
					dot_sum += a[t2] * g;
				}
				/* softmax: dpre = a (datt - sum a datt) */
				for (int t2 = 0; t2 <= t; t2++)
					dpre[t2] = a[t2] * (datt[t2] - dot_sum) * scale;
				/* pre = q . k * scale */
				for (int t2 = 0; t2 <= t; t2++) {
					size_t row = ((size_t)b * T + t2) * C3;
					const float *k = qkv + row + Cu + h * hd;
					float *dk = dqkv + row + Cu + h * hd;

					for (int i = 0; i < hd; i++) {
						dq[i] += dpre[t2] * k[i];
						dk[i] += dpre[t2] * q[i];
					}
				}
			}
		}
	}
}

#define GELU_SCALE 0.7978845608028654f	/* sqrt(2 / pi) */

/* out (n) = GELU(inp), the tanh approximation of GPT-2. */
void gelu_forward(float *out, const float *inp, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		float x = inp[i];
		float cube = 0.044715f * x * x * x;

		out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + cube)));
	}
}

/* dinp (n) = GELU'(inp) * dout (overwritten). */
void gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		float x = inp[i];
		float cube = 0.044715f * x * x * x;
		float arg = GELU_SCALE * (x + cube);
		float th = tanhf(arg);
		float ch = coshf(arg);
		float sech2 = 1.0f / (ch * ch);
		float grad = 0.5f * (1.0f + th) +
			     x * 0.5f * sech2 * GELU_SCALE *
				     (1.0f + 3.0f * 0.044715f * x * x);

		dinp[i] = grad * dout[i];
	}
}

/* out (n) = a + b. */
void residual_forward(float *out, const float *a, const float *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = a[i] + b[i];
}
