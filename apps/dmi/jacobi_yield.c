// SPDX-License-Identifier: GPL-2.0
/* The movable form (docs/apps.md, Table 2): dmi/jacobi.c plus one DMI_yield() per iteration; run with dmi run --movable. */
/*
 * Jacobi 3D 27-point on DMI, as dmi-reconfiguration sec. 5 writes it: the
 * z-planes are split into blocks (the papers' slabs) held in each node's
 * memory; the planes that neighbours need live in ghost pages in the global
 * address space, one page per plane.  Every iteration a node writes its
 * first and last planes into its own two ghost pages with EXCLUSIVE (one
 * group write; it becomes their owner at the first write, so every later
 * write is local and nothing is sent until someone reads), arrives at a
 * split-phase barrier (DMI_barrier_async) and sweeps most of its inner
 * planes; then it waits for the barrier, reads the neighbours' pages with
 * GET (just the bytes, nothing cached: the page changes every iteration),
 * asynchronously, while it sweeps the rest of the inner planes, and sweeps
 * the two outer planes last.  A node that is late by less than the inner
 * sweep delays nobody, as with MPI's nonblocking halo exchange (a plain
 * barrier before the sweep made every node wait for the slowest one every
 * iteration).  Ghost pages alternate between two sets by iteration parity,
 * so one barrier per iteration suffices: a node rewrites a set two
 * iterations later, after the next barrier, which every node reaches only
 * after its reads of that set.
 */
#include <stdio.h>
#include <stdlib.h>

#include "checksum.h"
#include "common.h"
#include "dmi_common.h"
#include "jacobi.h"

int main(int argc, char **argv)
{
	enum app_size size = parse_size(argc, argv, argv[0]);
	struct dmi_world w = dmi_start();
	struct jacobi_params p = jacobi_params(size);
	int n = p.n;
	int64_t z0 = block_lo(n, w.size, w.rank);
	int nz = (int)block_len(n, w.size, w.rank);
	int64_t pl = jacobi_plane(n), pbytes = pl * (int64_t)sizeof(double);
	int64_t pages = 2 * 2 * (int64_t)w.size, ghosts;

	if (nz < 1) {
		fprintf(stderr, "jacobi: %d planes for %d nodes\n", n, w.size);
		return 2;
	}
	/* ghost page (parity, node q, 0: its first plane, 1: its last) */
	dmi_map(1, &pbytes, &pages, &ghosts);
#define GHOST(par, q, side) (ghosts + ((int64_t)((par) * w.size + (q)) * 2 + (side)) * pbytes)

	double *u = xcalloc((size_t)((nz + 2) * pl), sizeof(double));
	double *v = xcalloc((size_t)((nz + 2) * pl), sizeof(double));

	jacobi_init_planes(n, (int)z0, nz + 2, u);
	jacobi_init_planes(n, (int)z0, nz + 2, v);
	DMI_CHECK(DMI_barrier());
	double t0 = wall_seconds();

	/* inner planes [2, nz): [2, split) before the barrier's wait, the
	 * rest while the ghost reads are under way */
	int split = nz - nz / 4 > 2 ? nz - nz / 4 : 2;

	for (int it = 0; it < p.iters; it++) {
		DMI_yield();
		int par = it & 1;
		DMI_handle_t b, h[2];
		DMI_access_t mine[2] = {
			{ GHOST(par, w.rank, 0), pbytes, u + pl },
			{ GHOST(par, w.rank, 1), pbytes, u + nz * pl },
		};
		int nh = 0;

		DMI_CHECK(DMI_group_write(mine, 2, EXCLUSIVE));
		DMI_CHECK(DMI_barrier_async(&b));
		jacobi_sweep(n, 2, split, u, v);
		DMI_CHECK(DMI_wait(&b));
		if (w.rank > 0)
			DMI_CHECK(DMI_read_async(GHOST(par, w.rank - 1, 1), pbytes, u,
						 GET, &h[nh++]));
		if (w.rank + 1 < w.size)
			DMI_CHECK(DMI_read_async(GHOST(par, w.rank + 1, 0), pbytes,
						 u + (nz + 1) * pl, GET, &h[nh++]));
		jacobi_sweep(n, split, nz, u, v);
		for (int k = 0; k < nh; k++)
			DMI_CHECK(DMI_wait(&h[k]));
		jacobi_sweep(n, 1, 2, u, v);
		if (nz > 1)
			jacobi_sweep(n, nz, nz + 1, u, v);
		swap_arrays(&u, &v);
	}
#undef GHOST
	double t = wall_seconds() - t0;
	cks_t part = 0.0L;

	jacobi_checksum(n, (int)z0 + 1, nz, u, &part);
	free(u);
	free(v);
	dmi_report(&w, "jacobi", size, p.iters, t, part);
	return 0;
}
