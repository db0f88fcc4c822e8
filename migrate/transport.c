/* transport.c - the public face of the transports; see transport_*.c. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#define AR_INTERNAL
#include "migrate_private.h"

int migrate_transport_mpi_create(const void *mpi_comm,
				 struct migrate_transport **tpp)
{
	int rc = migrate_mpi_open(mpi_comm, tpp);

	if (rc == -AR_ENOTBUILT)
		return ar_seterr(rc, "migrate: built without MPI (configure --with-mpi)");
	return rc;
}

int migrate_transport_nccl_create(const void *mpi_comm, int cuda_device,
				  struct migrate_transport **tpp)
{
	int rc = migrate_nccl_open(mpi_comm, cuda_device, tpp);

	if (rc == -AR_ENOTBUILT)
		return ar_seterr(rc, "migrate: built without NCCL and MPI (configure --with-nccl --with-mpi)");
	return rc;
}

int migrate_transport_tcp_create(struct migrate_rdzv *r,
				 struct migrate_transport **tpp)
{
	return migrate_tcp_open(r, tpp);
}

int migrate_transport_nccl_rdzv_create(struct migrate_rdzv *r,
				       int cuda_device,
				       struct migrate_transport **tpp)
{
	int rc = migrate_nccl_open_rdzv(r, cuda_device, tpp);

	if (rc == -AR_ENOTBUILT)
		return ar_seterr(rc, "migrate: built without NCCL (configure --with-nccl)");
	return rc;
}

void migrate_transport_destroy(struct migrate_transport *tp)
{
	if (tp)
		tp->ops->destroy(tp);
}

int migrate_transport_rank(const struct migrate_transport *tp)
{
	return tp->rank;
}

const char *migrate_transport_name(const struct migrate_transport *tp)
{
	return tp->ops->name;
}

void *migrate_transport_alloc(struct migrate_transport *tp, size_t bytes)
{
	return tp->ops->alloc(tp, bytes);
}

void migrate_transport_release(struct migrate_transport *tp, void *buf)
{
	if (buf)
		tp->ops->release(tp, buf);
}

int migrate_transport_to_host(struct migrate_transport *tp, void *host,
			      const void *buf, size_t bytes)
{
	return tp->ops->to_host(tp, host, buf, bytes);
}

int migrate_transport_from_host(struct migrate_transport *tp, void *buf,
				const void *host, size_t bytes)
{
	return tp->ops->from_host(tp, buf, host, bytes);
}
