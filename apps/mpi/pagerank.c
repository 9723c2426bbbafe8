// SPDX-License-Identifier: GPL-2.0
/*
 * PageRank, MPI: a row-block distribution (each rank generates and owns the
 * in-edge rows and ranks of a block of vertices); out-degrees are summed
 * once with MPI_Reduce_scatter; every iteration exchanges only the
 * contributions x[j] / outdeg(j) that other ranks' rows need (halo.c) and
 * agrees on convergence with MPI_Allreduce(MAX).
 */
#include <stdlib.h>

#include "checksum.h"
#include "common.h"
#include "csr.h"
#include "halo.h"
#include "mpi_common.h"
#include "pagerank.h"

int main(int argc, char **argv)
{
	struct mpi_world w = mpi_start(&argc, &argv);
	enum app_size size = parse_size(argc, argv, argv[0]);
	struct pagerank_params p = pagerank_params(size);
	int64_t n = pagerank_n(&p);
	int64_t lo = block_lo(n, w.size, w.rank);
	int64_t nloc = block_len(n, w.size, w.rank);
	struct csr a;
	struct halo h;

	pagerank_graph(&p, lo, nloc, &a);

	/* out-degree of every vertex: count our rows' sources, sum by owner */
	int64_t *count = xcalloc((size_t)n, sizeof(int64_t));
	int64_t *outdeg = xcalloc((size_t)nloc, sizeof(int64_t));
	int *blocks = xcalloc((size_t)w.size, sizeof(int));

	for (int q = 0; q < w.size; q++)
		blocks[q] = (int)block_len(n, w.size, q);
	pagerank_count_out(&a, 0, n, count);
	MPI_Reduce_scatter(count, outdeg, blocks, MPI_INT64_T, MPI_SUM,
			   MPI_COMM_WORLD);
	free(count);
	free(blocks);

	halo_setup(&h, &a, n, &w);
	double *x = xcalloc((size_t)nloc, sizeof(double));
	double *y = xcalloc((size_t)nloc, sizeof(double));
	double *c = xcalloc((size_t)(nloc + h.nghost), sizeof(double));

	for (int64_t i = 0; i < nloc; i++)
		x[i] = 1.0 / (double)n;
	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = MPI_Wtime();
	int it = 0;

	while (it < p.max_iters) {
		double diff;

		pagerank_contrib(nloc, x, outdeg, c);
		halo_exchange(&h, c);
		diff = pagerank_update(&a, n, c, x, y);
		MPI_Allreduce(MPI_IN_PLACE, &diff, 1, MPI_DOUBLE, MPI_MAX,
			      MPI_COMM_WORLD);
		swap_arrays(&x, &y);
		it++;
		if ((double)n * diff < p.tol)
			break;
	}
	double t = MPI_Wtime() - t0;
	cks_t part = 0.0L;

	cks_add(&part, (uint64_t)lo, x, nloc, 1);
	mpi_report(&w, "pagerank", size, it, t, part);
	halo_free(&h);
	csr_free(&a);
	free(outdeg);
	free(x);
	free(y);
	free(c);
	MPI_Finalize();
	return 0;
}
