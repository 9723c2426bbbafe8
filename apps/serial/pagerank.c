// SPDX-License-Identifier: GPL-2.0
/* PageRank, serial reference: the whole graph, plain loops. */
#include <math.h>
#include <stdlib.h>

#include "checksum.h"
#include "common.h"
#include "csr.h"
#include "pagerank.h"

int main(int argc, char **argv)
{
	enum app_size size = parse_size(argc, argv, argv[0]);
	struct pagerank_params p = pagerank_params(size);
	int64_t n = pagerank_n(&p);
	struct csr g;

	pagerank_graph(&p, 0, n, &g);
	int64_t *outdeg = xcalloc((size_t)n, sizeof(int64_t));
	double *x = xcalloc((size_t)n, sizeof(double));
	double *y = xcalloc((size_t)n, sizeof(double));
	double *c = xcalloc((size_t)n, sizeof(double));

	for (int64_t k = 0; k < g.rowptr[n]; k++)
		outdeg[g.col[k]]++;
	for (int64_t i = 0; i < n; i++)
		x[i] = 1.0 / (double)n;
	double t0 = wall_seconds();
	int it = 0;

	while (it < p.max_iters) {
		double diff = 0.0;

		for (int64_t j = 0; j < n; j++)
			c[j] = outdeg[j] ? x[j] / (double)outdeg[j] : 0.0;
		for (int64_t i = 0; i < n; i++) {
			double s = 0.0;

			for (int64_t k = g.rowptr[i]; k < g.rowptr[i + 1]; k++)
				s += c[g.col[k]];
			y[i] = 0.15 / (double)n + 0.85 * s;
			diff = fmax(diff, fabs(y[i] - x[i]));
		}
		swap_arrays(&x, &y);
		it++;
		if ((double)n * diff < p.tol)
			break;
	}
	double t = wall_seconds() - t0;
	cks_t sum = 0.0L;

	cks_add(&sum, 0, x, n, 1);
	report("pagerank", "serial", 1, size, it, t, (double)sum);
	csr_free(&g);
	free(outdeg);
	free(x);
	free(y);
	free(c);
	return 0;
}
