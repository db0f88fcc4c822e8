/*
 * migrate.h - libarachne-migrate: Direct State Migration between two plans
 * (the paper's §5.6).  When the plan of a running job changes, the model
 * state (weights, gradients, optimizer state) moves GPU to GPU, never
 * through storage.
 *
 * The pieces, in the order a caller uses them:
 *   1. a state layout (how many bytes each layer's state has, split into
 *      parts and kinds, and how it is sharded) and a topology (which GPU
 *      sits in which node, and the links' bandwidths), both usually derived
 *      from the cost model;
 *   2. migrate_diff(): the old and the new plan become migration tuples,
 *      each a byte range of one layer's state that moves from one old
 *      holder to one new holder, with the sender chosen by link speed;
 *   3. the schedule (part of the diff's result): stage 1 runs the tuples
 *      inside pipelines in parallel, stage 2 the cross-pipeline tuples as
 *      rounds of point-to-point exchanges; migrate_predict() prices it;
 *   4. migrate_run(): every rank executes its part over a transport (MPI
 *      host buffers or NCCL device buffers).
 * docs/migrate.md gives the shard layout, the JSON forms and the failure
 * semantics.
 *
 * Conventions: int functions return 0 or -errno / -AR_E* (common/ar.h),
 * with a message in ar_errmsg().  A struct migrate is read-only once built:
 * threads may share it.
 */
#ifndef AR_MIGRATE_H
#define AR_MIGRATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "costmodel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------
 * State layout.
 *
 * Every layer's state is up to six flat byte arrays ("tensors"): the
 * dense part (everything but the routed experts) and the expert part, each
 * as weights, gradients and optimizer state.  A dense tensor of B bytes is
 * sharded TP ways along its sharded dimension, which the layout places
 * outermost: TP rank k of t holds bytes [B*k/t, B*(k+1)/t) (floored).  An
 * expert tensor is E experts back to back, expert e at
 * [B*e/E, B*(e+1)/E); an ETP group slices each expert the same way.
 * Re-sharding (TP 2 -> 4, EP 8 -> 4, ...) is then intersection of ranges.
 * ------------------------------------------------------------------- */

enum migrate_part {
	MIGRATE_PART_DENSE,		/* TP-sharded */
	MIGRATE_PART_EXPERT,		/* routed experts, EP x ETP */
	MIGRATE_NUM_PARTS
};

enum migrate_kind {
	MIGRATE_KIND_WEIGHT,		/* BF16 weights */
	MIGRATE_KIND_GRAD,		/* gradients */
	MIGRATE_KIND_OPTIM,		/* master weights and Adam moments */
	MIGRATE_NUM_KINDS
};

#define MIGRATE_NUM_TENSORS	(MIGRATE_NUM_PARTS * MIGRATE_NUM_KINDS)

struct migrate_layer {
	uint64_t bytes[MIGRATE_NUM_TENSORS]; /* [part * 3 + kind], unsharded */
	int experts;			/* routed experts; 0: dense layer */
};

struct migrate_layout {
	int nlayers;			/* the cost model's layer list */
	struct migrate_layer *layers;	/* [nlayers], owned */
};

/*
 * migrate_layout_create() - an empty layout of @nlayers layers (all zero
 * bytes) for callers that fill it by hand.  Caller frees with
 * migrate_layout_free().  NULL with errno on failure.
 */
struct migrate_layout *migrate_layout_create(int nlayers);
void migrate_layout_free(struct migrate_layout *layout);

/*
 * migrate_layout_from_costmodel() - the layout of @cm's model: each
 * layer's parameter count from its profile (param_bytes at TP 1, or at
 * the smallest profiled TP times that TP), state bytes per parameter from
 * the model, split as the cost model counts them: 2 bytes of BF16
 * weights, 2 of BF16 gradients, the rest (master weights and Adam
 * moments) optimizer state.  Caller frees *@layoutp with migrate_layout_free().
 */
int migrate_layout_from_costmodel(const struct costmodel *cm,
				  struct migrate_layout **layoutp);

/* Total state bytes of the model (one copy, unsharded). */
uint64_t migrate_layout_total_bytes(const struct migrate_layout *layout);

/* ---------------------------------------------------------------------
 * Topology: the nodes of the cluster and their links.
 * ------------------------------------------------------------------- */

struct migrate_node {
	char name[64];			/* hostname, in file names */
	int gpus;			/* GPUs in the node */
	double intra_GBps;		/* GPU to GPU in the node, each way */
	double nic_GBps;		/* the node's network link, each way */
};

struct migrate_topo {
	int nnodes;
	struct migrate_node *nodes;	/* [nnodes], owned; cluster order */
};

struct migrate_topo *migrate_topo_create(int nnodes);
void migrate_topo_free(struct migrate_topo *topo);

/*
 * migrate_topo_from_cluster() - nodes of @cl with their network and
 * intra-node bandwidths as the cost model resolves them
 * (costmodel_node_network_gbps() / 8, costmodel_node_intra_GBps()), times
 * the cost model's link efficiency of 0.8.
 * Caller frees *@topop with migrate_topo_free().
 */
int migrate_topo_from_cluster(const struct costmodel *cm,
			      const struct costmodel_cluster *cl,
			      struct migrate_topo **topop);

/* ---------------------------------------------------------------------
 * The migration: ranks, shards, tuples and their schedule.
 * ------------------------------------------------------------------- */

/* A migration rank is one GPU that holds state in either plan. */
struct migrate_rank {
	int node;			/* index into the topology */
	int gpu;			/* GPU index inside the node */
	int old_pipe;			/* old plan's pipeline, -1: none */
	int new_pipe;			/* new plan's pipeline, -1: none */
};

/* One contiguous byte range of one tensor of one layer. */
struct migrate_shard {
	int32_t layer;
	int32_t tensor;			/* part * 3 + kind */
	uint64_t lo, hi;		/* [lo, hi) in the tensor's layout */
	uint64_t offset;		/* its start in the rank's buffer */
};

/*
 * One transfer: @count blocks of hi - lo bytes of one tensor.  Block k is
 * bytes [lo + k * stride, hi + k * stride) of the tensor; it lies at
 * src_offset + k * src_stride in the sender's old buffer and at
 * dst_offset + k * dst_stride in the receiver's new buffer.  Most tuples
 * are one block (count 1, strides 0).  Several blocks are the same slice
 * of consecutive experts, which an expert re-layout (EP, ETP) moves
 * between one pair of GPUs: one tuple instead of one per expert.
 * @from == @to is a copy inside one GPU (no link used).  @round is 0 for
 * stage 1 (intra-pipeline, all at once) and 1.. for the rounds of stage 2.
 */
struct migrate_tuple {
	int32_t layer;
	int32_t tensor;
	uint64_t lo, hi;		/* its first block */
	int32_t from, to;		/* migration ranks */
	int32_t round;
	int32_t count;			/* blocks, at least 1 */
	uint64_t stride;		/* in the tensor, block to block */
	uint64_t src_offset, src_stride;
	uint64_t dst_offset, dst_stride;
};

/* The bytes @t moves: all its blocks. */
static inline uint64_t migrate_tuple_bytes(const struct migrate_tuple *t)
{
	return (uint64_t)t->count * (t->hi - t->lo);
}

struct migrate_stats {
	uint64_t bytes_moved;		/* over links (from != to) */
	uint64_t bytes_min;		/* bytes whose owner changes */
	uint64_t bytes_local;		/* bytes kept on their GPU */
	long ntuples;			/* tuples over links */
	int nrounds;			/* stage-2 rounds */
	double stage1_s;		/* predicted, intra-pipeline stage */
	double stage2_s;		/* predicted, all rounds */
	double time_s;			/* stage1_s + stage2_s */
	double lower_bound_s;		/* busiest link: load / speed */
	double diff_s;			/* wall time of migrate_diff() */
};

struct migrate {
	int nranks;
	struct migrate_rank *ranks;	/* [nranks], sorted by (node, gpu) */
	struct migrate_topo *topo;	/* owned copy */
	struct migrate_layout *layout;	/* owned copy */
	/*
	 * Shard lists per rank, sorted by (layer, tensor, lo); ranks that
	 * hold the same shards may share one list.
	 */
	struct migrate_shard **old_shards;	/* [nranks][n_old[r]] */
	int *n_old;
	struct migrate_shard **new_shards;
	int *n_new;
	/* tuples sorted by (round, from, to, layer, tensor, lo) */
	struct migrate_tuple *tuples;
	long ntuples;
	struct migrate_stats stats;
};

struct migrate_opts {
	/*
	 * Stage-2 transfers are cut into chunks that take about this long on
	 * their link, so that rounds stay balanced; 0: the lower bound / 32,
	 * at least 1 ms.
	 */
	double round_s;
	uint64_t min_chunk_bytes;	/* 0: 1 MiB */
};

/*
 * migrate_diff() - the migration from @old_plan to @new_plan.  Either plan
 * may be NULL (no state before / none after).  Every byte of every new
 * shard gets exactly one source: the same GPU when it already holds it,
 * otherwise the old holder with the fastest link (same node before
 * network), the least loaded among equals.  Caller frees *@mp with
 * migrate_free().  -AR_EINVAL names a plan that does not fit @layout or
 * @topo; -AR_EINFEASIBLE when the new plan needs state that no old GPU
 * holds (while the old plan is not empty).
 */
int migrate_diff(const struct migrate_layout *layout,
		 const struct migrate_topo *topo,
		 const struct costmodel_plan *old_plan,
		 const struct costmodel_plan *new_plan,
		 const struct migrate_opts *opts, struct migrate **mp);
void migrate_free(struct migrate *m);

/*
 * migrate_diff_costmodel() - migrate_diff() with the layout of @cm's model
 * and the topology of @cl: what plannerd's replan answer and
 * arachne-migrate use.  Both plans are placed on @cl (it holds every node
 * of either).  Caller frees *@mp with migrate_free().
 */
int migrate_diff_costmodel(const struct costmodel *cm,
			   const struct costmodel_cluster *cl,
			   const struct costmodel_plan *old_plan,
			   const struct costmodel_plan *new_plan,
			   const struct migrate_opts *opts,
			   struct migrate **mp);

/* Rank of GPU (@node, @gpu), or -1 when it holds state in neither plan. */
int migrate_rank_find(const struct migrate *m, int node, int gpu);

/* Bytes of the rank's old and new state buffers (its shards back to back). */
uint64_t migrate_rank_old_bytes(const struct migrate *m, int rank);
uint64_t migrate_rank_new_bytes(const struct migrate *m, int rank);

/*
 * migrate_check() - verify the invariants: every byte of every new shard
 * has exactly one source tuple, each tuple's range lies inside a shard of
 * its sender's old state and of its receiver's new state, and both sides
 * of every stage-2 round agree (each rank sends to at most one peer and
 * receives from at most one peer per round).  0 or -AR_EINVAL naming the
 * first violation.
 */
int migrate_check(const struct migrate *m);

/*
 * migrate_predict() - (re)compute @m->stats' times: stage 1 as all its
 * transfers at once, each round of stage 2 likewise, each bounded by its
 * busiest link (a GPU's intra-node port or a node's NIC, per direction);
 * the lower bound is the busiest link over the whole migration when every
 * byte comes from its fastest holder.
 */
void migrate_predict(struct migrate *m);

/*
 * JSON (docs/migrate.md): the whole migration, as plannerd's replan answer
 * and the file `arachne-migrate --migration` reads.  migrate_to_json()
 * returns a new reference (NULL on ENOMEM); migrate_from_json() checks the
 * object and stores a new migration in *@mp (caller frees).
 */
json_t *migrate_to_json(const struct migrate *m);
int migrate_from_json(const json_t *root, struct migrate **mp);

/* ---------------------------------------------------------------------
 * Execution.
 * ------------------------------------------------------------------- */

struct migrate_transport;		/* opaque */

/*
 * migrate_transport_mpi_create() - host-buffer transport over MPI
 * point-to-point (MPI_Isend/MPI_Irecv).  @mpi_comm points to an MPI_Comm
 * whose rank i is migration rank i (NULL: MPI_COMM_WORLD).  MPI must be
 * initialized.  Collective: the ranks agree on the message size (1 GiB,
 * or ARACHNE_MIGRATE_MPI_CHUNK, docs/migrate.md).  -AR_ENOTBUILT when
 * built without MPI.
 */
int migrate_transport_mpi_create(const void *mpi_comm,
				 struct migrate_transport **tpp);

/*
 * migrate_transport_nccl_create() - device-buffer transport over NCCL
 * (ncclSend/ncclRecv in groups); the NCCL unique id is broadcast over
 * @mpi_comm.  Uses CUDA device @cuda_device (the GPU's index in its node;
 * a process that sees a single device uses it, as Slurm binds one GPU per
 * task); buffers given to migrate_run() must be device memory.
 * Collective: every rank learns whether all got their device before NCCL
 * starts.  -AR_ENOTBUILT without NCCL, -ENODEV without a GPU.
 */
int migrate_transport_nccl_create(const void *mpi_comm, int cuda_device,
				  struct migrate_transport **tpp);

/* ---------------------------------------------------------------------
 * Rendezvous: ranks started separately meet.
 *
 * The ranks of a migration may be started by different launchers: one
 * srun in the running job and one in each allocation that joins it, or a
 * trainer's own ranks.  They cannot share an MPI world, so they meet
 * through a directory every one of them sees (the job's plan directory on
 * the shared file system) and then talk over TCP:
 *
 *   rank 0 publishes DIR/NAME.rdzv (addresses, port, a session number;
 *   written atomically) and waits for the others; every other rank polls
 *   for the file, connects and says hello; when all have come, rank 0
 *   gives everyone the table of addresses and removes the file.
 *
 * Each member knows its rank and the size beforehand (a migration's rank
 * follows from its node and GPU: migrate_rank_find()).  A contact file
 * left by a crashed meeting is recognised (dead listener or old session)
 * and waited past.  Every wait is bounded: join_timeout_s for the
 * meeting, timeout_s for every later exchange; a member that dies is seen
 * at once by its peers (end of file on its connections).
 *
 * What a process does with the rendezvous: run a migration over it
 * (migrate_transport_tcp_create(), or _nccl_rdzv_create() for device
 * buffers, which sends NCCL's unique id over it), or use its primitives
 * (broadcast, point-to-point, agreement) to bootstrap its own
 * communicators.  Not thread-safe: one thread uses a rendezvous.
 * ------------------------------------------------------------------- */

struct migrate_rdzv;			/* opaque */

struct migrate_rdzv_opts {
	const char *dir;		/* a directory every rank sees */
	const char *name;		/* the meeting; letters, digits, . _ - */
	int rank;			/* this process, 0 .. size - 1 */
	int size;
	/* The wait for everyone to arrive; 0: timeout_s. */
	double join_timeout_s;
	/* Every later wait (no progress in a transfer, an agreement); 0: 60 s. */
	double timeout_s;
	/*
	 * The IPv4 address others reach this process at; NULL: every
	 * address of this host's interfaces that are up, loopback last.
	 */
	const char *addr;
	/*
	 * NULL, or a file whose appearance calls the meeting off: a rank
	 * still waiting for the others stops at once with -AR_EABORT and
	 * the file's first line (arachnectl abort writes one, so that the
	 * ranks of a join it abandoned do not wait out the deadline).
	 */
	const char *called_off;
};

/*
 * migrate_rdzv_join() - meet the other ranks of @o->name in @o->dir.
 * Collective over the @o->size ranks.  Caller frees *@rp with
 * migrate_rdzv_close().  -AR_ETIMEOUT names the ranks that did not come
 * (on rank 0) or says that rank 0 never published; -AR_EABORT carries
 * rank 0's refusal (a duplicate rank, a different size) or why the meeting
 * was called off (@o->called_off).
 */
int migrate_rdzv_join(const struct migrate_rdzv_opts *o,
		      struct migrate_rdzv **rp);
void migrate_rdzv_close(struct migrate_rdzv *r);
int migrate_rdzv_rank(const struct migrate_rdzv *r);
int migrate_rdzv_size(const struct migrate_rdzv *r);

/*
 * Collective: @len bytes of @buf from rank @root to every rank.  Every
 * rank passes the same @len.
 */
int migrate_rdzv_bcast(struct migrate_rdzv *r, int root, void *buf,
		       size_t len);

/*
 * Point to point over the pair's data connection: a message of exactly
 * @len bytes (the receiver must expect that length).  Messages between two
 * ranks arrive in the order they were sent.
 */
int migrate_rdzv_send(struct migrate_rdzv *r, int peer, const void *buf,
		      size_t len);
int migrate_rdzv_recv(struct migrate_rdzv *r, int peer, void *buf,
		      size_t len);

/*
 * Collective: 0 when every rank passes @ok = true; -AR_EABORT naming a
 * rank that failed or left, -AR_ETIMEOUT naming one that did not answer.
 */
int migrate_rdzv_agree(struct migrate_rdzv *r, bool ok);

/*
 * migrate_rdzv_connect_all() - collective: open the data connection to
 * every other rank now, so that a process can run its own message layer
 * over them (migrate_rdzv_fd()) without one rank waiting to accept while
 * its peer waits for something else.  Bounded by the rendezvous' timeout.
 */
int migrate_rdzv_connect_all(struct migrate_rdzv *r);

/*
 * The data connection to @peer (a non-blocking stream socket) once it is
 * open, or -1.  It stays the rendezvous' own: do not close it, and do not
 * mix migrate_rdzv_send()/_recv() or a migration with your own messages
 * on it.
 */
int migrate_rdzv_fd(const struct migrate_rdzv *r, int peer);

/*
 * migrate_transport_tcp_create() - host-buffer transport over @r's
 * connections (rank i of @r is migration rank i).  @r must outlive the
 * transport.  After a failed migrate_run() the data connections are
 * closed: destroy the transport; the rendezvous still agrees.
 */
int migrate_transport_tcp_create(struct migrate_rdzv *r,
				 struct migrate_transport **tpp);

/*
 * migrate_transport_nccl_rdzv_create() - the NCCL transport of
 * migrate_transport_nccl_create(), bootstrapped over @r instead of MPI:
 * rank 0's NCCL unique id is broadcast over it, agreements go over it.
 * -AR_ENOTBUILT without NCCL.
 */
int migrate_transport_nccl_rdzv_create(struct migrate_rdzv *r,
				       int cuda_device,
				       struct migrate_transport **tpp);

/* Releases @tp (an NCCL communicator is aborted if a run failed). */
void migrate_transport_destroy(struct migrate_transport *tp);

/* The rank of this process in the transport, and the transport's name. */
int migrate_transport_rank(const struct migrate_transport *tp);
const char *migrate_transport_name(const struct migrate_transport *tp);

/*
 * Buffers of one transport: host memory for MPI, device memory for NCCL.
 * migrate_transport_alloc() returns NULL with errno on failure.
 */
void *migrate_transport_alloc(struct migrate_transport *tp, size_t bytes);
void migrate_transport_release(struct migrate_transport *tp, void *buf);
int migrate_transport_to_host(struct migrate_transport *tp, void *host,
			      const void *buf, size_t bytes);
int migrate_transport_from_host(struct migrate_transport *tp, void *buf,
				const void *host, size_t bytes);

struct migrate_run_opts {
	/*
	 * Longest time a rank waits without any of its transfers making
	 * progress (and the longest wait in an agreement) before it declares
	 * its peers dead; 0: 60 s.
	 */
	double timeout_s;
	/*
	 * Called before each step (0: stage 1, 1..nrounds: stage 2) with
	 * @progress_arg; NULL for none.  arachne-migrate reports progress
	 * with it and injects faults for its tests.
	 */
	void (*progress)(void *progress_arg, int step, int nsteps);
	void *progress_arg;
};

/*
 * migrate_run() - execute this rank's part of @m.  @old_state holds the
 * rank's old shards back to back (migrate_rank_old_bytes()), @new_state
 * receives its new shards.  Collective: every rank of the transport calls
 * it.  It ends with an agreement, so 0 means every rank succeeded; any
 * failure or a peer silent past the timeout returns -AR_EABORT or
 * -AR_ETIMEOUT on every rank that is still alive, with the peer named.
 * @old_state is never written.
 */
int migrate_run(const struct migrate *m, struct migrate_transport *tp,
		const void *old_state, void *new_state,
		const struct migrate_run_opts *opts);

/*
 * migrate_agree() - collective: 0 when every rank passes @ok = true;
 * -AR_EABORT when some rank passed false; -AR_ETIMEOUT when a rank did not
 * take part within @timeout_s.  Used around shard-file commits.
 */
int migrate_agree(struct migrate_transport *tp, bool ok, double timeout_s);

#ifdef __cplusplus
}
#endif
#endif /* AR_MIGRATE_H */
