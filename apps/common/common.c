// SPDX-License-Identifier: GPL-2.0
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int block_owner(int64_t n, int nparts, int64_t i)
{
	int p = (int)((__int128)i * nparts / n);

	while (p + 1 < nparts && block_lo(n, nparts, p + 1) <= i)
		p++;
	while (p > 0 && block_lo(n, nparts, p) > i)
		p--;
	return p;
}

double wall_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void *xcalloc(size_t count, size_t size)
{
	void *p = calloc(count ? count : 1, size ? size : 1);

	if (!p) {
		fprintf(stderr, "out of memory (%zu x %zu bytes)\n", count, size);
		exit(2);
	}
	return p;
}

static int edge;		/* SIZE_EDGE's N */
static char edge_name[16];

int size_edge(void)
{
	return edge;
}

void size_set_edge(int n)
{
	edge = n;
	snprintf(edge_name, sizeof(edge_name), "%d", edge);
}

enum app_size parse_size(int argc, char **argv, const char *prog)
{
	if (argc < 2 || !strcmp(argv[1], "small"))
		return SIZE_SMALL;
	if (!strcmp(argv[1], "bench"))
		return SIZE_BENCH;
	if (!strcmp(argv[1], "medium"))
		return SIZE_MEDIUM;
	if (strspn(argv[1], "0123456789") == strlen(argv[1]) && strlen(argv[1]) <= 7) {
		long v = atol(argv[1]);

		if (v >= APP_EDGE_MIN && v <= APP_EDGE_MAX) {
			size_set_edge((int)v);
			return SIZE_EDGE;
		}
	}
	fprintf(stderr, "%s: size '%s': small, medium, bench or a number N from %d to %d "
		"(the bench size with its edge N: Jacobi's grid, N-body's lattice, "
		"PageRank's sub-graph vertices, CG's mesh)\n",
		prog, argv[1], APP_EDGE_MIN, APP_EDGE_MAX);
	exit(2);
}

const char *size_name(enum app_size s)
{
	if (s == SIZE_EDGE)
		return edge_name;
	return s == SIZE_BENCH ? "bench" : s == SIZE_MEDIUM ? "medium" : "small";
}

void report(const char *app, const char *impl, int ranks, enum app_size size,
	    int iterations, double seconds, double checksum)
{
	printf("app %s impl %s ranks %d size %s\n", app, impl, ranks,
	       size_name(size));
	printf("iterations %d\n", iterations);
	printf("time_per_iter %.6e\n", iterations ? seconds / iterations : 0.0);
	printf("checksum %.17g\n", checksum);
	fflush(stdout);
}
