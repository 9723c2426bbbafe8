// SPDX-License-Identifier: GPL-2.0
#include "csr.h"

#include <stdlib.h>

void csr_free(struct csr *a)
{
	free(a->rowptr);
	free(a->col);
	free(a->val);
	a->rowptr = a->col = NULL;
	a->val = NULL;
}

void csr_spmv(const struct csr *a, const double *x, double *y)
{
	for (int64_t i = 0; i < a->rows; i++) {
		double s = 0.0;

		if (a->val)
			for (int64_t k = a->rowptr[i]; k < a->rowptr[i + 1]; k++)
				s += a->val[k] * x[a->col[k]];
		else
			for (int64_t k = a->rowptr[i]; k < a->rowptr[i + 1]; k++)
				s += x[a->col[k]];
		y[i] = s;
	}
}

double vec_dot(int64_t n, const double *x, const double *y)
{
	double s = 0.0;

	for (int64_t i = 0; i < n; i++)
		s += x[i] * y[i];
	return s;
}

void vec_axpy(int64_t n, double alpha, const double *x, double *y)
{
	for (int64_t i = 0; i < n; i++)
		y[i] += alpha * x[i];
}

void vec_xpby(int64_t n, const double *x, double beta, double *y)
{
	for (int64_t i = 0; i < n; i++)
		y[i] = x[i] + beta * y[i];
}
