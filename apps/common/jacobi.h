/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Jacobi iteration for heat conduction in a cube: n^3 interior points with a
 * Dirichlet boundary layer, so a plane holds (n+2)^2 doubles and the grid
 * n + 2 planes along z.  Boundary: the z = 0 face at 1, the other faces at 0;
 * interior: uniform in [0, 1) from the PRNG, per global point.
 *
 * The 27-point stencil: new = (4 * faces + 2 * edges + corners) / 56, each
 * class summed in (dz, dy, dx) lexicographic order, so a point's value never
 * depends on the decomposition.
 *
 * A block of planes is stored as planes k = 0 .. nz + 1 where planes 0 and
 * nz + 1 are ghosts (a neighbour's planes, or the boundary).
 */
#ifndef APPS_JACOBI_H
#define APPS_JACOBI_H

#include <stdint.h>

#include "checksum.h"
#include "common.h"

struct jacobi_params {
	int n;		/* interior points per dimension */
	int iters;
};

struct jacobi_params jacobi_params(enum app_size size);

static inline int64_t jacobi_plane(int n)
{
	return (int64_t)(n + 2) * (n + 2);
}

/* Fills `nplanes` planes starting with global plane `z` (0 .. n + 1). */
void jacobi_init_planes(int n, int z, int nplanes, double *u);

/* Computes planes k0 .. k1 - 1 (1 <= k0, k1 <= nz + 1) of v from u. */
void jacobi_sweep(int n, int k0, int k1, const double *u, double *v);

/*
 * Adds the checksum of the interior of planes 1 .. nz of a block whose
 * plane 1 is global plane z (1 .. n).
 */
void jacobi_checksum(int n, int z, int nz, const double *u, cks_t *acc);

#endif
