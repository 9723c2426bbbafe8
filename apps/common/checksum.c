// SPDX-License-Identifier: GPL-2.0
#include "checksum.h"

#include <math.h>
#include <string.h>

#include "prng.h"

#define CKS_SEED 0x636865636b73756dull	/* "checksum" */

double cks_weight(uint64_t g)
{
	struct rng r = rng_at(CKS_SEED, 0, g);

	return 0.5 + rng_unit(&r);
}

void cks_add(cks_t *acc, uint64_t g0, const double *x, int64_t n,
	     int64_t stride)
{
	cks_t s = 0.0L;

	for (int64_t i = 0; i < n; i++)
		s += (cks_t)cks_weight(g0 + (uint64_t)i) * x[i * stride];
	*acc += s;
}

/*
 * Jacobi, N-body and PageRank do the same floating-point operations on the
 * same operands in the same order for every element whatever the number of
 * processes (the kernels in apps/common fix the order), so their results are
 * bit-identical and only the checksum's own summation order differs: a long
 * double sum of n terms is off by at most about n * 2^-64 (5e-14 for 10^6
 * terms) before it is rounded to double; 1e-12 leaves room for that.
 *
 * CG's dot products are reduced across processes in an order that depends on
 * the decomposition, so its iterates drift apart by rounding, and a run may
 * even stop one iteration earlier or later; every run still stops at a
 * relative residual of 1e-10, and that is the tolerance.
 */
static const struct {
	const char *name;
	double rtol;
} tolerances[] = {
	{ "jacobi", 1e-12 },
	{ "nbody", 1e-12 },
	{ "pagerank", 1e-12 },
	{ "cg", 1e-10 },
};

double cks_rtol(const char *name)
{
	for (unsigned i = 0; i < sizeof(tolerances) / sizeof(tolerances[0]); i++)
		if (!strcmp(tolerances[i].name, name))
			return tolerances[i].rtol;
	return -1.0;
}

int cks_agree(double a, double b, double rtol)
{
	double scale = fmax(fabs(a), fabs(b));

	return isfinite(a) && isfinite(b) && fabs(a - b) <= rtol * scale;
}
