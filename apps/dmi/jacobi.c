// SPDX-License-Identifier: GPL-2.0
/*
 * Jacobi 3D 27-point on DMI, as dmi-reconfiguration sec. 5 writes it: the
 * z-planes are split into blocks (the papers' slabs) held in each node's
 * memory; the planes that neighbours need live in ghost pages in the global
 * address space, one page per plane.  Every iteration a node writes its
 * first and last planes into its own two ghost pages with EXCLUSIVE (it
 * becomes their owner at the first write, so every later write is local and
 * nothing is sent until someone reads), meets the others at DMI_barrier,
 * and reads the neighbours' pages with GET (just the bytes, nothing
 * cached: the page changes every iteration).  The reads are asynchronous
 * and the inner planes are swept while they are under way, as the MPI
 * version overlaps its messages.  Ghost pages alternate between two sets by
 * iteration parity, so one barrier per iteration suffices.
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

	for (int it = 0; it < p.iters; it++) {
		int par = it & 1;
		DMI_handle_t h[2];
		int nh = 0;

		DMI_CHECK(DMI_write(GHOST(par, w.rank, 0), pbytes, u + pl, EXCLUSIVE));
		DMI_CHECK(DMI_write(GHOST(par, w.rank, 1), pbytes, u + nz * pl,
				    EXCLUSIVE));
		DMI_CHECK(DMI_barrier());
		if (w.rank > 0)
			DMI_CHECK(DMI_read_async(GHOST(par, w.rank - 1, 1), pbytes, u,
						 GET, &h[nh++]));
		if (w.rank + 1 < w.size)
			DMI_CHECK(DMI_read_async(GHOST(par, w.rank + 1, 0), pbytes,
						 u + (nz + 1) * pl, GET, &h[nh++]));
		jacobi_sweep(n, 2, nz, u, v);	/* planes 2 .. nz - 1 */
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
