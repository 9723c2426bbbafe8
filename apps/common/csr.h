/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A block of rows r0 .. r0 + rows - 1 of a sparse matrix in CSR.  Column
 * indices are global when a generator returns the block; a distributed
 * program may renumber them into its local vector layout.  val is NULL for
 * a pattern (all ones, as PageRank's adjacency).
 */
#ifndef APPS_CSR_H
#define APPS_CSR_H

#include <stdint.h>

struct csr {
	int64_t r0, rows;
	int64_t *rowptr;	/* rows + 1 */
	int64_t *col;		/* rowptr[rows] */
	double *val;		/* rowptr[rows], or NULL */
};

void csr_free(struct csr *a);

/* y[i] = sum_k val[k] * x[col[k]] over row i, k in order (val NULL: 1). */
void csr_spmv(const struct csr *a, const double *x, double *y);

/*
 * Renumbers a's columns into a local vector layout: [lo, lo + nloc) to
 * 0 .. nloc - 1, then the other columns ("ghosts"), distinct and ascending,
 * to nloc .. nloc + nghost - 1.  Returns nghost; *ghost (malloc'd, the
 * caller frees it) gets their global indices in that order.
 */
int64_t csr_localize(struct csr *a, int64_t lo, int64_t nloc, int64_t **ghost);

/* Local vector helpers with a fixed summation order. */
double vec_dot(int64_t n, const double *x, const double *y);
/* y += alpha * x */
void vec_axpy(int64_t n, double alpha, const double *x, double *y);
/* y = x + beta * y */
void vec_xpby(int64_t n, const double *x, double beta, double *y);

#endif
