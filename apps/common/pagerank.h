/* SPDX-License-Identifier: GPL-2.0 */
/*
 * PageRank on a synthetic web graph like the papers' (sec. 5.4 / 5.3.3):
 * nsub sub-graphs of subsize vertices; vertex in-degrees log-normal with mean
 * 4 and standard deviation 1.3; each in-edge comes from a uniformly chosen
 * vertex of another sub-graph with probability 0.1, else from the vertex's
 * own sub-graph.  Multi-edges may occur (each counts).
 *
 * Row i of the adjacency holds the sources of the in-edges of vertex i,
 * sorted.  An iteration is
 *
 *     c[j] = x[j] / outdeg(j);   y[i] = 0.15 / n + 0.85 * sum_{j in row i} c[j]
 *
 * until n * max_i |y[i] - x[i]| < tol: the maximum is exact whatever the
 * decomposition, so the iteration count is too.
 */
#ifndef APPS_PAGERANK_H
#define APPS_PAGERANK_H

#include <stdint.h>

#include "common.h"
#include "csr.h"

struct pagerank_params {
	int64_t nsub, subsize;	/* n = nsub * subsize vertices */
	double tol;
	int max_iters;
};

struct pagerank_params pagerank_params(enum app_size size);

static inline int64_t pagerank_n(const struct pagerank_params *p)
{
	return p->nsub * p->subsize;
}

/* Rows r0 .. r0 + rows - 1 of the adjacency (pattern, global columns). */
void pagerank_graph(const struct pagerank_params *p, int64_t r0, int64_t rows,
		    struct csr *out);

/* outdeg[j - lo] += number of entries j in a, for lo <= j < lo + len. */
void pagerank_count_out(const struct csr *a, int64_t lo, int64_t len,
			int64_t *outdeg);

/* c[i] = x[i] / outdeg[i] (0 for a vertex with no out-edges). */
void pagerank_contrib(int64_t rows, const double *x, const int64_t *outdeg,
		      double *c);

/*
 * y = 0.15 / n + 0.85 * A c over a's rows (c indexed by a's columns);
 * returns max |y[i] - x[i]| over the rows.
 */
double pagerank_update(const struct csr *a, int64_t n, const double *c,
		       const double *x, double *y);

#endif
