/*
 * model.c - the trainer's model on a small GPT in one process (no MPI
 * call is made at TP 1): the backward against central finite differences
 * of the forward for elements of every parameter of every layer kind,
 * causal attention, and weights that depend on the seed and the unit
 * alone, whatever share of the units a rank holds.
 */
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gpt.h"

struct fixture {
	struct gpt_job job;
	struct gpt_plan *gp;
	struct gpt_trainer tr;
	struct gpt_data data;
	struct gpt_acts *a;
};

static const struct costmodel_model small_model = {
	.name = "gradcheck", .blocks = 2, .hidden = 32, .ffn = 128,
	.heads = 4, .kv_heads = 4, .head_dim = 8, .vocab = 256,
	.tied_embeddings = true, .seq_len = 8, .global_batch = 3,
};

static int setup(void **state)
{
	static const struct gpt_adamw opt = { 1e-3f, 0.9f, 0.95f, 1e-8f, 0 };
	struct fixture *f = calloc(1, sizeof(*f));
	static int zero;

	assert_non_null(f);
	assert_int_equal(gpt_config_init(&f->job.cfg, &small_model), 0);
	f->job.size = 1;
	f->job.node_of = &zero;
	f->job.gpu_of = &zero;
	f->job.comm = MPI_COMM_NULL;
	assert_int_equal(gpt_plan_single(&f->job, 3, &f->gp), 0);
	assert_int_equal(gpt_trainer_create(&f->tr, &f->job, f->gp, 7, &opt), 0);
	gpt_shard_init(&f->tr.shard, &f->job.cfg, 7);
	f->data.len = 4096;
	f->data.bytes = malloc(f->data.len);
	assert_non_null(f->data.bytes);
	for (size_t i = 0; i < f->data.len; i++)
		f->data.bytes[i] = (uint8_t)(gpt_mix64(i) >> 17);
	f->a = gpt_acts_slot(f->tr.slots, 0);
	gpt_acts_set_batch(f->a, &f->tr, &f->data, 1, 0, 3);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	gpt_trainer_destroy(&f->tr);
	gpt_plan_free(f->gp);
	free(f->data.bytes);
	free(f);
	return 0;
}

static double loss_of(struct fixture *f)
{
	gpt_stage_forward(&f->tr, f->a);
	return gpt_acts_loss(f->a) /
	       ((double)f->gp->global_batch * f->job.cfg.T);
}

/* The largest relative error over @n elements of parameter @p of @layer. */
static double check_param(struct fixture *f, int layer, enum gpt_param p,
			  int n)
{
	const struct gpt_config *c = &f->job.cfg;
	struct gpt_shard *sh = &f->tr.shard;
	bool rep = gpt_params[p].replicated;
	size_t size = rep ? c->unit_size[p] * c->U : c->unit_size[p];
	double worst = 0;

	for (int k = 0; k < n; k++) {
		int j = rep ? 0 : (int)(gpt_mix64(k * 31 + p) % c->U);
		size_t i = gpt_mix64(k * 131 + p * 7 + layer) % size;
		float *w = rep ? gpt_rep(sh, c, layer, p) + i :
				 gpt_weight(sh, c, layer, j, p) + i;
		double g = rep ? gpt_rep_grad(sh, c, layer, p)[i] :
				 gpt_grad(sh, c, layer, j, p)[i];
		float saved = *w, eps = 1e-3f;
		double lp, lm, fd, err;

		*w = saved + eps;
		lp = loss_of(f);
		*w = saved - eps;
		lm = loss_of(f);
		*w = saved;
		fd = (lp - lm) / (2.0 * eps);
		err = fabs(fd - g) / fmax(fabs(fd) + fabs(g), 1e-4);
		if (err > worst)
			worst = err;
		if (err > 0.05)
			print_message("# layer %d %s[%d][%zu]: backward %.6g, finite difference %.6g\n",
				      layer, gpt_params[p].name, j, i, g, fd);
	}
	return worst;
}

static void test_gradients(void **state)
{
	struct fixture *f = *state;
	const struct gpt_config *c = &f->job.cfg;
	double worst = 0;

	gpt_shard_zero_grad(&f->tr.shard, c);
	loss_of(f);
	gpt_stage_backward(&f->tr, f->a, NULL);
	for (int layer = 0; layer < c->nlayers; layer++)
		for (int p = 0; p < GPT_NUM_PARAMS; p++) {
			double e;

			if (gpt_params[p].kind != gpt_layer_kind(c, layer))
				continue;
			e = check_param(f, layer, p, 12);
			print_message("# layer %d %-18s worst relative error %.2e\n",
				      layer, gpt_params[p].name, e);
			if (e > worst)
				worst = e;
		}
	assert_true(worst < 0.05);
}

/* A token changes the predictions at its position and after, never before. */
static void test_causal(void **state)
{
	struct fixture *f = *state;
	const struct gpt_config *c = &f->job.cfg;
	size_t row = c->Vu, n = (size_t)3 * c->T * row;
	float *before = malloc(n * sizeof(float));
	float *after = malloc(n * sizeof(float));
	int *tokens, t = 5;

	assert_non_null(before);
	assert_non_null(after);
	/* probs of unit 0 come first in the slot, (N, Vu) */
	loss_of(f);
	memcpy(before, gpt_acts_probs(f->a), n * sizeof(float));
	tokens = gpt_acts_tokens(f->a);
	tokens[t] = (tokens[t] + 1) % c->V;
	loss_of(f);
	memcpy(after, gpt_acts_probs(f->a), n * sizeof(float));
	assert_memory_equal(before, after, t * row * sizeof(float));
	assert_memory_not_equal(before + t * row, after + t * row,
				row * sizeof(float));
	/* the other samples of the micro-batch do not see it at all */
	assert_memory_equal(before + c->T * row, after + c->T * row,
			    2 * c->T * row * sizeof(float));
	free(before);
	free(after);
}

/* Unit u's weights are the same whether a rank holds all units or a share. */
static void test_init_by_unit(void **state)
{
	struct fixture *f = *state;
	const struct gpt_config *c = &f->job.cfg;
	struct gpt_shard half;
	int layer = 1;

	assert_int_equal(gpt_shard_alloc(&half, c, layer, layer + 1, 2, 2), 0);
	gpt_shard_init(&half, c, 7);
	for (int p = 0; p < GPT_NUM_PARAMS; p++) {
		if (gpt_params[p].kind != GPT_BLOCK)
			continue;
		for (int j = 0; j < 2; j++)
			assert_memory_equal(gpt_weight(&half, c, layer, j, p),
					    gpt_weight(&f->tr.shard, c, layer,
						       2 + j, p),
					    c->unit_size[p] * sizeof(float));
	}
	gpt_shard_free(&half);
	/* the head's copy of the token embedding starts as the embedding */
	for (int j = 0; j < c->U; j++)
		assert_memory_equal(gpt_weight(&f->tr.shard, c, 0, j, P_WTE),
				    gpt_weight(&f->tr.shard, c, c->nlayers - 1,
					       j, P_HEAD_WTE),
				    c->unit_size[P_WTE] * sizeof(float));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_gradients, setup, teardown),
		cmocka_unit_test_setup_teardown(test_causal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_init_by_unit, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
