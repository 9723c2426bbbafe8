// SPDX-License-Identifier: GPL-2.0
#include "nbody.h"

#include <math.h>

#include "prng.h"

#define NBODY_SEED 0x4e626f6479ull

struct nbody_params nbody_params(enum app_size size)
{
	/* bench: the paper's 24^3 bodies */
	if (size == SIZE_BENCH)
		return (struct nbody_params){ .m = 24, .steps = 10, .dt = 1e-3,
					      .eps2 = 0.01 };
	if (size == SIZE_EDGE)
		return (struct nbody_params){ .m = size_edge(), .steps = 10, .dt = 1e-3,
					      .eps2 = 0.01 };
	if (size == SIZE_MEDIUM)
		return (struct nbody_params){ .m = 16, .steps = 10, .dt = 1e-3,
					      .eps2 = 0.01 };
	return (struct nbody_params){ .m = 12, .steps = 10, .dt = 1e-3,
				      .eps2 = 0.01 };
}

void nbody_init(const struct nbody_params *p, int64_t i0, int64_t count,
		double *pos, double *vel, double *mass)
{
	int64_t m = p->m;

	for (int64_t k = 0; k < count; k++) {
		int64_t i = i0 + k;
		int64_t lat[3] = { i % m, i / m % m, i / (m * m) };
		struct rng r = rng_at(NBODY_SEED, 0, (uint64_t)i);

		for (int c = 0; c < 3; c++) {
			double x = (double)lat[c] + 0.5 + 0.4 * (rng_unit(&r) - 0.5);
			double v = 0.2 * (rng_unit(&r) - 0.5);

			if (pos)
				pos[3 * k + c] = x;
			if (vel)
				vel[3 * k + c] = v;
		}
		double w = 0.5 + rng_unit(&r);

		if (mass)
			mass[k] = w;
	}
}

void nbody_step(const struct nbody_params *p, int64_t n, const double *pos_all,
		const double *mass_all, int64_t i0, int64_t count, double *pos,
		double *vel)
{
	for (int64_t k = 0; k < count; k++) {
		const double *pi = pos_all + 3 * (i0 + k);
		double ax = 0.0, ay = 0.0, az = 0.0;

		for (int64_t j = 0; j < n; j++) {
			double dx = pos_all[3 * j] - pi[0];
			double dy = pos_all[3 * j + 1] - pi[1];
			double dz = pos_all[3 * j + 2] - pi[2];
			double r2 = dx * dx + dy * dy + dz * dz + p->eps2;
			double s = mass_all[j] / (r2 * sqrt(r2));

			ax += s * dx;
			ay += s * dy;
			az += s * dz;
		}
		double a[3] = { ax, ay, az };

		for (int c = 0; c < 3; c++) {
			vel[3 * k + c] += a[c] * p->dt;
			pos[3 * k + c] += vel[3 * k + c] * p->dt;
		}
	}
}
