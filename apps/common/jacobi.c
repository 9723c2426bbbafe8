// SPDX-License-Identifier: GPL-2.0
#include "jacobi.h"

#include "prng.h"

#define JACOBI_SEED 0x4a61636f6269ull

struct jacobi_params jacobi_params(enum app_size size)
{
	if (size == SIZE_BENCH)
		return (struct jacobi_params){ .n = 160, .iters = 30 };
	if (size == SIZE_EDGE)
		return (struct jacobi_params){ .n = size_edge(), .iters = 30 };
	if (size == SIZE_MEDIUM)
		return (struct jacobi_params){ .n = 96, .iters = 30 };
	return (struct jacobi_params){ .n = 48, .iters = 40 };
}

void jacobi_init_planes(int n, int z, int nplanes, double *u)
{
	int m = n + 2;

	for (int k = 0; k < nplanes; k++) {
		int gz = z + k;

		for (int y = 0; y < m; y++) {
			for (int x = 0; x < m; x++) {
				int64_t g = ((int64_t)gz * m + y) * m + x;
				double *p = &u[((int64_t)k * m + y) * m + x];

				if (gz == 0) {
					*p = 1.0;
				} else if (gz == m - 1 || y == 0 || y == m - 1 ||
					   x == 0 || x == m - 1) {
					*p = 0.0;
				} else {
					struct rng r = rng_at(JACOBI_SEED, 0, (uint64_t)g);

					*p = rng_unit(&r);
				}
			}
		}
	}
}

void jacobi_sweep(int n, int k0, int k1, const double *u, double *v)
{
	int64_t m = n + 2, pl = m * m;

	for (int k = k0; k < k1; k++) {
		for (int y = 1; y <= n; y++) {
			/* rows (dz, dy): a = z-1, b = z, c = z+1; 0 = y-1, 1 = y, 2 = y+1 */
			const double *a0 = u + (k - 1) * pl + (y - 1) * m;
			const double *a1 = a0 + m, *a2 = a1 + m;
			const double *b0 = u + k * pl + (y - 1) * m;
			const double *b1 = b0 + m, *b2 = b1 + m;
			const double *c0 = u + (k + 1) * pl + (y - 1) * m;
			const double *c1 = c0 + m, *c2 = c1 + m;
			double *out = v + k * pl + y * m;

			for (int x = 1; x <= n; x++) {
				double f = a1[x] + b0[x] + b1[x - 1] + b1[x + 1] +
					   b2[x] + c1[x];
				double e = a0[x] + a1[x - 1] + a1[x + 1] + a2[x] +
					   b0[x - 1] + b0[x + 1] + b2[x - 1] +
					   b2[x + 1] + c0[x] + c1[x - 1] +
					   c1[x + 1] + c2[x];
				double c = a0[x - 1] + a0[x + 1] + a2[x - 1] +
					   a2[x + 1] + c0[x - 1] + c0[x + 1] +
					   c2[x - 1] + c2[x + 1];

				out[x] = (4.0 * f + 2.0 * e + c) / 56.0;
			}
		}
	}
}

void jacobi_checksum(int n, int z, int nz, const double *u, cks_t *acc)
{
	int64_t m = n + 2;

	for (int k = 1; k <= nz; k++)
		for (int y = 1; y <= n; y++) {
			/* global interior index: ((z-1) * n + (y-1)) * n + (x-1) */
			uint64_t g = ((uint64_t)(z + k - 2) * n + (uint64_t)(y - 1)) * n;

			cks_add(acc, g, u + (k * m + y) * m + 1, n, 1);
		}
}
