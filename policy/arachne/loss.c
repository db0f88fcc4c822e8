/*
 * loss.c - the training objective over a batch of decisions: the PPO
 * clipped surrogate with group-normalized (GRPO) advantages, an entropy
 * bonus per decision already divided by the decisions of its step, and
 * the self-imitation term (maximum likelihood of the best plans found).
 *
 * A forced decision (a uniform depth or a uniform GPU type drawn to keep
 * deep pipelines and rare types explored) was not drawn from the policy,
 * so it carries no PPO term; the self-imitation buffers are how the
 * policy learns from what those rollouts found.
 */
#define AR_INTERNAL 1
#include "config.h"

#include <math.h>
#include <string.h>

#include "arachne_private.h"

float policy_loss(struct policy_work *w, const struct policy_decision *d,
		  const struct policy_loss_row *rows, int n,
		  const struct policy_loss_opts *opts)
{
	float logp[POLICY_MAX_CANDS];
	double loss = 0.0;

	memset(w->d_logits, 0, (size_t)n * POLICY_MAX_CANDS * sizeof(float));
	for (int r = 0; r < n; r++) {
		const float *lg = w->logits + (size_t)r * POLICY_MAX_CANDS;
		float *dl = w->d_logits + (size_t)r * POLICY_MAX_CANDS;
		const struct policy_loss_row *row = &rows[r];
		int nc = policy_head_cands(d[r].head);
		int a = d[r].action;
		float coef = 0.0f;	/* d(loss)/d(logp[a]) */
		float entropy = 0.0f;

		policy_log_softmax(lg, d[r].mask, nc, logp);

		if (row->imitation_weight > 0.0f) {
			loss -= row->imitation_weight * row->scale * logp[a];
			coef = -row->imitation_weight * row->scale;
		} else if (!d[r].forced) {
			float ratio = expf(logp[a] - d[r].old_logp);
			float lo = 1.0f - opts->clip, hi = 1.0f + opts->clip;
			float clipped = fminf(fmaxf(ratio, lo), hi);
			float adv = row->advantage;

			if (ratio * adv <= clipped * adv) {
				loss -= row->scale * ratio * adv;
				coef = -row->scale * ratio * adv;
			} else {
				loss -= row->scale * clipped * adv;
			}
		}
		/* d(-c * logp[a]) / dlogit_j = -c * (onehot_j - p_j) */
		for (int c = 0; c < nc; c++) {
			if (!(d[r].mask & (1u << c)))
				continue;
			dl[c] += coef * ((c == a) - expf(logp[c]));
		}

		if (row->imitation_weight > 0.0f || d[r].forced ||
		    row->entropy_weight == 0.0f)
			continue;
		for (int c = 0; c < nc; c++)
			if (d[r].mask & (1u << c))
				entropy -= expf(logp[c]) * logp[c];
		loss -= row->entropy_weight * row->scale * entropy;
		/* dH/dlogit_j = -p_j (logp_j + H) */
		for (int c = 0; c < nc; c++) {
			if (!(d[r].mask & (1u << c)))
				continue;
			dl[c] += row->entropy_weight * row->scale *
				 expf(logp[c]) * (logp[c] + entropy);
		}
	}
	return (float)loss;
}
