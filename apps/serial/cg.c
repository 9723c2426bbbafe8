// SPDX-License-Identifier: GPL-2.0
/* Conjugate gradients on the distorted FEM matrix, serial reference. */
#include <math.h>
#include <stdlib.h>

#include "checksum.h"
#include "common.h"
#include "csr.h"
#include "fem.h"

int main(int argc, char **argv)
{
	enum app_size size = parse_size(argc, argv, argv[0]);
	struct cg_params p = cg_params(size);
	int64_t n = cg_n(&p);
	struct csr a;

	fem_matrix(&p, 0, n, &a);
	double *b = xcalloc((size_t)n, sizeof(double));
	double *x = xcalloc((size_t)n, sizeof(double));
	double *r = xcalloc((size_t)n, sizeof(double));
	double *d = xcalloc((size_t)n, sizeof(double));
	double *q = xcalloc((size_t)n, sizeof(double));

	fem_rhs(0, n, b);
	double bb = 0.0, rr;

	for (int64_t i = 0; i < n; i++) {
		r[i] = d[i] = b[i];
		bb += b[i] * b[i];
	}
	rr = bb;
	double t0 = wall_seconds();
	int it = 0;

	while (it < p.max_iters && sqrt(rr) > p.tol * sqrt(bb)) {
		double dq = 0.0, rr_new = 0.0;

		for (int64_t i = 0; i < n; i++) {
			double s = 0.0;

			for (int64_t k = a.rowptr[i]; k < a.rowptr[i + 1]; k++)
				s += a.val[k] * d[a.col[k]];
			q[i] = s;
			dq += d[i] * s;
		}
		double alpha = rr / dq;

		for (int64_t i = 0; i < n; i++) {
			x[i] += alpha * d[i];
			r[i] -= alpha * q[i];
			rr_new += r[i] * r[i];
		}
		double beta = rr_new / rr;

		for (int64_t i = 0; i < n; i++)
			d[i] = r[i] + beta * d[i];
		rr = rr_new;
		it++;
	}
	double t = wall_seconds() - t0;
	cks_t sum = 0.0L;

	cks_add(&sum, 0, x, n, 1);
	report("cg", "serial", 1, size, it, t, (double)sum);
	csr_free(&a);
	free(b);
	free(x);
	free(r);
	free(d);
	free(q);
	return 0;
}
