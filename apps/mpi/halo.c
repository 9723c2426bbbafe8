// SPDX-License-Identifier: GPL-2.0
#include "halo.h"

#include <stdlib.h>

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* The sorted, distinct columns of a outside [lo, hi); returns their count. */
static int64_t ghost_columns(const struct csr *a, int64_t lo, int64_t hi,
			     int64_t **out)
{
	int64_t nnz = a->rowptr[a->rows], k = 0, u = 0;
	int64_t *g = xcalloc((size_t)nnz, sizeof(int64_t));

	for (int64_t e = 0; e < nnz; e++)
		if (a->col[e] < lo || a->col[e] >= hi)
			g[k++] = a->col[e];
	qsort(g, (size_t)k, sizeof(int64_t), cmp_i64);
	for (int64_t e = 0; e < k; e++)
		if (!u || g[u - 1] != g[e])
			g[u++] = g[e];
	*out = g;
	return u;
}

void halo_setup(struct halo *h, struct csr *a, int64_t n,
		const struct mpi_world *w)
{
	int p = w->size;
	int64_t *ghost;

	h->lo = block_lo(n, p, w->rank);
	h->nloc = block_len(n, p, w->rank);
	h->nghost = ghost_columns(a, h->lo, h->lo + h->nloc, &ghost);

	/* renumber: own entries first, then the ghosts in ascending order */
	for (int64_t e = 0; e < a->rowptr[a->rows]; e++) {
		int64_t j = a->col[e];

		if (j >= h->lo && j < h->lo + h->nloc) {
			a->col[e] = j - h->lo;
		} else {
			int64_t *at = bsearch(&j, ghost, (size_t)h->nghost,
					      sizeof(int64_t), cmp_i64);

			a->col[e] = h->nloc + (at - ghost);
		}
	}

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
