/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Neighbour exchange for a row-block distributed sparse matrix-vector
 * product (PageRank and CG): each rank owns rows and vector entries
 * [lo, lo + nloc) of n, as block_lo() divides them.  halo_setup renumbers the
 * block's columns into the local vector layout
 *
 *     x[0 .. nloc)              the rank's own entries
 *     x[nloc .. nloc + nghost)  the other ranks' entries it needs, ascending
 *
 * and agrees with the other ranks, once, on who sends which entries to whom;
 * halo_exchange then moves only those entries, with nonblocking sends and
 * receives straight into the ghost part.
 */
#ifndef APPS_HALO_H
#define APPS_HALO_H

#include <stdint.h>

#include <mpi.h>

#include "csr.h"
#include "mpi_common.h"

struct halo {
	int64_t lo, nloc, nghost;
	int nrecv, nsend;		/* neighbours we receive from / send to */
	int *recv_rank, *send_rank;
	int64_t *recv_off, *send_off;	/* n{recv,send} + 1 offsets */
	int64_t *send_idx;		/* local entries to send, by neighbour */
	double *send_buf;
	MPI_Request *req;
};

void halo_setup(struct halo *h, struct csr *a, int64_t n,
		const struct mpi_world *w);

/* Fills x[nloc .. nloc + nghost) from the owners. */
void halo_exchange(struct halo *h, double *x);

void halo_free(struct halo *h);

#endif
