// SPDX-License-Identifier: GPL-2.0
#include "csr.h"

#include <stdlib.h>

#include "common.h"

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

int64_t csr_localize(struct csr *a, int64_t lo, int64_t nloc, int64_t **ghost)
{
	int64_t nnz = a->rowptr[a->rows], k = 0, u = 0;
	int64_t *g = xcalloc((size_t)nnz + 1, sizeof(int64_t));

	for (int64_t e = 0; e < nnz; e++)
		if (a->col[e] < lo || a->col[e] >= lo + nloc)
			g[k++] = a->col[e];
	qsort(g, (size_t)k, sizeof(int64_t), cmp_i64);
	for (int64_t e = 0; e < k; e++)
		if (!u || g[u - 1] != g[e])
			g[u++] = g[e];

	/* renumber: own entries first, then the ghosts in ascending order */
	for (int64_t e = 0; e < nnz; e++) {
		int64_t j = a->col[e];

		if (j >= lo && j < lo + nloc) {
			a->col[e] = j - lo;
		} else {
			int64_t *at = bsearch(&j, g, (size_t)u, sizeof(int64_t),
					      cmp_i64);

			a->col[e] = nloc + (at - g);
		}
	}
	*ghost = g;
	return u;
}

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
