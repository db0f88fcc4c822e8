/*
 * migrate_private.h - internals of libarachne-migrate shared by its files
 * and its tests.  Not installed.
 */
#ifndef AR_MIGRATE_PRIVATE_H
#define AR_MIGRATE_PRIVATE_H

#ifndef AR_INTERNAL
#error "migrate_private.h is internal to libarachne-migrate"
#endif

#include <stdbool.h>
#include <stdint.h>

#include "ar.h"
#include "migrate.h"

/* Link classes, fastest first: the order sender choice prefers them in. */
enum migrate_link {
	MIGRATE_LINK_LOCAL,		/* same GPU: no transfer */
	MIGRATE_LINK_INTRA,		/* same node */
	MIGRATE_LINK_NET,		/* across the network */
};

/* floor(@total * @i / @n) without overflow (shard and expert boundaries). */
static inline uint64_t migrate_split(uint64_t total, uint64_t i, uint64_t n)
{
	return (total / n) * i + (total % n) * i / n;
}

enum migrate_link migrate_link_of(const struct migrate *m, int a, int b);
/*
 * The rate (bytes/s) of one stage-2 transfer from @from to @to: the
 * intra-node link, or each GPU's share of its node's NIC (the node's GPUs
 * send and receive at once), the slower end's.
 */
double migrate_share_Bps(const struct migrate *m, int from, int to);

/* Deep copies used by migrate_diff() and migrate_from_json(). */
struct migrate_layout *migrate_layout_dup(const struct migrate_layout *l);
struct migrate_topo *migrate_topo_dup(const struct migrate_topo *t);

/*
 * Builds the rounds of stage 2 (schedule.c) from the tuples in the order
 * migrate_diff() emits them, receiver by receiver in shard order, and
 * sizes them from @m->stats.lower_bound_s, which the diff's loads give.
 */
int migrate_schedule(struct migrate *m, const struct migrate_opts *opts);

/* Fills every shard's buffer offset from the shard order (diff.c). */
void migrate_shards_place(struct migrate_shard *sh, int n);

/* The shard of @sh[0..n) (sorted) containing [lo, hi) of a tensor; NULL. */
const struct migrate_shard *
migrate_shard_find(const struct migrate_shard *sh, int n, int layer,
		   int tensor, uint64_t lo, uint64_t hi);

/* True when no rank holds old state (the job starts). */
bool migrate_is_fresh(const struct migrate *m);

/* Tuple sort order: (round, from, to, layer, tensor, lo). */
int migrate_tuple_cmp(const void *a, const void *b);

/* ---------------------------------------------------------------------
 * Transports (transport.c, transport_mpi.c, transport_nccl.c).  A
 * transport posts the sends and receives of one step (stage 1, or one
 * round of stage 2) and waits for them with a progress timeout.
 * ------------------------------------------------------------------- */

struct migrate_xfer {
	int peer;
	void *buf;			/* send: the data; recv: its place */
	size_t bytes;
	bool send;
};

struct migrate_transport_ops {
	const char *name;
	/* Start and finish one step's transfers; -AR_ETIMEOUT names a peer */
	int (*step)(struct migrate_transport *tp, struct migrate_xfer *xs,
		    int nx, double timeout_s);
	int (*copy)(struct migrate_transport *tp, void *dst, const void *src,
		    size_t bytes);
	int (*agree)(struct migrate_transport *tp, bool ok, double timeout_s);
	void *(*alloc)(struct migrate_transport *tp, size_t bytes);
	void (*release)(struct migrate_transport *tp, void *buf);
	int (*to_host)(struct migrate_transport *tp, void *host,
		       const void *buf, size_t bytes);
	int (*from_host)(struct migrate_transport *tp, void *buf,
			 const void *host, size_t bytes);
	void (*destroy)(struct migrate_transport *tp);
};

struct migrate_transport {
	const struct migrate_transport_ops *ops;
	int rank;
	int size;
	void *priv;
};

/* ---------------------------------------------------------------------
 * The rendezvous (rdzv.c), shared with the transports that run over it.
 * ------------------------------------------------------------------- */

struct migrate_rdzv_peer {
	int ctl;			/* rank 0 <-> this member: control */
	int data;			/* data connection, -1 until first use */
	uint16_t port;			/* its listening port */
	json_t *addrs;			/* its IPv4 addresses, to try in order */
};

struct migrate_rdzv {
	char name[208];
	char path[4096];		/* rank 0's contact file */
	char called_off[4096];		/* "": none (migrate_rdzv_opts) */
	int rank, size;
	double join_timeout_s;		/* for everyone to arrive */
	double timeout_s;		/* every later wait */
	uint64_t session;		/* rank 0's random number */
	int listen_fd;
	uint16_t port;
	struct migrate_rdzv_peer *peers;	/* [size] */
};

/* Blocking I/O on a non-blocking socket, bounded by @deadline (ar_now()). */
int rdzv_write_all(int fd, const void *buf, size_t len, double deadline);
int rdzv_read_all(int fd, void *buf, size_t len, double deadline);
/*
 * The data connection to @peer, made on first use: the lower rank
 * connects, the higher accepts.  A descriptor or a negative code.
 */
int rdzv_data_fd(struct migrate_rdzv *r, int peer, double deadline);
/* Closes every data connection, so that peers waiting on them see EOF. */
void rdzv_data_close_all(struct migrate_rdzv *r);
/* The agreement of migrate_agree(), over the control connections. */
int rdzv_agree(struct migrate_rdzv *r, bool ok, double timeout_s);

int migrate_tcp_open(struct migrate_rdzv *r, struct migrate_transport **tpp);

/*
 * The MPI-dependent constructors.  These are the only places the build
 * options show: without MPI or NCCL the stubs answer -AR_ENOTBUILT.
 */
#ifdef HAVE_MPI
int migrate_mpi_open(const void *mpi_comm, struct migrate_transport **tpp);
#else
static inline int migrate_mpi_open(const void *mpi_comm,
				   struct migrate_transport **tpp)
{
	*tpp = NULL;
	return -AR_ENOTBUILT;
}
#endif /* HAVE_MPI */

#if defined(HAVE_NCCL) && defined(HAVE_MPI)
int migrate_nccl_open(const void *mpi_comm, int cuda_device,
		      struct migrate_transport **tpp);
#else
static inline int migrate_nccl_open(const void *mpi_comm, int cuda_device,
				    struct migrate_transport **tpp)
{
	*tpp = NULL;
	return -AR_ENOTBUILT;
}
#endif /* HAVE_NCCL && HAVE_MPI */

#ifdef HAVE_NCCL
int migrate_nccl_open_rdzv(struct migrate_rdzv *r, int cuda_device,
			   struct migrate_transport **tpp);
#else
static inline int migrate_nccl_open_rdzv(struct migrate_rdzv *r,
					 int cuda_device,
					 struct migrate_transport **tpp)
{
	*tpp = NULL;
	return -AR_ENOTBUILT;
}
#endif /* HAVE_NCCL */

#endif /* AR_MIGRATE_PRIVATE_H */
