// SPDX-License-Identifier: GPL-2.0
/*
 * Jacobi 3D 27-point as a reconfigurable DMI program (dmi-reconfiguration
 * sec. 4, Fig. 7): DMI_main sets the grid up in the global address space and
 * calls DMI_rescale; each itergroup restores its block of planes from there,
 * iterates until DMI_check_rescale says nodes join or leave (or the
 * computation is done), and checkpoints its planes back with EXCLUSIVE, so
 * each node owns the pages of its block and a leaving node hands them over.
 *
 * The grid lives twice in global memory, one page per z-plane: G[0] and
 * G[1].  Iteration `it` exchanges boundary planes through G[it & 1] (write
 * one's own first and last planes with EXCLUSIVE, DMI_barrier over the
 * itergroup's threads, GET the neighbours'), so a slow neighbour still
 * reading the previous iteration's planes is never overwritten; the
 * checkpoint after `it` iterations goes to G[it & 1], where the next
 * itergroup starts.  The checksum is taken on node 0 over the final grid,
 * plane by plane in z order, as the serial reference does: the result does
 * not depend on how many nodes ran which iterations.
 *
 * usage: jacobi_reconf [small|bench] [INIT_NODE_NUM]
 * (start it with `dmi run -n N [--grow-at ITER:K] [--shrink-at ITER:K]`)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checksum.h"
#include "common.h"
#include "dmi_common.h"
#include "jacobi.h"
#include <dmi_main.h>

struct data_t {
	int64_t iter;		/* iterations done */
	int64_t grid[2];	/* G[0], G[1]: n + 2 pages of one plane */
	int64_t itergroups;	/* itergroups run (for the report) */
	int32_t n, iters;
};

void DMI_main(int argc, char **argv)
{
	enum app_size size = parse_size(argc > 2 ? 2 : argc, argv, argv[0]);
	int init_node_num = argc > 2 ? atoi(argv[2]) : 1;
	struct jacobi_params p = jacobi_params(size);
	int n = p.n;
	int64_t pl = jacobi_plane(n), pbytes = pl * (int64_t)sizeof(double);
	struct data_t data = { .n = n, .iters = p.iters };
	double *plane = xcalloc((size_t)(3 * pl), sizeof(double));

	for (int k = 0; k < 2; k++)
		data.grid[k] = DMI_CHECK(DMI_mmap(pbytes, n + 2));
	/* the initial grid, with its boundary planes, in both copies */
	for (int z = 0; z <= n + 1; z++) {
		jacobi_init_planes(n, z, 1, plane);
		for (int k = 0; k < 2; k++)
			DMI_CHECK(DMI_write(data.grid[k] + z * pbytes, pbytes, plane, PUT));
	}
	int64_t addr = DMI_CHECK(DMI_mmap(sizeof(data), 1));

	DMI_CHECK(DMI_write(addr, sizeof(data), &data, PUT));
	double t0 = wall_seconds();

	DMI_CHECK(DMI_rescale(addr, init_node_num));
	double t = wall_seconds() - t0;

	DMI_CHECK(DMI_read(addr, sizeof(data), &data, GET));
	cks_t acc = 0.0L;
	int64_t g = data.grid[data.iter & 1];

	for (int z = 1; z <= n; z++) {
		DMI_CHECK(DMI_read(g + z * pbytes, pbytes, plane + pl, GET));
		jacobi_checksum(n, z, 1, plane, &acc);
	}
	printf("itergroups %lld\n", (long long)data.itergroups);
	report("jacobi", "dmi-reconf", DMI_size(), size, (int)data.iter, t, (double)acc);
	free(plane);
	DMI_CHECK(DMI_munmap(addr));
	for (int k = 0; k < 2; k++)
		DMI_CHECK(DMI_munmap(data.grid[k]));
}

int DMI_itergroup(int rank, int pnum, int64_t addr)
{
	struct data_t data;

	DMI_CHECK(DMI_read(addr, sizeof(data), &data, GET));	/* restore */
	struct dmi_world w = dmi_itergroup_start(rank, pnum, -1);
	int n = data.n;
	int64_t z0 = block_lo(n, pnum, rank);
	int nz = (int)block_len(n, pnum, rank);
	int64_t pl = jacobi_plane(n), pbytes = pl * (int64_t)sizeof(double);

	if (nz < 1) {
		fprintf(stderr, "jacobi_reconf: %d planes for %d threads\n", n, pnum);
		exit(2);
	}
	double *u = xcalloc((size_t)((nz + 2) * pl), sizeof(double));
	double *v = xcalloc((size_t)((nz + 2) * pl), sizeof(double));

	/* planes z0 .. z0 + nz + 1: this block and its two ghosts */
	DMI_CHECK(DMI_read(data.grid[data.iter & 1] + z0 * pbytes, (nz + 2) * pbytes, u, GET));
	memcpy(v, u, (size_t)((nz + 2) * pbytes));
	dmi_trace_restored(&w);
	while (data.iter < data.iters) {
		int rc = (int)DMI_CHECK(DMI_check_rescale());

		if (rc)
			break;
		int64_t g = data.grid[data.iter & 1];

		DMI_CHECK(DMI_write(g + (z0 + 1) * pbytes, pbytes, u + pl, EXCLUSIVE));
		DMI_CHECK(DMI_write(g + (z0 + nz) * pbytes, pbytes, u + nz * pl, EXCLUSIVE));
		DMI_CHECK(DMI_barrier());
		if (rank > 0)
			DMI_CHECK(DMI_read(g + z0 * pbytes, pbytes, u, GET));
		if (rank + 1 < pnum)
			DMI_CHECK(DMI_read(g + (z0 + nz + 1) * pbytes, pbytes, u + (nz + 1) * pl, GET));
		jacobi_sweep(n, 1, nz + 1, u, v);
		swap_arrays(&u, &v);
		data.iter++;
		dmi_trace(&w, data.iter);
	}
	/* checkpoint: this block, where the next itergroup reads it */
	DMI_CHECK(DMI_write(data.grid[data.iter & 1] + (z0 + 1) * pbytes, nz * pbytes, u + pl,
			    EXCLUSIVE));
	dmi_itergroup_end(&w);
	if (rank == 0) {
		data.itergroups++;
		DMI_CHECK(DMI_write(addr, sizeof(data), &data, PUT));
	}
	free(u);
	free(v);
	return data.iter != data.iters;
}

int DMI_judge_rescale(DMI_node_t *in_nodes, DMI_node_t *out_nodes, DMI_node_t *cur_nodes,
		      int in_node_num, int out_node_num, int cur_node_num)
{
	(void)in_nodes;
	(void)out_nodes;
	(void)cur_nodes;
	(void)cur_node_num;
	return in_node_num + out_node_num >= 1;
}
