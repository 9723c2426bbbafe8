// SPDX-License-Identifier: GPL-2.0
/*
 * Conjugate gradients on the distorted FEM matrix, MPI: a row-block
 * distribution (each rank generates its rows of A and b), the sparse
 * matrix-vector product with the neighbour exchange of halo.c, and the dot
 * products summed with MPI_Allreduce.
 */
#include <math.h>
#include <stdlib.h>

#include "checksum.h"
#include "common.h"
#include "csr.h"
#include "fem.h"
#include "halo.h"
#include "mpi_common.h"

static double dot(int64_t n, const double *x, const double *y)
{
	double s = vec_dot(n, x, y);

	MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	return s;
}

int main(int argc, char **argv)
{
	struct mpi_world w = mpi_start(&argc, &argv);
	enum app_size size = parse_size(argc, argv, argv[0]);
	struct cg_params p = cg_params(size);
	int64_t n = cg_n(&p);
	int64_t lo = block_lo(n, w.size, w.rank);
	int64_t nloc = block_len(n, w.size, w.rank);
	struct csr a;
	struct halo h;

	fem_matrix(&p, lo, nloc, &a);
	halo_setup(&h, &a, n, &w);
	double *b = xcalloc((size_t)nloc, sizeof(double));
	double *x = xcalloc((size_t)nloc, sizeof(double));
	double *r = xcalloc((size_t)nloc, sizeof(double));
	double *d = xcalloc((size_t)(nloc + h.nghost), sizeof(double));
	double *q = xcalloc((size_t)nloc, sizeof(double));

	fem_rhs(lo, nloc, b);
	for (int64_t i = 0; i < nloc; i++)
		r[i] = d[i] = b[i];
	double bb = dot(nloc, b, b), rr = bb;

	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = MPI_Wtime();
	int it = 0;

	while (it < p.max_iters && sqrt(rr) > p.tol * sqrt(bb)) {
		halo_exchange(&h, d);
		csr_spmv(&a, d, q);
		double alpha = rr / dot(nloc, d, q);

		vec_axpy(nloc, alpha, d, x);
		vec_axpy(nloc, -alpha, q, r);
		double rr_new = dot(nloc, r, r);

		vec_xpby(nloc, r, rr_new / rr, d);
		rr = rr_new;
		it++;
	}
	double t = MPI_Wtime() - t0;
	cks_t part = 0.0L;

	cks_add(&part, (uint64_t)lo, x, nloc, 1);
	mpi_report(&w, "cg", size, it, t, part);
	halo_free(&h);
	csr_free(&a);
	free(b);
	free(x);
	free(r);
	free(d);
	free(q);
	MPI_Finalize();
	return 0;
}
