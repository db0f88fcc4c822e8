/*
 * params.c - the trainer's parameters: the unit layout of each layer kind,
 * a rank's shard of them (the state buffer that libarachne-migrate moves),
 * their initialization from the seed alone, and AdamW.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ar.h"
#include "gpt.h"

const struct gpt_param_info gpt_params[GPT_NUM_PARAMS] = {
	[P_WTE] = { "wte", GPT_EMBED, false, true },
	[P_WPE] = { "wpe", GPT_EMBED, true, true },
	[P_QKVW] = { "attn.qkv.weight", GPT_BLOCK, false, true },
	[P_QKVB] = { "attn.qkv.bias", GPT_BLOCK, false, false },
	[P_ATTPROJW] = { "attn.proj.weight", GPT_BLOCK, false, true },
	[P_FCW] = { "mlp.fc.weight", GPT_BLOCK, false, true },
	[P_FCB] = { "mlp.fc.bias", GPT_BLOCK, false, false },
	[P_FCPROJW] = { "mlp.proj.weight", GPT_BLOCK, false, true },
	[P_LN1W] = { "ln1.weight", GPT_BLOCK, true, false },
	[P_LN1B] = { "ln1.bias", GPT_BLOCK, true, false },
	[P_ATTPROJB] = { "attn.proj.bias", GPT_BLOCK, true, false },
	[P_LN2W] = { "ln2.weight", GPT_BLOCK, true, false },
	[P_LN2B] = { "ln2.bias", GPT_BLOCK, true, false },
	[P_FCPROJB] = { "mlp.proj.bias", GPT_BLOCK, true, false },
	[P_HEAD_WTE] = { "head.wte", GPT_HEAD, false, true },
	[P_LNFW] = { "lnf.weight", GPT_HEAD, true, false },
	[P_LNFB] = { "lnf.bias", GPT_HEAD, true, false },
};

static size_t param_unit_size(const struct gpt_config *c, enum gpt_param p)
{
	switch (p) {
	case P_WTE:
	case P_HEAD_WTE:
		return (size_t)c->Vu * c->C;
	case P_WPE:
		return (size_t)c->T * c->Cu;
	case P_QKVW:
		return (size_t)3 * c->Cu * c->C;
	case P_QKVB:
		return (size_t)3 * c->Cu;
	case P_ATTPROJW:
		return (size_t)c->C * c->Cu;
	case P_FCW:
	case P_FCPROJW:
		return (size_t)c->Fu * c->C;
	case P_FCB:
		return c->Fu;
	default:		/* the replicated vectors of width C */
		return c->Cu;
	}
}

int gpt_config_init(struct gpt_config *c, const struct costmodel_model *m)
{
	memset(c, 0, sizeof(*c));
	if (m->experts > 0 || m->gated || !m->tied_embeddings ||
	    m->kv_heads != m->heads || m->heads * m->head_dim != m->hidden ||
	    m->q_lora_rank || m->kv_lora_rank)
		return ar_seterr(-AR_EINVAL, "model %s: arachne-gpt trains dense GPT-2-style models only (GELU MLP, multi-head attention, heads x head_dim = hidden, tied embeddings)",
				 m->name);
	c->blocks = m->blocks;
	c->nlayers = m->blocks + 2;
	c->C = m->hidden;
	c->NH = m->heads;
	c->hd = m->head_dim;
	c->F = m->ffn;
	c->V = m->vocab;
	c->T = m->seq_len;
	c->global_batch = m->global_batch;
	/* The largest TP degree that cuts heads, MLP and vocabulary evenly. */
	for (c->U = GPT_MAX_UNITS; c->U > 1; c->U /= 2)
		if (c->NH % c->U == 0 && c->F % c->U == 0 && c->V % c->U == 0)
			break;
	c->Cu = c->C / c->U;
	c->Fu = c->F / c->U;
	c->Vu = c->V / c->U;
	c->hu = c->NH / c->U;
	for (int p = 0; p < GPT_NUM_PARAMS; p++) {
		enum gpt_layer_kind k = gpt_params[p].kind;

		c->unit_size[p] = param_unit_size(c, p);
		c->unit_off[p] = c->unit_floats[k];
		c->unit_floats[k] += c->unit_size[p];
		if (gpt_params[p].replicated) {
			c->rep_off[p] = c->rep_floats[k];
			c->rep_floats[k] += c->unit_size[p] * c->U;
		}
	}
	return 0;
}

enum gpt_layer_kind gpt_layer_kind(const struct gpt_config *cfg, int layer)
{
	if (layer == 0)
		return GPT_EMBED;
	return layer == cfg->nlayers - 1 ? GPT_HEAD : GPT_BLOCK;
}

size_t gpt_optim_floats(const struct gpt_config *cfg, enum gpt_layer_kind k)
{
	return 2 * cfg->unit_floats[k] + 1;
}

/* ---------------------------------------------------------------------
 * A rank's shard.
 * ------------------------------------------------------------------- */

int gpt_shard_alloc(struct gpt_shard *sh, const struct gpt_config *cfg,
		    int first, int last, int u0, int nu)
{
	int n = last - first + 1;
	size_t state = 0, grad = 0, rep = 0;

	memset(sh, 0, sizeof(*sh));
	sh->first = first;
	sh->last = last;
	sh->u0 = u0;
	sh->nu = nu;
	if (n <= 0)
		return 0;
	sh->w_off = calloc(n, sizeof(*sh->w_off));
	sh->o_off = calloc(n, sizeof(*sh->o_off));
	sh->g_off = calloc(n, sizeof(*sh->g_off));
	sh->r_off = calloc(n, sizeof(*sh->r_off));
	if (!sh->w_off || !sh->o_off || !sh->g_off || !sh->r_off)
		goto nomem;
	for (int i = 0; i < n; i++) {
		enum gpt_layer_kind k = gpt_layer_kind(cfg, first + i);

		sh->w_off[i] = state;
		state += nu * cfg->unit_floats[k];
		sh->o_off[i] = state;
		state += nu * gpt_optim_floats(cfg, k);
		sh->g_off[i] = grad;
		grad += nu * cfg->unit_floats[k];
		sh->r_off[i] = rep;
		rep += cfg->rep_floats[k];
	}
	sh->state_floats = state;
	sh->state = calloc(state, sizeof(float));
	sh->grad = calloc(grad, sizeof(double));
	sh->rep = calloc(rep, sizeof(float));
	sh->rep_grad = calloc(rep, sizeof(double));
	if (!sh->state || !sh->grad || !sh->rep || !sh->rep_grad)
		goto nomem;
	return 0;
nomem:
	gpt_shard_free(sh);
	return -ENOMEM;
}

void gpt_shard_free(struct gpt_shard *sh)
{
	free(sh->w_off);
	free(sh->o_off);
	free(sh->g_off);
	free(sh->r_off);
	free(sh->state);
	free(sh->grad);
	free(sh->rep);
	free(sh->rep_grad);
	memset(sh, 0, sizeof(*sh));
	sh->first = 0;
	sh->last = -1;
}

bool gpt_shard_has_layer(const struct gpt_shard *sh, int layer)
{
	return sh->state && layer >= sh->first && layer <= sh->last;
}

float *gpt_weight(const struct gpt_shard *sh, const struct gpt_config *cfg,
		  int layer, int j, enum gpt_param p)
{
	enum gpt_layer_kind k = gpt_params[p].kind;

	return sh->state + sh->w_off[layer - sh->first] +
	       j * cfg->unit_floats[k] + cfg->unit_off[p];
}

double *gpt_grad(const struct gpt_shard *sh, const struct gpt_config *cfg,
		 int layer, int j, enum gpt_param p)
{
	enum gpt_layer_kind k = gpt_params[p].kind;

	return sh->grad + sh->g_off[layer - sh->first] +
	       j * cfg->unit_floats[k] + cfg->unit_off[p];
}

float *gpt_rep(const struct gpt_shard *sh, const struct gpt_config *cfg,
	       int layer, enum gpt_param p)
{
	return sh->rep + sh->r_off[layer - sh->first] + cfg->rep_off[p];
}

double *gpt_rep_grad(const struct gpt_shard *sh, const struct gpt_config *cfg,
		     int layer, enum gpt_param p)
{
	return sh->rep_grad + sh->r_off[layer - sh->first] + cfg->rep_off[p];
}

/* ---------------------------------------------------------------------
 * Initialization: GPT-2's, element by element from a counter-based
 * generator keyed by (seed, layer, parameter, unit, index), so that every
 * rank draws its own units and any plan starts from the same weights.
 * ------------------------------------------------------------------- */

uint64_t gpt_mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* A standard normal number from the 64-bit key @key (Box-Muller). */
static float normal_of(uint64_t key)
{
	uint64_t r = gpt_mix64(key);
	double u1 = ((r >> 11) + 1.0) / 9007199254740993.0;	/* (0, 1] */
	double u2 = (gpt_mix64(r) >> 11) / 9007199254740992.0;	/* [0, 1) */

	return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

static void init_param(float *w, const struct gpt_config *cfg, uint64_t seed,
		       int layer, enum gpt_param p, int unit)
{
	size_t n = cfg->unit_size[p];
	float std = 0.02f;
	uint64_t key;

	switch (p) {
	case P_LN1W:
	case P_LN2W:
	case P_LNFW:
		for (size_t i = 0; i < n; i++)
			w[i] = 1.0f;
		return;
	case P_QKVB:
	case P_FCB:
	case P_LN1B:
	case P_LN2B:
	case P_ATTPROJB:
	case P_FCPROJB:
	case P_LNFB:
		memset(w, 0, n * sizeof(*w));
		return;
	case P_HEAD_WTE:
		/* The tied copy: the embedding's own numbers. */
		p = P_WTE;
		layer = 0;
		break;
	case P_WPE:
		std = 0.01f;
		break;
	case P_ATTPROJW:
	case P_FCPROJW:
		/* GPT-2 scales the residual projections by 1/sqrt(2 L). */
		std = 0.02f / sqrtf(2.0f * cfg->blocks);
		break;
	default:
		break;
	}
	key = gpt_mix64(seed ^ gpt_mix64(((uint64_t)layer << 40) |
					 ((uint64_t)p << 32) |
					 ((uint64_t)unit << 24)));
	for (size_t i = 0; i < n; i++)
		w[i] = std * normal_of(key + i);
}

static float *optim_unit(const struct gpt_shard *sh,
			 const struct gpt_config *cfg, int i, int j)
{
	enum gpt_layer_kind k = gpt_layer_kind(cfg, sh->first + i);

	return sh->state + sh->o_off[i] + j * gpt_optim_floats(cfg, k);
}

void gpt_shard_init(struct gpt_shard *sh, const struct gpt_config *cfg,
		    uint64_t seed)
{
	for (int l = sh->first; l <= sh->last && sh->state; l++) {
		enum gpt_layer_kind k = gpt_layer_kind(cfg, l);

		for (int j = 0; j < sh->nu; j++) {
			for (int p = 0; p < GPT_NUM_PARAMS; p++)
				if (gpt_params[p].kind == k)
					init_param(gpt_weight(sh, cfg, l, j, p),
						   cfg, seed, l, p, sh->u0 + j);
			memset(optim_unit(sh, cfg, l - sh->first, j), 0,
			       gpt_optim_floats(cfg, k) * sizeof(float));
		}
	}
	gpt_shard_units_to_rep(sh, cfg);
}

void gpt_shard_zero_grad(struct gpt_shard *sh, const struct gpt_config *cfg)
{
	size_t grad = 0, rep = 0;

	for (int l = sh->first; l <= sh->last && sh->state; l++) {
		enum gpt_layer_kind k = gpt_layer_kind(cfg, l);

		grad += sh->nu * cfg->unit_floats[k];
		rep += cfg->rep_floats[k];
	}
	if (grad)
		memset(sh->grad, 0, grad * sizeof(double));
	if (rep)
		memset(sh->rep_grad, 0, rep * sizeof(double));
}

void gpt_shard_rep_grad_to_units(struct gpt_shard *sh,
				 const struct gpt_config *cfg)
{
	for (int l = sh->first; l <= sh->last && sh->state; l++)
		for (int p = 0; p < GPT_NUM_PARAMS; p++) {
			size_t n = cfg->unit_size[p];

			if (!gpt_params[p].replicated ||
			    gpt_params[p].kind != gpt_layer_kind(cfg, l))
				continue;
			for (int j = 0; j < sh->nu; j++)
				memcpy(gpt_grad(sh, cfg, l, j, p),
				       gpt_rep_grad(sh, cfg, l, p) +
					       (sh->u0 + j) * n,
				       n * sizeof(double));
		}
}

void gpt_shard_units_to_rep(struct gpt_shard *sh, const struct gpt_config *cfg)
{
	for (int l = sh->first; l <= sh->last && sh->state; l++)
		for (int p = 0; p < GPT_NUM_PARAMS; p++) {
			size_t n = cfg->unit_size[p];

			if (!gpt_params[p].replicated ||
			    gpt_params[p].kind != gpt_layer_kind(cfg, l))
				continue;
			for (int j = 0; j < sh->nu; j++)
				memcpy(gpt_rep(sh, cfg, l, p) + (sh->u0 + j) * n,
				       gpt_weight(sh, cfg, l, j, p),
				       n * sizeof(float));
		}
}

/* ---------------------------------------------------------------------
 * AdamW, element by element (llm.c's), on the units the rank holds.  The
 * gradient arrives as an FP64 sum and is rounded once.
 * ------------------------------------------------------------------- */

void gpt_shard_adamw(struct gpt_shard *sh, const struct gpt_config *cfg,
		     const struct gpt_adamw *o)
{
	for (int l = sh->first; l <= sh->last && sh->state; l++) {
		enum gpt_layer_kind k = gpt_layer_kind(cfg, l);
		size_t us = cfg->unit_floats[k];

		for (int j = 0; j < sh->nu; j++) {
			float *om = optim_unit(sh, cfg, l - sh->first, j);
			float *ov = om + us;
			float *ostep = ov + us;
			uint32_t t;
			float c1, c2;

			memcpy(&t, ostep, sizeof(t));
			t++;
			memcpy(ostep, &t, sizeof(t));
			c1 = 1.0f - powf(o->beta1, (float)t);
			c2 = 1.0f - powf(o->beta2, (float)t);
			for (int p = 0; p < GPT_NUM_PARAMS; p++) {
				size_t off = cfg->unit_off[p];
				float wd = gpt_params[p].decay ? o->weight_decay : 0.0f;
				float *w, *m, *v;
				const double *g;

				if (gpt_params[p].kind != k)
					continue;
				w = gpt_weight(sh, cfg, l, j, p);
				g = gpt_grad(sh, cfg, l, j, p);
				m = om + off;
				v = ov + off;
				for (size_t i = 0; i < cfg->unit_size[p]; i++) {
					float gi = (float)g[i];
					float mhat, vhat;

					m[i] = o->beta1 * m[i] + (1.0f - o->beta1) * gi;
					v[i] = o->beta2 * v[i] + (1.0f - o->beta2) * gi * gi;
					mhat = m[i] / c1;
					vhat = v[i] / c2;
					w[i] -= o->lr * (mhat / (sqrtf(vhat) + o->eps) +
							 wd * w[i]);
				}
			}
		}
	}
	gpt_shard_units_to_rep(sh, cfg);
}

uint32_t gpt_shard_step(const struct gpt_shard *sh,
			const struct gpt_config *cfg)
{
	enum gpt_layer_kind k;
	uint32_t t;

	if (!sh->state || sh->nu < 1)
		return 0;
	k = gpt_layer_kind(cfg, sh->first);
	memcpy(&t, optim_unit(sh, cfg, 0, 0) + 2 * cfg->unit_floats[k],
	       sizeof(t));
	return t;
}

uint64_t gpt_shard_checksum(const struct gpt_shard *sh)
{
	const uint8_t *b = (const uint8_t *)sh->state;
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; sh->state && i < sh->state_floats * sizeof(float); i++)
		h = (h ^ b[i]) * 0x100000001b3ULL;
	return h;
}
