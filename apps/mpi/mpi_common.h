/* SPDX-License-Identifier: GPL-2.0 */
/* What every MPI app does the same way: start, and report from rank 0. */
#ifndef APPS_MPI_COMMON_H
#define APPS_MPI_COMMON_H

#include <mpi.h>

#include "checksum.h"
#include "common.h"

struct mpi_world {
	int rank, size;
};

/* MPI_Init and the rank and size of MPI_COMM_WORLD. */
struct mpi_world mpi_start(int *argc, char ***argv);

/*
 * Adds the ranks' checksum parts in rank order (MPI_Reduce of long double)
 * and, on rank 0, prints the report with the slowest rank's time.
 */
void mpi_report(const struct mpi_world *w, const char *app, enum app_size size,
		int iterations, double seconds, cks_t part);

#endif
