// SPDX-License-Identifier: GPL-2.0
/*
 * Jacobi 3D 27-point, MPI: a 1D block decomposition along z (the papers'
 * slabs), each rank holding its planes plus one ghost plane on each side.
 * Each iteration posts nonblocking receives into the ghost planes and sends
 * its first and last planes to the ranks below and above, sweeps the inner
 * planes meanwhile, then the two planes that need the ghosts.
 */
#include <stdio.h>
#include <stdlib.h>

#include "checksum.h"
#include "common.h"
#include "jacobi.h"
#include "mpi_common.h"

int main(int argc, char **argv)
{
	struct mpi_world w = mpi_start(&argc, &argv);
	enum app_size size = parse_size(argc, argv, argv[0]);
	struct jacobi_params p = jacobi_params(size);
	int n = p.n;
	int64_t z0 = block_lo(n, w.size, w.rank);
	int nz = (int)block_len(n, w.size, w.rank);
	int64_t pl = jacobi_plane(n);
	int down = w.rank > 0 ? w.rank - 1 : MPI_PROC_NULL;
	int up = w.rank + 1 < w.size ? w.rank + 1 : MPI_PROC_NULL;

	if (nz < 1) {
		if (w.rank == 0)
			fprintf(stderr, "jacobi: %d planes for %d ranks\n", n, w.size);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	/* plane k of the block is global plane z0 + k (plane 1: z0 + 1) */
	double *u = xcalloc((size_t)((nz + 2) * pl), sizeof(double));
	double *v = xcalloc((size_t)((nz + 2) * pl), sizeof(double));

	jacobi_init_planes(n, (int)z0, nz + 2, u);
	jacobi_init_planes(n, (int)z0, nz + 2, v);
	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = MPI_Wtime();

	for (int it = 0; it < p.iters; it++) {
		MPI_Request req[4];

		MPI_Irecv(u, (int)pl, MPI_DOUBLE, down, 0, MPI_COMM_WORLD, &req[0]);
		MPI_Irecv(u + (nz + 1) * pl, (int)pl, MPI_DOUBLE, up, 1,
			  MPI_COMM_WORLD, &req[1]);
		MPI_Isend(u + pl, (int)pl, MPI_DOUBLE, down, 1, MPI_COMM_WORLD,
			  &req[2]);
		MPI_Isend(u + nz * pl, (int)pl, MPI_DOUBLE, up, 0, MPI_COMM_WORLD,
			  &req[3]);
		jacobi_sweep(n, 2, nz, u, v);	/* planes 2 .. nz - 1 */
		MPI_Waitall(4, req, MPI_STATUSES_IGNORE);
		jacobi_sweep(n, 1, 2, u, v);
		if (nz > 1)
			jacobi_sweep(n, nz, nz + 1, u, v);
		swap_arrays(&u, &v);
	}
	double t = MPI_Wtime() - t0;
	cks_t part = 0.0L;

	jacobi_checksum(n, (int)z0 + 1, nz, u, &part);
	mpi_report(&w, "jacobi", size, p.iters, t, part);
	free(u);
	free(v);
	MPI_Finalize();
	return 0;
}
