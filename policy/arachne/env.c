/*
 * env.c - what the policy knows about one composition before it decides
 * anything: which GPU type sits in which slot, the static per-type
 * features of Table 2, the composition summary the FiLM generator reads,
 * the memory capacity of a stage and the reward scale.
 *
 * Slots follow a canonical order, fastest type first (its stage speed at
 * TP 1, then peak TFLOPS, then its name), so that one policy serves a
 * cluster with any subset of the types it was trained on: slot 0 is always
 * "the fastest type here", whatever its name.
 */
#define AR_INTERNAL 1
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ar.h"
#include "arachne_private.h"

#define RUNTIME_OVERHEAD_GIB 1.5	/* the cost model's default per GPU */

struct slot_key {
	int type;
	double speed;
	double tflops;
	const char *name;
};

static int slot_key_cmp(const void *a, const void *b)
{
	const struct slot_key *x = a, *y = b;

	if (x->speed != y->speed)
		return x->speed > y->speed ? -1 : 1;
	if (x->tflops != y->tflops)
		return x->tflops > y->tflops ? -1 : 1;
	return strcmp(x->name, y->name);
}

/*
 * State bytes of one layer of @type at TP @tp on one GPU, from the
 * profiles' BF16 weights (state = weights * state_bytes_per_param / 2).
 * Routed experts may spread over up to @ep_max GPUs beyond the TP group
 * (the fill tiles them EP x ETP x EDP), so their share is divided by it.
 */
static double layer_state_bytes(const struct costmodel *cm, int gpu, int tp,
				enum costmodel_layer_type type, int ep_max)
{
	const struct costmodel_model *m = costmodel_model(cm);
	const struct costmodel_layer_profile *p =
		costmodel_profile(cm, gpu, tp, 1, type);
	double bytes;

	if (!p)
		return -1.0;
	bytes = p->param_bytes * m->state_bytes_per_param / 2.0;
	if (type == COSTMODEL_LAYER_EXPERT && ep_max > 1)
		bytes /= ep_max;
	return bytes;
}

/*
 * Activations one layer keeps per micro-batch of 1 under the leanest
 * recomputation its profile offers: the fill may choose it.
 */
static double layer_act_bytes(const struct costmodel *cm, int gpu, int tp,
			      enum costmodel_layer_type type)
{
	const struct costmodel_layer_profile *p =
		costmodel_profile(cm, gpu, tp, 1, type);
	double act;

	if (!p)
		return 0.0;
	act = p->act_bytes;
	for (int r = 0; r < COSTMODEL_NUM_RECOMPUTE; r++)
		if (p->recompute_act_bytes[r] >= 0 && p->recompute_act_bytes[r] < act)
			act = p->recompute_act_bytes[r];
	return act;
}

/*
 * Memory one transformer block takes on a GPU of @gpu at TP @tp with
 * @inflight micro-batches of size 1 in flight (1F1B keeps depth - stage of
 * them) and a dense model's optimizer state sharded over @replicas (the
 * distributed optimizer, which the fill turns on), or < 0 when the
 * profiles lack the entry.
 */
static double block_bytes(const struct costmodel *cm, int gpu, int tp,
			  int inflight, int ep_max, int replicas)
{
	const struct costmodel_model *m = costmodel_model(cm);
	double state, act;

	if (m->experts > 0) {
		double attn = layer_state_bytes(cm, gpu, tp, COSTMODEL_LAYER_ATTN, 1);
		double exp = layer_state_bytes(cm, gpu, tp, COSTMODEL_LAYER_EXPERT,
					       ep_max);

		if (attn < 0 || exp < 0)
			return -1.0;
		state = attn + exp;
		act = layer_act_bytes(cm, gpu, tp, COSTMODEL_LAYER_ATTN) +
		      layer_act_bytes(cm, gpu, tp, COSTMODEL_LAYER_EXPERT);
	} else {
		state = costmodel_block_state_bytes(cm, gpu, tp, replicas);
		if (state <= 0)
			state = layer_state_bytes(cm, gpu, tp,
						  COSTMODEL_LAYER_BLOCK, 1);
		if (state < 0)
			return -1.0;
		act = layer_act_bytes(cm, gpu, tp, COSTMODEL_LAYER_BLOCK);
	}
	return state + act * inflight;
}

/* Bytes a block takes on a stage: policy_env_stage_capacity()'s divisor. */
static double stage_block_bytes(const struct policy_env *env, int slot, int k,
				int stage, int depth, int free, int replicas)
{
	int tp = policy_tp_of(k);
	/*
	 * Routed experts tile over EP x ETP <= TP x replicas GPUs.  The
	 * replicas are not known before the template is; assume every stage
	 * of the pipeline takes this type at this TP, which never overstates
	 * them, so the estimate errs towards refusing.
	 */
	int experts = costmodel_model(env->cm)->experts;
	int ep_max = free / (tp * (depth > 0 ? depth : 1));

	if (ep_max > experts)
		ep_max = experts;
	while (ep_max & (ep_max - 1))
		ep_max &= ep_max - 1;	/* EP divides the experts: a power of two */
	return block_bytes(env->cm, env->slot_type[slot], tp, depth - stage,
			   ep_max > 1 ? ep_max : 1, replicas);
}

static double usable_bytes(const struct policy_env *env, int slot)
{
	return (costmodel_gpu(env->cm, env->slot_type[slot])->memory_gib -
		RUNTIME_OVERHEAD_GIB) * GIB;
}

double policy_env_stage_capacity(const struct policy_env *env, int slot, int k,
				 int stage, int depth, int free, int replicas)
{
	double per = stage_block_bytes(env, slot, k, stage, depth, free, replicas);
	double usable = usable_bytes(env, slot);

	if (per <= 0 || usable <= 0)
		return 0.0;
	return usable / per;
}

bool policy_env_tp_usable(const struct policy_env *env, int type, int tp)
{
	int slot = env->type_slot[type], k = __builtin_ctz(tp);

	return slot >= 0 && k < POLICY_NUM_TP && tp <= env->largest_node[slot] &&
	       env->speed[slot][k] > 0.0;
}

int policy_env_uniform_depth(const struct policy_env *env, int slot, int k)
{
	for (int d = 1; d <= POLICY_DMAX; d++) {
		double held = 0.0;

		for (int j = 0; j < d; j++)
			held += floor(policy_env_stage_capacity(env, slot, k, j, d,
								 env->type_gpus[slot], 1));
		if (held >= env->blocks)
			return d;
	}
	return 0;
}

/* Layers a pipeline must hold, in blocks: embedding and head by their weight. */
static int env_blocks(const struct costmodel *cm, int gpu)
{
	const struct costmodel_model *m = costmodel_model(cm);
	const struct costmodel_layer_profile *embed, *head, *block;
	double extra = 2.0;

	embed = costmodel_profile(cm, gpu, 1, 1, COSTMODEL_LAYER_EMBED);
	head = costmodel_profile(cm, gpu, 1, 1, COSTMODEL_LAYER_HEAD);
	block = costmodel_profile(cm, gpu, 1, 1, m->experts > 0 ?
				  COSTMODEL_LAYER_ATTN : COSTMODEL_LAYER_BLOCK);
	if (embed && head && block && block->param_bytes > 0 && m->experts == 0)
		extra = (embed->param_bytes + head->param_bytes) / block->param_bytes;
	return m->blocks + (int)ceil(extra);
}

/*
 * Split the bytes of a TP-1 block on a stage with one micro-batch in
 * flight into what every replica keeps whole and the optimizer state the
 * replicas shard: at 2 replicas each keeps half of it.  An MoE block's
 * estimate does not shard (see block_bytes()).
 */
static void block_split(struct policy_env *env, int s)
{
	double alone = stage_block_bytes(env, s, 0, 0, 1, env->type_gpus[s], 1);
	double pair = stage_block_bytes(env, s, 0, 0, 1, env->type_gpus[s], 2);

	env->usable[s] = usable_bytes(env, s);
	if (alone <= 0 || pair <= 0) {
		env->block_whole[s] = env->block_sharded[s] = 0.0;
		return;
	}
	env->block_sharded[s] = 2.0 * (alone - pair);
	env->block_whole[s] = alone - env->block_sharded[s];
}

double policy_env_mean_capacity(const struct policy_env *env, int replicas)
{
	double sum = 0.0;

	if (replicas < 1)
		replicas = 1;
	for (int s = 0; s < env->nslots; s++) {
		double per = env->block_whole[s] + env->block_sharded[s] / replicas;

		if (per > 0 && env->usable[s] > 0)
			sum += env->type_gpus[s] * env->usable[s] / per;
	}
	return env->gpus > 0 ? sum / env->gpus : 0.0;
}

static void env_static_features(struct policy_env *env)
{
	const struct costmodel *cm = env->cm;
	double best_stage = 0.0, best_gpu = 0.0;

	for (int s = 0; s < env->nslots; s++)
		for (int k = 0; k < POLICY_NUM_TP; k++) {
			double v = env->speed[s][k];

			best_stage = fmax(best_stage, v);
			best_gpu = fmax(best_gpu, v / policy_tp_of(k));
		}
	if (best_stage <= 0)
		best_stage = 1.0;
	if (best_gpu <= 0)
		best_gpu = 1.0;

	env->reference = 0.0;
	for (int s = 0; s < env->nslots; s++) {
		int gpu = env->slot_type[s];
		const struct costmodel_gpu *g = costmodel_gpu(cm, gpu);
		float *f = env->type_static[s];
		double per_gpu = 0.0;

		f[PT_PRESENT] = 1.0f;
		f[PT_SHARE] = (float)env->type_gpus[s] / env->gpus;
		f[PT_TFLOPS] = (float)(g->peak_tflops / 1000.0);
		f[PT_MEMORY] = (float)(g->memory_gib / 100.0);
		for (int k = 0; k < POLICY_NUM_TP; k++) {
			int tp = policy_tp_of(k);
			double v = env->speed[s][k];
			double bytes = block_bytes(cm, gpu, tp, 0, 1, 1);
			double cap = policy_env_stage_capacity(env, s, k, 0, 1,
								 env->type_gpus[s], 1);

			f[PT_ALPHA + k] = (float)(v / best_stage);
			f[PT_PHI + k] = (float)(v / tp / best_gpu);
			f[PT_MU + k] = bytes > 0 ?
				(float)fmin(bytes / (g->memory_gib * GIB), 1.0) : 1.0f;
			f[PT_NEED + k] = cap > 0 ?
				(float)fmin(env->blocks / cap / POLICY_DMAX, 1.0) : 1.0f;
			per_gpu = fmax(per_gpu, v / tp);
		}
		env->reference += per_gpu * env->type_gpus[s];
		block_split(env, s);
	}
	if (env->reference <= 0)
		env->reference = 1.0;
}

static void env_comp_features(struct policy_env *env)
{
	const struct costmodel_cluster *cl = env->cl;
	float *c = env->comp;
	float lo = 1.0f, hi = 0.0f;
	int small = 0;

	memset(c, 0, sizeof(env->comp));
	c[PC_LOG_SIZE] = (float)(log2(env->gpus) / 12.0);
	for (int s = 0; s < env->nslots; s++) {
		float share = (float)env->type_gpus[s] / env->gpus;

		c[PC_SHARE + s] = share;
		lo = fminf(lo, share);
		hi = fmaxf(hi, share);
	}
	c[PC_UNEVEN] = hi - lo;
	c[PC_TYPES] = (float)env->nslots / POLICY_SLOTS;
	for (size_t i = 0; i < cl->nnodes; i++)
		if (cl->nodes[i].gpus < 4)
			small += cl->nodes[i].gpus;
	c[PC_SMALL_NODES] = (float)small / env->gpus;
	c[PC_MEAN_NODE] = (float)env->gpus / cl->nnodes / 8.0f;
}

int policy_env_init(struct policy_env *env, const struct costmodel *cm,
		    const struct costmodel_cluster *cl)
{
	struct slot_key keys[COSTMODEL_MAX_GPU_TYPES];
	int gpus[COSTMODEL_MAX_GPU_TYPES] = { 0 };
	int nodes[COSTMODEL_MAX_GPU_TYPES] = { 0 };
	int largest[COSTMODEL_MAX_GPU_TYPES] = { 0 };
	int ntypes = costmodel_num_gpus(cm), n = 0;

	memset(env, 0, sizeof(*env));
	env->cm = cm;
	env->cl = cl;
	for (size_t i = 0; i < cl->nnodes; i++) {
		int t = cl->nodes[i].gpu;

		if (t < 0 || t >= ntypes || cl->nodes[i].gpus <= 0)
			return ar_seterr(-AR_EINVAL, "cluster node %zu: bad GPU type or count",
					 i);
		gpus[t] += cl->nodes[i].gpus;
		nodes[t]++;
		if (cl->nodes[i].gpus > largest[t])
			largest[t] = cl->nodes[i].gpus;
		env->gpus += cl->nodes[i].gpus;
		if (cl->nodes[i].gpus > env->max_tp)
			env->max_tp = cl->nodes[i].gpus;
	}
	if (env->gpus == 0)
		return ar_seterr(-AR_EINFEASIBLE, "the cluster has no GPUs");
	for (int t = 0; t < ntypes; t++) {
		env->type_slot[t] = -1;
		if (!gpus[t])
			continue;
		keys[n].type = t;
		keys[n].speed = costmodel_stage_speed(cm, t, 1);
		keys[n].tflops = costmodel_gpu(cm, t)->peak_tflops;
		keys[n].name = costmodel_gpu(cm, t)->name;
		n++;
	}
	if (n > POLICY_SLOTS)
		return ar_seterr(-AR_EINVAL,
				 "the cluster holds %d GPU types; the learned planner handles at most %d",
				 n, POLICY_SLOTS);
	qsort(keys, n, sizeof(keys[0]), slot_key_cmp);
	env->nslots = n;
	for (int s = 0; s < n; s++) {
		env->slot_type[s] = keys[s].type;
		env->type_slot[keys[s].type] = s;
		env->type_gpus[s] = gpus[keys[s].type];
		env->type_nodes[s] = nodes[keys[s].type];
		env->largest_node[s] = largest[keys[s].type];
		for (int k = 0; k < POLICY_NUM_TP; k++)
			env->speed[s][k] = costmodel_stage_speed(cm, keys[s].type,
								 policy_tp_of(k));
	}
	env->blocks = env_blocks(cm, env->slot_type[0]);
	env_static_features(env);
	env_comp_features(env);
	return 0;
}
