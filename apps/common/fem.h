/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A distorted 3D FEM-like SPD system for CG (after the papers' stress
 * analysis on a cube "distorted up to 200 degrees around the z-axis"):
 * m^3 mesh nodes, numbered z-major, each jittered randomly by up to +-0.15
 * of the spacing and the whole mesh twisted about the z axis by 200 degrees
 * from bottom to top.  Nodes couple to their 26 lattice neighbours (a
 * hexahedral mesh's node connectivity: 27 points per row) with conductance
 * w = 1 / |p_i - p_j|^2:
 *
 *     A[i][j] = -w_ij,  A[i][i] = sum over all 26 neighbour positions of w
 *
 * where a neighbour outside the cube is a Dirichlet node fixed at 0 (it adds
 * to the diagonal only).  A is symmetric, with a positive diagonal that
 * dominates each row, strictly on the boundary: symmetric positive definite.
 * b is uniform in [0.5, 1.5).
 */
#ifndef APPS_FEM_H
#define APPS_FEM_H

#include <stdint.h>

#include "common.h"
#include "csr.h"

struct cg_params {
	int m;		/* nodes per edge: m^3 unknowns */
	double tol;	/* stop when |r| <= tol |b| */
	int max_iters;
};

struct cg_params cg_params(enum app_size size);

static inline int64_t cg_n(const struct cg_params *p)
{
	return (int64_t)p->m * p->m * p->m;
}

/* Rows r0 .. r0 + rows - 1 of A (global columns, ascending). */
void fem_matrix(const struct cg_params *p, int64_t r0, int64_t rows,
		struct csr *out);

/* b[i] for rows r0 .. r0 + rows - 1. */
void fem_rhs(int64_t r0, int64_t rows, double *b);

#endif
