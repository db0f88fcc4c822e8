/*
 * random.c - the planner "random", the learned planner's ablation (the
 * paper's Figure 11): constructions that draw every decision uniformly
 * among the ones the feasibility masks allow, completed by the same fill,
 * until a given number of templates has been priced.  With as many plans
 * priced as the policy's rollouts, it measures what the training buys.
 */
#define AR_INTERNAL 1
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "ar.h"
#include "arachne_private.h"

int planner_random(const struct policy_request *req,
		   struct costmodel_plan **planp)
{
	struct planner_deadline dl;
	struct policy_env env;
	struct policy_batch *b;
	struct costmodel_plan *best = NULL;
	long priced = 0, done = 0;
	bool enough = false;
	int rc;

	*planp = NULL;
	planner_deadline_init(&dl, req);
	rc = policy_env_init(&env, req->cm, req->cl);
	if (rc < 0)
		return rc;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	*b = (struct policy_batch){ .env = &env, .seed = req->seed, .n = POLICY_BATCH,
				    .dl = &dl };
	/*
	 * Rollouts are counted in index order whatever the threads, and a
	 * batch's rollouts past the count are discarded, so the plan and
	 * its plans priced depend on the seed alone.
	 */
	while (!enough && !planner_deadline_passed(&dl)) {
		policy_batch_run(b, planner_threads(req));
		for (int i = 0; i < b->n && !enough; i++) {
			if (b->rc[i] == -AR_ETIMEOUT)
				break;	/* not started: the budget is spent */
			if (b->rc[i] < 0) {
				rc = b->rc[i] == -AR_EINFEASIBLE ?
				     policy_explain_infeasible(req) :
				     ar_seterr(b->rc[i], "%s", b->err[i]);
				goto out;
			}
			priced += b->priced[i];
			done++;
			if (b->plan[i] && (!best || b->plan[i]->predicted.samples_per_s >
						    best->predicted.samples_per_s)) {
				costmodel_plan_free(best);
				best = b->plan[i];
				b->plan[i] = NULL;
			}
			enough = req->evaluations > 0 ? priced >= req->evaluations :
							done >= POLICY_BATCH;
		}
		policy_batch_clear(b);
		b->first += b->n;
	}
	if (!best) {
		rc = policy_explain_infeasible(req);
		goto out;
	}
	best->plans_priced = priced;
	best->search_complete = enough;
	best->planning_s = ar_now() - dl.start;
	*planp = best;
	best = NULL;
	rc = 0;
out:
	policy_batch_clear(b);
	free(b);
	costmodel_plan_free(best);
	return rc;
}
