/*
 * comm.c - how a rank waits for MPI.  Blocking MPI calls spin; ranks that
 * share cores (the tests, a "cluster" of CPU cores) would then take the
 * cores from the ranks that compute.  Every wait here tests its requests,
 * spins a little, and then sleeps between tests, a little longer each
 * time up to a bound, so a short wait stays short and a long one is idle.
 */
#include "config.h"

#include <time.h>

#include "gpt.h"

#define SPIN_TESTS	64
#define SLEEP_MIN_NS	2000
#define SLEEP_MAX_NS	200000

void gpt_waitall(int n, MPI_Request *reqs)
{
	long ns = SLEEP_MIN_NS;
	int done = 0;

	for (int i = 0;; i++) {
		MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
		if (done)
			return;
		if (i < SPIN_TESTS)
			continue;
		nanosleep(&(struct timespec){ 0, ns }, NULL);
		if (ns < SLEEP_MAX_NS)
			ns += ns / 2;
	}
}

void gpt_wait(MPI_Request *req)
{
	gpt_waitall(1, req);
}

void gpt_recv(void *buf, int count, MPI_Datatype type, int src, int tag,
	      MPI_Comm comm)
{
	MPI_Request req;

	MPI_Irecv(buf, count, type, src, tag, comm, &req);
	gpt_wait(&req);
}

void gpt_allreduce(void *buf, int count, MPI_Datatype type, MPI_Op op,
		   MPI_Comm comm)
{
	MPI_Request req;

	MPI_Iallreduce(MPI_IN_PLACE, buf, count, type, op, comm, &req);
	gpt_wait(&req);
}

void gpt_allgather(const void *send, int count, MPI_Datatype type, void *recv,
		   MPI_Comm comm)
{
	MPI_Request req;

	MPI_Iallgather(send, count, type, recv, count, type, comm, &req);
	gpt_wait(&req);
}

void gpt_barrier(MPI_Comm comm)
{
	MPI_Request req;

	MPI_Ibarrier(comm, &req);
	gpt_wait(&req);
}
