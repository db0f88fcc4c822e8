/*
 * test/net.c - the policy network: batched forward equals one decision at
 * a time, masks give -inf logits and zero probability, and the backward
 * pass (through the heads, the FiLM-conditioned backbone and the FiLM
 * generator) matches central finite differences of the training loss.
 */
#define AR_INTERNAL 1
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "arachne_private.h"

#define NDEC 9

/* Random decisions of every head, with random masks that allow the action. */
static void make_decisions(struct policy_decision *d, int n, uint64_t seed)
{
	struct policy_rng rng;

	policy_rng_seed(&rng, seed, 1);
	memset(d, 0, sizeof(*d) * n);
	for (int r = 0; r < n; r++) {
		int head = r % POLICY_NUM_HEADS;
		int nc = policy_head_cands(head);

		d[r].head = head;
		for (int i = 0; i < POLICY_STATE_DIM; i++)
			d[r].x[i] = (float)policy_rng_uniform(&rng);
		d[r].slot = policy_rng_below(&rng, POLICY_SLOTS);
		d[r].mask = (uint32_t)policy_rng_next(&rng) & ((1u << nc) - 1);
		d[r].action = policy_rng_below(&rng, nc);
		d[r].mask |= 1u << d[r].action;
		d[r].mask |= 1u << ((d[r].action + 1) % nc);	/* two choices at least */
		d[r].old_logp = -1.0f - (float)policy_rng_uniform(&rng);
	}
}

static void make_rows(struct policy_loss_row *rows, int n)
{
	for (int r = 0; r < n; r++) {
		rows[r].advantage = (r % 3) - 1.0f + 0.25f;
		rows[r].entropy_weight = 0.05f / (1 + r % 4);
		rows[r].imitation_weight = r % 4 == 3 ? 0.5f : 0.0f;
		rows[r].scale = 1.0f / n;
	}
}

/* Make the FiLM generator matter, so its gradient is not vanishingly small. */
static void perturb_film(struct policy_net *net)
{
	struct policy_rng rng;
	float *w = policy_net_tensor(net, PW_FILM2_W);
	const struct policy_tensor_info *ti = policy_tensor_info(PW_FILM2_W);

	policy_rng_seed(&rng, 7, 2);
	for (int i = 0; i < ti->rows * ti->cols; i++)
		w[i] = 0.3f * policy_rng_normal(&rng);
	w = policy_net_tensor(net, PW_DEPTH2_W);
	ti = policy_tensor_info(PW_DEPTH2_W);
	for (int i = 0; i < ti->rows * ti->cols; i++)
		w[i] = 0.5f * policy_rng_normal(&rng);
}

static float loss_at(struct policy_net *net, struct policy_work *w,
		     const struct policy_decision *d,
		     const struct policy_loss_row *rows, int n)
{
	struct policy_loss_opts opts = { .clip = 100.0f };	/* smooth: no clip kink */

	policy_net_forward(net, w, d, n);
	return policy_loss(w, d, rows, n, &opts);
}

static void test_forward_batch_matches_single(void **state)
{
	struct policy_decision d[NDEC];
	struct policy_net net;
	struct policy_work wb, w1;

	assert_int_equal(policy_net_init(&net, 42), 0);
	perturb_film(&net);
	assert_int_equal(policy_work_init(&wb, NDEC), 0);
	assert_int_equal(policy_work_init(&w1, 1), 0);
	make_decisions(d, NDEC, 3);

	policy_net_forward(&net, &wb, d, NDEC);
	for (int r = 0; r < NDEC; r++) {
		int nc = policy_head_cands(d[r].head);
		float logp[POLICY_MAX_CANDS];
		double sum = 0.0;

		policy_net_forward(&net, &w1, &d[r], 1);
		for (int c = 0; c < POLICY_MAX_CANDS; c++) {
			float a = wb.logits[r * POLICY_MAX_CANDS + c];
			float b = w1.logits[c];
			bool allowed = c < nc && (d[r].mask & (1u << c));

			if (!allowed) {
				assert_true(isinf(a) && a < 0);
				assert_true(isinf(b) && b < 0);
			} else {
				assert_true(isfinite(a));
				assert_float_equal(a, b, 1e-4f);
			}
		}
		policy_log_softmax(wb.logits + r * POLICY_MAX_CANDS, d[r].mask, nc,
				   logp);
		for (int c = 0; c < nc; c++)
			sum += isinf(logp[c]) ? 0.0 : exp(logp[c]);
		assert_float_equal(sum, 1.0, 1e-5);
	}
	policy_work_fini(&wb);
	policy_work_fini(&w1);
	policy_net_fini(&net);
}

static void test_gradient_matches_finite_differences(void **state)
{
	struct policy_decision d[NDEC];
	struct policy_loss_row rows[NDEC];
	struct policy_net net;
	struct policy_work w;
	struct policy_rng rng;
	int checked = 0, bad = 0;
	double worst = 0.0;

	assert_int_equal(policy_net_init(&net, 11), 0);
	assert_int_equal(policy_net_enable_training(&net), 0);
	perturb_film(&net);
	assert_int_equal(policy_work_init(&w, NDEC), 0);
	make_decisions(d, NDEC, 5);
	make_rows(rows, NDEC);

	loss_at(&net, &w, d, rows, NDEC);
	memset(net.grads, 0, net.num_params * sizeof(float));
	policy_net_backward(&net, &w, d, NDEC, net.grads);

	policy_rng_seed(&rng, 99, 3);
	for (int t = 0; t < POLICY_NUM_TENSORS; t++) {
		const struct policy_tensor_info *ti = policy_tensor_info(t);
		int count = ti->rows * ti->cols;
		float *p = policy_net_tensor(&net, t);
		float *g = policy_net_grad(&net, t);
		int probes = count < 12 ? count : 12;

		for (int k = 0; k < probes; k++) {
			int i = count <= 12 ? k : policy_rng_below(&rng, count);
			float saved = p[i], eps = 1e-3f;
			double lp, lm, fd, err;

			p[i] = saved + eps;
			lp = loss_at(&net, &w, d, rows, NDEC);
			p[i] = saved - eps;
			lm = loss_at(&net, &w, d, rows, NDEC);
			p[i] = saved;
			fd = (lp - lm) / (2.0 * eps);
			err = fabs(fd - g[i]) /
			      (fmax(fabs(fd), fabs(g[i])) + 1e-3);
			if (err > worst)
				worst = err;
			if (err > 0.05) {
				bad++;
				print_message("# %s[%d]: analytic %.6g, numeric %.6g\n",
					      ti->name, i, g[i], fd);
			}
			checked++;
		}
	}
	print_message("# %d gradients checked, worst relative error %.3g\n",
		      checked, worst);
	/* A ReLU kink inside +-eps can spoil one probe; a wrong pass spoils many. */
	assert_true(bad <= 2);
	assert_true(checked > 150);
	policy_work_fini(&w);
	policy_net_fini(&net);
}

static void test_backward_accumulates(void **state)
{
	struct policy_decision d[NDEC];
	struct policy_loss_row rows[NDEC];
	struct policy_net net;
	struct policy_work w;
	float *once;

	assert_int_equal(policy_net_init(&net, 12), 0);
	assert_int_equal(policy_net_enable_training(&net), 0);
	assert_int_equal(policy_work_init(&w, NDEC), 0);
	make_decisions(d, NDEC, 6);
	make_rows(rows, NDEC);
	once = calloc(net.num_params, sizeof(float));
	assert_non_null(once);

	loss_at(&net, &w, d, rows, NDEC);
	policy_net_backward(&net, &w, d, NDEC, once);
	memset(net.grads, 0, net.num_params * sizeof(float));
	policy_net_backward(&net, &w, d, NDEC, net.grads);
	policy_net_backward(&net, &w, d, NDEC, net.grads);
	for (size_t i = 0; i < net.num_params; i++)
		assert_float_equal(net.grads[i], 2.0f * once[i],
				   1e-5f + 1e-4f * fabsf(once[i]));
	free(once);
	policy_work_fini(&w);
	policy_net_fini(&net);
}

/* Adam moves a parameter against its gradient. */
static void test_adam_descends(void **state)
{
	struct policy_decision d[NDEC];
	struct policy_loss_row rows[NDEC];
	struct policy_net net;
	struct policy_work w;
	float first, last = 0.0f;

	assert_int_equal(policy_net_init(&net, 13), 0);
	assert_int_equal(policy_net_enable_training(&net), 0);
	assert_int_equal(policy_work_init(&w, NDEC), 0);
	make_decisions(d, NDEC, 8);
	for (int r = 0; r < NDEC; r++) {
		rows[r] = (struct policy_loss_row){ .imitation_weight = 1.0f,
						    .scale = 1.0f / NDEC };
	}
	first = loss_at(&net, &w, d, rows, NDEC);
	for (int it = 0; it < 50; it++) {
		last = loss_at(&net, &w, d, rows, NDEC);
		memset(net.grads, 0, net.num_params * sizeof(float));
		policy_net_backward(&net, &w, d, NDEC, net.grads);
		policy_net_adam(&net, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.0f);
	}
	print_message("# imitation loss %.4f -> %.4f\n", first, last);
	assert_true(last < 0.5f * first);
	policy_work_fini(&w);
	policy_net_fini(&net);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_forward_batch_matches_single),
		cmocka_unit_test(test_gradient_matches_finite_differences),
		cmocka_unit_test(test_backward_accumulates),
		cmocka_unit_test(test_adam_descends),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
