/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The checksum of a result vector x with global indices g:
 *
 *     checksum = sum_g w(g) * x[g],   w(g) uniform in [0.5, 1.5) from the PRNG
 *
 * The weights depend on the global index only, so a value that lands in the
 * wrong place changes the checksum even when the plain sum would not.  Each
 * process sums its own part in long double (64-bit mantissa); the parts are
 * then added in a fixed order (rank order), so the checksum of one result is
 * the same to about 1e-16 relative however the result is decomposed.
 *
 * Each app has a stated relative tolerance (cks_rtol); see docs/apps.md for
 * why each is what it is.
 */
#ifndef APPS_CHECKSUM_H
#define APPS_CHECKSUM_H

#include <stdint.h>

typedef long double cks_t;

double cks_weight(uint64_t g);

/* Adds w(g0 + i) * x[i * stride] for i < n to *acc. */
void cks_add(cks_t *acc, uint64_t g0, const double *x, int64_t n,
	     int64_t stride);

/* The tolerance of app `name`, or a negative number for an unknown app. */
double cks_rtol(const char *name);

/* |a - b| <= rtol * max(|a|, |b|) */
int cks_agree(double a, double b, double rtol);

#endif
