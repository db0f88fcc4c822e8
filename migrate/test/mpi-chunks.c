/*
 * mpi-chunks - the MPI transport's split of large transfers into messages,
 * for t0504 under mpirun -np 2:
 *
 *   mpi-chunks [--rank1-chunk N] BYTES...
 *
 * In one step rank 0 sends rank 1 one transfer of each size in BYTES and
 * rank 1 sends rank 0 the same.  Every MPI_Isend is counted on the way
 * (through the MPI profiling interface), and each side checks every byte
 * it received.  --rank1-chunk sets ARACHNE_MIGRATE_MPI_CHUNK on rank 1
 * alone, before the transport starts.  Rank 0 prints
 *   messages M largest L
 * (M over both ranks, L the largest message) and each rank "rank R: ok"
 * or what went wrong; the exit status is 0 only when both are ok.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#define AR_INTERNAL
#include "migrate_private.h"

static long isends;
static int largest;

/* Every message the transport sends passes here. */
int MPI_Isend(const void *buf, int count, MPI_Datatype type, int dest,
	      int tag, MPI_Comm comm, MPI_Request *req)
{
	isends++;
	if (count > largest)
		largest = count;
	return PMPI_Isend(buf, count, type, dest, tag, comm, req);
}

/* The byte at @x of transfer @k from rank @from. */
static unsigned char pattern(int from, int k, size_t x)
{
	return (unsigned char)(x * 131 + (size_t)k * 7 + (size_t)from * 61 +
			       (x >> 12));
}

static int run(int me, int nsizes, const size_t *sizes)
{
	struct migrate_transport *tp = NULL;
	struct migrate_xfer *xs = calloc(2 * nsizes, sizeof(*xs));
	int rc, nx = 0;

	if (!xs)
		return -ENOMEM;
	rc = migrate_transport_mpi_create(NULL, &tp);
	for (int k = 0; rc == 0 && k < nsizes; k++) {
		unsigned char *out = malloc(sizes[k] + 1);
		unsigned char *in = malloc(sizes[k] + 1);

		xs[nx++] = (struct migrate_xfer){
			.peer = 1 - me, .buf = out, .bytes = sizes[k],
			.send = true,
		};
		xs[nx++] = (struct migrate_xfer){
			.peer = 1 - me, .buf = in, .bytes = sizes[k],
		};
		if (!out || !in) {
			rc = -ENOMEM;
			break;
		}
		for (size_t x = 0; x < sizes[k]; x++)
			out[x] = pattern(me, k, x);
		memset(in, 0, sizes[k]);
	}
	if (rc == 0)
		rc = tp->ops->step(tp, xs, nx, 60.0);
	for (int k = 0; rc == 0 && k < nsizes; k++) {
		const unsigned char *in = xs[2 * k + 1].buf;

		for (size_t x = 0; x < sizes[k]; x++) {
			if (in[x] != pattern(1 - me, k, x)) {
				rc = ar_seterr(-AR_EINVAL,
					       "transfer %d of %zu bytes: byte %zu is wrong",
					       k, sizes[k], x);
				break;
			}
		}
	}
	for (int i = 0; i < nx; i++)
		free(xs[i].buf);
	free(xs);
	migrate_transport_destroy(tp);
	return rc;
}

int main(int argc, char **argv)
{
	size_t sizes[16];
	long all_isends = 0;
	int me, nprocs, nsizes = 0, all_largest = 0, failed, any_failed = 0;
	const char *rank1_chunk = NULL;
	int rc;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &me);
	MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
	for (int i = 1; i < argc; i++) {
		char *end;

		if (!strcmp(argv[i], "--rank1-chunk") && i + 1 < argc) {
			rank1_chunk = argv[++i];
			continue;
		}
		errno = 0;
		if (nsizes < 16)
			sizes[nsizes] = strtoull(argv[i], &end, 10);
		if (nsizes == 16 || errno || end == argv[i] || *end ||
		    !sizes[nsizes]) {
			if (me == 0)
				fprintf(stderr, "mpi-chunks: bad size %s\n",
					argv[i]);
			MPI_Finalize();
			return 2;
		}
		nsizes++;
	}
	if (nprocs != 2 || !nsizes) {
		if (me == 0)
			fprintf(stderr, "usage: mpirun -np 2 mpi-chunks [--rank1-chunk N] BYTES...\n");
		MPI_Finalize();
		return 2;
	}
	if (rank1_chunk && me == 1)
		setenv("ARACHNE_MIGRATE_MPI_CHUNK", rank1_chunk, 1);

	rc = run(me, nsizes, sizes);
	failed = rc < 0;
	if (failed)
		printf("rank %d: %s\n", me, ar_errmsg());
	else
		printf("rank %d: ok\n", me);
	fflush(stdout);
	MPI_Reduce(&isends, &all_isends, 1, MPI_LONG, MPI_SUM, 0,
		   MPI_COMM_WORLD);
	MPI_Reduce(&largest, &all_largest, 1, MPI_INT, MPI_MAX, 0,
		   MPI_COMM_WORLD);
	MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX,
		      MPI_COMM_WORLD);
	if (me == 0)
		printf("messages %ld largest %d\n", all_isends, all_largest);
	MPI_Finalize();
	return any_failed ? 1 : 0;
}
