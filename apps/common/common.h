/* SPDX-License-Identifier: GPL-2.0 */
/* Helpers every app shares: block partitions, the clock, sizes, the report. */
#ifndef APPS_COMMON_H
#define APPS_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* Block p of P of the range [0, n): [block_lo(n, P, p), block_lo(n, P, p + 1)). */
static inline int64_t block_lo(int64_t n, int nparts, int p)
{
	return (int64_t)((__int128)n * p / nparts);
}

static inline int64_t block_len(int64_t n, int nparts, int p)
{
	return block_lo(n, nparts, p + 1) - block_lo(n, nparts, p);
}

/* The block that holds element i. */
int block_owner(int64_t n, int nparts, int64_t i);

double wall_seconds(void);

/* Swaps two arrays: the old and new iterate of a Jacobi-style update. */
static inline void swap_arrays(double **a, double **b)
{
	double *t = *a;

	*a = *b;
	*b = t;
}

/* malloc that exits with a message on failure; zeroed. */
void *xcalloc(size_t count, size_t size);

/*
 * medium: between the two, for runs under QEMU's TCG (scripts/guest.sh
 * bench-apps); edge: a number N in place of the name, the bench size with
 * its main dimension set to N (Jacobi's grid edge n, N-body's lattice edge m,
 * PageRank's vertices per sub-graph, CG's mesh edge m), for sweeps over the
 * problem size (apps/reconf-sweep.sh).
 */
enum app_size { SIZE_SMALL, SIZE_BENCH, SIZE_MEDIUM, SIZE_EDGE };

/*
 * "small" (the default when absent), "medium", "bench" or N (SIZE_EDGE,
 * APP_EDGE_MIN <= N <= APP_EDGE_MAX; size_edge() returns it); exits with
 * usage otherwise.
 */
enum app_size parse_size(int argc, char **argv, const char *prog);
const char *size_name(enum app_size s);
#define APP_EDGE_MIN 4
#define APP_EDGE_MAX 1048576
int size_edge(void);
/* Sets SIZE_EDGE's N in a process that did not parse it (an itergroup's node). */
void size_set_edge(int n);

/*
 * The lines every app prints (rank 0 only): what ran, the iterations, the
 * time per iteration in seconds (the iterations only, not set-up), and the
 * checksum.  apps/test.sh and the benchmarks parse them.
 */
void report(const char *app, const char *impl, int ranks, enum app_size size,
	    int iterations, double seconds, double checksum);

#endif
