// SPDX-License-Identifier: GPL-2.0
#include "halo.h"

#include <stdlib.h>

void halo_setup(struct halo *h, struct csr *a, int64_t n,
		const struct mpi_world *w)
{
	int p = w->size;
	int64_t *ghost;

	h->lo = block_lo(n, p, w->rank);
	h->nloc = block_len(n, p, w->rank);
	h->nghost = csr_localize(a, h->lo, h->nloc, &ghost);

	/* how many entries we want from each rank, and they from us */
	int *want = xcalloc((size_t)p, sizeof(int));
	int *give = xcalloc((size_t)p, sizeof(int));
	int *wdisp = xcalloc((size_t)p + 1, sizeof(int));
	int *gdisp = xcalloc((size_t)p + 1, sizeof(int));

	for (int64_t k = 0; k < h->nghost; k++)
		want[block_owner(n, p, ghost[k])]++;
	MPI_Alltoall(want, 1, MPI_INT, give, 1, MPI_INT, MPI_COMM_WORLD);
	for (int q = 0; q < p; q++) {
		wdisp[q + 1] = wdisp[q] + want[q];
		gdisp[q + 1] = gdisp[q] + give[q];
	}
	h->send_idx = xcalloc((size_t)gdisp[p], sizeof(int64_t));
	MPI_Alltoallv(ghost, want, wdisp, MPI_INT64_T, h->send_idx, give, gdisp,
		      MPI_INT64_T, MPI_COMM_WORLD);
	for (int k = 0; k < gdisp[p]; k++)
		h->send_idx[k] -= h->lo;

	h->recv_rank = xcalloc((size_t)p, sizeof(int));
	h->send_rank = xcalloc((size_t)p, sizeof(int));
	h->recv_off = xcalloc((size_t)p + 1, sizeof(int64_t));
	h->send_off = xcalloc((size_t)p + 1, sizeof(int64_t));
	h->nrecv = h->nsend = 0;
	for (int q = 0; q < p; q++) {
		if (want[q]) {
			h->recv_rank[h->nrecv] = q;
			h->recv_off[h->nrecv] = wdisp[q];
			h->recv_off[++h->nrecv] = wdisp[q + 1];
		}
		if (give[q]) {
			h->send_rank[h->nsend] = q;
			h->send_off[h->nsend] = gdisp[q];
			h->send_off[++h->nsend] = gdisp[q + 1];
		}
	}
	h->send_buf = xcalloc((size_t)gdisp[p], sizeof(double));
	h->req = xcalloc((size_t)(h->nrecv + h->nsend), sizeof(MPI_Request));
	free(ghost);
	free(want);
	free(give);
	free(wdisp);
	free(gdisp);
}

void halo_exchange(struct halo *h, double *x)
{
	int nr = 0;

	for (int k = 0; k < h->nrecv; k++)
		MPI_Irecv(x + h->nloc + h->recv_off[k],
			  (int)(h->recv_off[k + 1] - h->recv_off[k]), MPI_DOUBLE,
			  h->recv_rank[k], 0, MPI_COMM_WORLD, &h->req[nr++]);
	for (int k = 0; k < h->nsend; k++) {
		for (int64_t e = h->send_off[k]; e < h->send_off[k + 1]; e++)
			h->send_buf[e] = x[h->send_idx[e]];
		MPI_Isend(h->send_buf + h->send_off[k],
			  (int)(h->send_off[k + 1] - h->send_off[k]), MPI_DOUBLE,
			  h->send_rank[k], 0, MPI_COMM_WORLD, &h->req[nr++]);
	}
	MPI_Waitall(nr, h->req, MPI_STATUSES_IGNORE);
}

void halo_free(struct halo *h)
{
	free(h->recv_rank);
	free(h->send_rank);
	free(h->recv_off);
	free(h->send_off);
	free(h->send_idx);
	free(h->send_buf);
	free(h->req);
}
