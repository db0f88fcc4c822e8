/*
 * plandir.c - an elastic job's plan directory as the trainer reads it
 * (docs/elastic.md): which generation its state is in, that generation's
 * composition (the cluster, as plannerd planned it), and a change that
 * waits for the trainer.
 *
 * Rank 0 reads DIR/state.json and every rank gets its answer by broadcast,
 * so all ranks act on the same version of a file that changes under them.
 * The plans (DIR/plan.G.json) never change once written; each rank reads
 * them itself.
 *
 * The generation the state is in: the one in force, unless a change is
 * pending, whose state is still in the plan it starts from ("from") with
 * the composition before it ("previous") -- or already in the pending
 * plan, when the checkpoint's mark (DIR/generation under --checkpoint)
 * says the trainer moved it and the scripts did not commit yet.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ar.h"
#include "gpt.h"

#define PLANDIR_MSG	512

/* What rank 0 found, broadcast to every rank. */
struct plandir_answer {
	int rc;
	unsigned gen, next;		/* next: a pending generation, or 0 */
	unsigned pending;		/* a generation pending from gen, or 0 */
	char op[16];
	char msg[PLANDIR_MSG];
	unsigned long len;		/* of the composition's text */
	unsigned long pending_len;	/* of the pending composition's */
};

static unsigned plandir_uint(const json_t *obj, const char *key)
{
	json_int_t v = json_integer_value(json_object_get(obj, key));

	return v > 0 && v < 1L << 30 ? (unsigned)v : 0;
}

/*
 * Rank 0: the composition generation @g's plan was made for, as plannerd
 * saw it (cluster.G.json: GRES types mapped to the GPU profiles the plan
 * names); @gres_named (state.json's, of GRES types) in a directory written
 * without it.  A new reference.
 */
static json_t *plandir_planned(const char *dir, unsigned g,
			       const json_t *gres_named, struct plandir_answer *a)
{
	json_t *planned;

	errno = 0;
	planned = ar_jobdir_cluster(dir, g);
	if (planned || errno == ENOENT)
		return planned ? planned : json_incref((json_t *)gres_named);
	a->rc = ar_seterr(-AR_EINVAL, "%s", ar_errmsg());
	return NULL;
}

/* Rank 0: read state.json into @a; the composition of @a->gen's state,
 * and in *@pendingp the pending one when the state is not in it yet. */
static json_t *plandir_read(const char *dir, unsigned mark, unsigned cur,
			    struct plandir_answer *a, json_t **pendingp)
{
	char path[4096];
	const json_t *pending, *comp;
	json_t *st;
	unsigned gen;

	snprintf(path, sizeof(path), "%s/state.json", dir);
	st = ar_json_load_file(path);
	if (!st) {
		a->rc = ar_seterr(-AR_EINVAL, "%s", ar_errmsg());
		return NULL;
	}
	gen = plandir_uint(st, "generation");
	comp = json_object_get(st, "composition");
	pending = json_object_get(st, "pending");
	if (json_is_object(pending)) {
		const char *op = json_string_value(json_object_get(pending, "op"));
		unsigned from = plandir_uint(pending, "from");

		snprintf(a->op, sizeof(a->op), "%s", op ? op : "change");
		if (mark != gen) {
			/* The state is still in the plan the change starts from. */
			a->pending = gen;
			*pendingp = json_incref((json_t *)comp);
			comp = json_object_get(json_object_get(pending, "previous"),
					       "composition");
			if (cur && cur == from)
				a->next = gen;
			gen = from;
		}
	}
	if (!gen || !json_is_object(comp)) {
		a->rc = ar_seterr(-AR_EINVAL, "%s: no generation and composition in force",
				  path);
		json_decref(st);
		return NULL;
	}
	a->gen = gen;
	comp = plandir_planned(dir, gen, comp, a);
	if (*pendingp && a->rc == 0) {
		json_t *planned = plandir_planned(dir, a->pending, *pendingp, a);

		json_decref(*pendingp);
		*pendingp = planned;
	}
	json_decref(st);
	return (json_t *)comp;
}

/* Rank 0: @comp's text, its length in *@lenp; NULL and 0 for none. */
static char *plandir_text(const json_t *comp, unsigned long *lenp,
			  struct plandir_answer *a)
{
	char *text = comp ? json_dumps(comp, JSON_COMPACT) : NULL;

	if (comp && !text)
		a->rc = -ENOMEM;
	*lenp = text ? strlen(text) : 0;
	return text;
}

/* Every rank: the composition rank 0 broadcasts, @len bytes (0: none). */
static int plandir_recv_json(const struct gpt_job *job, char *text,
			     unsigned long len, json_t **jp)
{
	*jp = NULL;
	if (!len) {
		free(text);
		return 0;
	}
	if (job->rank != 0 && !(text = calloc(1, len + 1)))
		return -ENOMEM;		/* cannot happen for a few bytes */
	gpt_bcast(job->comm, text, len, GPT_BYTE, 0);
	*jp = json_loads(text, 0, NULL);
	free(text);
	return *jp ? 0 : -ENOMEM;
}

/*
 * Collective: rank 0 reads, every rank gets the answer.  @mark: the
 * generation the checkpoint is in (0: none); @cur: the generation the
 * trainer runs (0: at start).  *@clusterp (when given): the composition of
 * the state's generation, and *@pendingp that of a change pending from it
 * (NULL: none).
 */
static int plandir_ask(const struct gpt_job *job, const char *dir,
		       unsigned mark, unsigned cur, struct plandir_answer *a,
		       json_t **clusterp, json_t **pendingp)
{
	json_t *comp = NULL, *pending = NULL;
	char *text = NULL, *pending_text = NULL;
	int rc;

	memset(a, 0, sizeof(*a));
	if (job->rank == 0) {
		comp = plandir_read(dir, mark, cur, a, &pending);
		if (a->rc < 0)
			snprintf(a->msg, sizeof(a->msg), "%s", ar_errmsg());
		if (clusterp) {
			text = plandir_text(comp, &a->len, a);
			pending_text = plandir_text(pending, &a->pending_len, a);
		}
		json_decref(comp);
		json_decref(pending);
	}
	gpt_bcast(job->comm, a, sizeof(*a), GPT_BYTE, 0);
	if (a->rc < 0) {
		free(text);
		free(pending_text);
		return ar_seterr(a->rc, "%s", a->msg);
	}
	if (!clusterp)
		return 0;
	rc = plandir_recv_json(job, text, a->len, clusterp);
	if (rc == 0)
		rc = plandir_recv_json(job, pending_text, a->pending_len,
				       pendingp);
	else
		free(pending_text);
	return rc;
}

int gpt_plandir_start(const struct gpt_job *job, const char *dir,
		      unsigned mark, unsigned *genp, json_t **clusterp,
		      unsigned *pendingp, json_t **pending_clusterp)
{
	struct plandir_answer a;
	int rc;

	rc = plandir_ask(job, dir, mark, 0, &a, clusterp, pending_clusterp);
	if (rc == 0) {
		*genp = a.gen;
		*pendingp = a.pending;
	}
	return rc;
}

int gpt_plandir_poll(const struct gpt_job *job, const char *dir,
		     unsigned cur, unsigned *statep, unsigned *nextp,
		     char op[16])
{
	struct plandir_answer a;
	int rc;

	*nextp = 0;
	*statep = 0;
	/* the state is in @cur: a pending @cur is the trainer's own move */
	rc = plandir_ask(job, dir, cur, cur, &a, NULL, NULL);
	if (rc < 0)
		return rc;
	*statep = a.gen;
	*nextp = a.next;
	memcpy(op, a.op, 16);
	return 0;
}

int gpt_plandir_plan(const char *dir, unsigned gen, char *buf, size_t size)
{
	int n = snprintf(buf, size, "%s/plan.%u.json", dir, gen);

	if (n < 0 || (size_t)n >= size)
		return ar_seterr(-ENAMETOOLONG, "%s: path too long", dir);
	return 0;
}

/* What the trainer runs of a plan; its predictions and its planner's name
 * may differ between two answers with the same layout. */
static const char *const plandir_keys[] = {
	"model", "global_batch", "seq_len", "micro_batch", "recompute",
	"distributed_optimizer",
	"templates", NULL
};

bool gpt_plandir_same(const char *dir, unsigned g1, unsigned g2)
{
	char p1[4096], p2[4096];
	json_t *j1, *j2;
	bool same;

	if (gpt_plandir_plan(dir, g1, p1, sizeof(p1)) < 0 ||
	    gpt_plandir_plan(dir, g2, p2, sizeof(p2)) < 0)
		return false;
	j1 = ar_json_load_file(p1);
	j2 = ar_json_load_file(p2);
	same = j1 && j2;
	for (int i = 0; same && plandir_keys[i]; i++) {
		const json_t *v1 = json_object_get(j1, plandir_keys[i]);
		const json_t *v2 = json_object_get(j2, plandir_keys[i]);

		same = (!v1 && !v2) || (v1 && v2 && json_equal(v1, v2));
	}
	json_decref(j1);
	json_decref(j2);
	return same;
}
