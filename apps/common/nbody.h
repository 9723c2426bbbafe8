/* SPDX-License-Identifier: GPL-2.0 */
/*
 * N-body (the half-process paper's sec. 5.3.2): m^3 bodies on a jittered
 * lattice, numbered z-major so that a block of bodies is a slab along z;
 * masses uniform in [0.5, 1.5), small random initial velocities.  Direct
 * O(N^2) gravity with Plummer softening, semi-implicit Euler steps.
 *
 * Positions and velocities are stored xyz-interleaved: body i at [3i, 3i+3).
 */
#ifndef APPS_NBODY_H
#define APPS_NBODY_H

#include <stdint.h>

#include "common.h"

struct nbody_params {
	int m;		/* bodies per lattice edge: N = m^3 */
	int steps;
	double dt, eps2;	/* time step, softening length squared */
};

struct nbody_params nbody_params(enum app_size size);

static inline int64_t nbody_count(const struct nbody_params *p)
{
	return (int64_t)p->m * p->m * p->m;
}

/* Bodies i0 .. i0 + count - 1; any of the output pointers may be NULL. */
void nbody_init(const struct nbody_params *p, int64_t i0, int64_t count,
		double *pos, double *vel, double *mass);

/*
 * One step for bodies i0 .. i0 + count - 1: their accelerations from all
 * n bodies (pos_all, mass_all, global order, summed over j in order), then
 * vel += a dt, pos += vel dt on the block's own arrays (pos, vel: count
 * bodies), which must not alias pos_all.
 */
void nbody_step(const struct nbody_params *p, int64_t n, const double *pos_all,
		const double *mass_all, int64_t i0, int64_t count, double *pos,
		double *vel);

#endif
