// SPDX-License-Identifier: GPL-2.0
/*
 * N-body, MPI: each rank owns a block of bodies (a slab along z, as the
 * paper divides them); every step gathers all positions with
 * MPI_Allgatherv and updates its own bodies from them.
 */
#include <stdlib.h>

#include "checksum.h"
#include "common.h"
#include "mpi_common.h"
#include "nbody.h"

int main(int argc, char **argv)
{
	struct mpi_world w = mpi_start(&argc, &argv);
	enum app_size size = parse_size(argc, argv, argv[0]);
	struct nbody_params p = nbody_params(size);
	int64_t n = nbody_count(&p);
	int64_t i0 = block_lo(n, w.size, w.rank);
	int64_t cnt = block_len(n, w.size, w.rank);
	int *counts = xcalloc((size_t)w.size, sizeof(int));
	int *displs = xcalloc((size_t)w.size, sizeof(int));

	for (int q = 0; q < w.size; q++) {
		displs[q] = (int)(3 * block_lo(n, w.size, q));
		counts[q] = (int)(3 * block_len(n, w.size, q));
	}
	double *pos_all = xcalloc((size_t)(3 * n), sizeof(double));
	double *mass_all = xcalloc((size_t)n, sizeof(double));
	double *pos = xcalloc((size_t)(3 * cnt), sizeof(double));
	double *vel = xcalloc((size_t)(3 * cnt), sizeof(double));

	/* masses never change: every rank makes them all once */
	nbody_init(&p, 0, n, NULL, NULL, mass_all);
	nbody_init(&p, i0, cnt, pos, vel, NULL);
	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = MPI_Wtime();

	for (int step = 0; step < p.steps; step++) {
		MPI_Allgatherv(pos, (int)(3 * cnt), MPI_DOUBLE, pos_all, counts,
			       displs, MPI_DOUBLE, MPI_COMM_WORLD);
		nbody_step(&p, n, pos_all, mass_all, i0, cnt, pos, vel);
	}
	double t = MPI_Wtime() - t0;
	cks_t part = 0.0L;

	cks_add(&part, (uint64_t)(3 * i0), pos, 3 * cnt, 1);
	mpi_report(&w, "nbody", size, p.steps, t, part);
	free(counts);
	free(displs);
	free(pos_all);
	free(mass_all);
	free(pos);
	free(vel);
	MPI_Finalize();
	return 0;
}
