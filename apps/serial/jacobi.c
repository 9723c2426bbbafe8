// SPDX-License-Identifier: GPL-2.0
/*
 * Jacobi 3D 27-point, serial reference: the whole grid, the stencil written
 * as a loop over the 26 offsets (not apps/common's kernel), each class
 * (face, edge, corner) summed in (dz, dy, dx) order as the kernel does.
 */
#include <stdlib.h>

#include "checksum.h"
#include "common.h"
#include "jacobi.h"

int main(int argc, char **argv)
{
	enum app_size size = parse_size(argc, argv, argv[0]);
	struct jacobi_params p = jacobi_params(size);
	int n = p.n;
	int64_t m = n + 2;
	double *u = xcalloc((size_t)(m * m * m), sizeof(double));
	double *v = xcalloc((size_t)(m * m * m), sizeof(double));

	jacobi_init_planes(n, 0, n + 2, u);
	jacobi_init_planes(n, 0, n + 2, v);
	double t0 = wall_seconds();

	for (int it = 0; it < p.iters; it++) {
		for (int64_t z = 1; z <= n; z++)
			for (int64_t y = 1; y <= n; y++)
				for (int64_t x = 1; x <= n; x++) {
					double sum[4] = { 0.0, 0.0, 0.0, 0.0 };

					for (int dz = -1; dz <= 1; dz++)
						for (int dy = -1; dy <= 1; dy++)
							for (int dx = -1; dx <= 1; dx++) {
								int cls = abs(dz) + abs(dy) + abs(dx);

								sum[cls] += u[((z + dz) * m + y + dy) * m + x + dx];
							}
					v[(z * m + y) * m + x] =
						(4.0 * sum[1] + 2.0 * sum[2] + sum[3]) / 56.0;
				}
		swap_arrays(&u, &v);
	}
	double t = wall_seconds() - t0;
	cks_t acc = 0.0L;

	jacobi_checksum(n, 1, n, u, &acc);
	report("jacobi", "serial", 1, size, p.iters, t, (double)acc);
	free(u);
	free(v);
	return 0;
}
