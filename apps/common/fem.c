// SPDX-License-Identifier: GPL-2.0
#include "fem.h"

#include <math.h>

#include "prng.h"

#define FEM_SEED 0x46454d2d4347ull
#define TWIST_DEGREES 200.0
#define JITTER 0.3

struct cg_params cg_params(enum app_size size)
{
	if (size == SIZE_BENCH)
		return (struct cg_params){ .m = 56, .tol = 1e-10, .max_iters = 2000 };
	if (size == SIZE_EDGE)
		return (struct cg_params){ .m = size_edge(), .tol = 1e-10, .max_iters = 2000 };
	if (size == SIZE_MEDIUM)
		return (struct cg_params){ .m = 36, .tol = 1e-10, .max_iters = 2000 };
	return (struct cg_params){ .m = 24, .tol = 1e-10, .max_iters = 2000 };
}

/* The position of lattice node (x, y, z), each in -1 .. m. */
static void node_pos(int m, int64_t x, int64_t y, int64_t z, double p[3])
{
	int64_t e = m + 2;
	struct rng r = rng_at(FEM_SEED, 0, (uint64_t)(((z + 1) * e + y + 1) * e + x + 1));
	double c = 0.5 * (m - 1);
	double px = (double)x + JITTER * (rng_unit(&r) - 0.5) - c;
	double py = (double)y + JITTER * (rng_unit(&r) - 0.5) - c;
	double pz = (double)z + JITTER * (rng_unit(&r) - 0.5);
	double t = TWIST_DEGREES * M_PI / 180.0 * pz / (m > 1 ? m - 1 : 1);

	p[0] = px * cos(t) - py * sin(t);
	p[1] = px * sin(t) + py * cos(t);
	p[2] = pz;
}

static int inside(int m, int64_t v)
{
	return v >= 0 && v < m;
}

void fem_matrix(const struct cg_params *p, int64_t r0, int64_t rows,
		struct csr *out)
{
	int m = p->m;

	out->r0 = r0;
	out->rows = rows;
	out->rowptr = xcalloc((size_t)rows + 1, sizeof(int64_t));
	out->col = xcalloc((size_t)rows * 27, sizeof(int64_t));
	out->val = xcalloc((size_t)rows * 27, sizeof(double));
	int64_t nnz = 0;

	for (int64_t i = 0; i < rows; i++) {
		int64_t g = r0 + i, x = g % m, y = g / m % m, z = g / m / m;
		double pi[3], diag = 0.0;
		int64_t dk = -1;

		node_pos(m, x, y, z, pi);
		for (int dz = -1; dz <= 1; dz++)
			for (int dy = -1; dy <= 1; dy++)
				for (int dx = -1; dx <= 1; dx++) {
					int64_t nx = x + dx, ny = y + dy, nz = z + dz;
					int in = inside(m, nx) && inside(m, ny) && inside(m, nz);

					if (!dx && !dy && !dz) {
						dk = nnz;
						out->col[nnz++] = g;
						continue;
					}
					double pj[3], d2 = 0.0;

					node_pos(m, nx, ny, nz, pj);
					for (int c = 0; c < 3; c++)
						d2 += (pj[c] - pi[c]) * (pj[c] - pi[c]);
					diag += 1.0 / d2;
					if (in) {
						out->col[nnz] = (nz * m + ny) * m + nx;
						out->val[nnz++] = -1.0 / d2;
					}
				}
		out->val[dk] = diag;
		out->rowptr[i + 1] = nnz;
	}
}

void fem_rhs(int64_t r0, int64_t rows, double *b)
{
	for (int64_t i = 0; i < rows; i++) {
		struct rng r = rng_at(FEM_SEED, 1, (uint64_t)(r0 + i));

		b[i] = 0.5 + rng_unit(&r);
	}
}
