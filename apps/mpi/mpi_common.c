// SPDX-License-Identifier: GPL-2.0
#include "mpi_common.h"

struct mpi_world mpi_start(int *argc, char ***argv)
{
	struct mpi_world w;

	MPI_Init(argc, argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
	MPI_Comm_size(MPI_COMM_WORLD, &w.size);
	return w;
}

void mpi_report(const struct mpi_world *w, const char *app, enum app_size size,
		int iterations, double seconds, cks_t part)
{
	cks_t sum = 0.0L;
	double slowest = 0.0;

	MPI_Reduce(&part, &sum, 1, MPI_LONG_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
	MPI_Reduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	if (w->rank == 0)
		report(app, "mpi", w->size, size, iterations, slowest, (double)sum);
}
