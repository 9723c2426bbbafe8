// SPDX-License-Identifier: GPL-2.0
/*
 * N-body, serial reference: all accelerations from the old positions, then
 * all updates; the arithmetic of each body in the same order as the kernel.
 */
#include <math.h>
#include <stdlib.h>

#include "checksum.h"
#include "common.h"
#include "nbody.h"

int main(int argc, char **argv)
{
	enum app_size size = parse_size(argc, argv, argv[0]);
	struct nbody_params p = nbody_params(size);
	int64_t n = nbody_count(&p);
	double *pos = xcalloc((size_t)(3 * n), sizeof(double));
	double *vel = xcalloc((size_t)(3 * n), sizeof(double));
	double *acc = xcalloc((size_t)(3 * n), sizeof(double));
	double *mass = xcalloc((size_t)n, sizeof(double));

	nbody_init(&p, 0, n, pos, vel, mass);
	double t0 = wall_seconds();

	for (int step = 0; step < p.steps; step++) {
		for (int64_t i = 0; i < n; i++) {
			double a[3] = { 0.0, 0.0, 0.0 };

			for (int64_t j = 0; j < n; j++) {
				double d[3], r2 = 0.0;

				for (int c = 0; c < 3; c++) {
					d[c] = pos[3 * j + c] - pos[3 * i + c];
					r2 += d[c] * d[c];
				}
				r2 += p.eps2;
				double s = mass[j] / (r2 * sqrt(r2));

				for (int c = 0; c < 3; c++)
					a[c] += s * d[c];
			}
			for (int c = 0; c < 3; c++)
				acc[3 * i + c] = a[c];
		}
		for (int64_t k = 0; k < 3 * n; k++) {
			vel[k] += acc[k] * p.dt;
			pos[k] += vel[k] * p.dt;
		}
	}
	double t = wall_seconds() - t0;
	cks_t sum = 0.0L;

	cks_add(&sum, 0, pos, 3 * n, 1);
	report("nbody", "serial", 1, size, p.steps, t, (double)sum);
	free(pos);
	free(vel);
	free(acc);
	free(mass);
	return 0;
}
