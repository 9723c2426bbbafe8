// SPDX-License-Identifier: GPL-2.0
#include "pagerank.h"

#include <math.h>

#include "prng.h"

#define PAGERANK_SEED 0x5061676552616e6bull

/* in-degree ~ round(exp(N(mu, sigma^2))), mean 4, standard deviation 1.3 */
#define DEG_MEAN 4.0
#define DEG_SD 1.3
#define P_REMOTE 0.1

struct pagerank_params pagerank_params(enum app_size size)
{
	if (size == SIZE_BENCH)
		return (struct pagerank_params){ .nsub = 16, .subsize = 1 << 16,
						 .tol = 1e-10, .max_iters = 300 };
	if (size == SIZE_EDGE)
		return (struct pagerank_params){ .nsub = 16, .subsize = size_edge(),
						 .tol = 1e-10, .max_iters = 300 };
	if (size == SIZE_MEDIUM)
		return (struct pagerank_params){ .nsub = 16, .subsize = 1 << 14,
						 .tol = 1e-10, .max_iters = 300 };
	return (struct pagerank_params){ .nsub = 16, .subsize = 1 << 12,
					 .tol = 1e-10, .max_iters = 300 };
}

static int64_t draw_degree(struct rng *r)
{
	double s2 = log(1.0 + (DEG_SD / DEG_MEAN) * (DEG_SD / DEG_MEAN));
	double mu = log(DEG_MEAN) - 0.5 * s2;

	return (int64_t)floor(exp(mu + sqrt(s2) * rng_normal(r)) + 0.5);
}

static int64_t draw_source(const struct pagerank_params *p, int64_t i,
			   struct rng *r)
{
	int64_t base = i / p->subsize * p->subsize;

	if (p->nsub > 1 && rng_unit(r) < P_REMOTE) {
		int64_t q = (int64_t)rng_below(r, (uint64_t)(pagerank_n(p) - p->subsize));

		return q < base ? q : q + p->subsize;
	}
	return base + (int64_t)rng_below(r, (uint64_t)p->subsize);
}

void pagerank_graph(const struct pagerank_params *p, int64_t r0, int64_t rows,
		    struct csr *out)
{
	out->r0 = r0;
	out->rows = rows;
	out->val = NULL;
	out->rowptr = xcalloc((size_t)rows + 1, sizeof(int64_t));
	for (int64_t i = 0; i < rows; i++) {
		struct rng r = rng_at(PAGERANK_SEED, 0, (uint64_t)(r0 + i));

		out->rowptr[i + 1] = out->rowptr[i] + draw_degree(&r);
	}
	out->col = xcalloc((size_t)out->rowptr[rows], sizeof(int64_t));
	for (int64_t i = 0; i < rows; i++) {
		struct rng r = rng_at(PAGERANK_SEED, 0, (uint64_t)(r0 + i));
		int64_t d = draw_degree(&r), *c = out->col + out->rowptr[i];

		for (int64_t k = 0; k < d; k++) {	/* insertion sort as drawn */
			int64_t s = draw_source(p, r0 + i, &r), t = k;

			for (; t > 0 && c[t - 1] > s; t--)
				c[t] = c[t - 1];
			c[t] = s;
		}
	}
}

void pagerank_count_out(const struct csr *a, int64_t lo, int64_t len,
			int64_t *outdeg)
{
	for (int64_t k = 0; k < a->rowptr[a->rows]; k++)
		if (a->col[k] >= lo && a->col[k] < lo + len)
			outdeg[a->col[k] - lo]++;
}

void pagerank_contrib(int64_t rows, const double *x, const int64_t *outdeg,
		      double *c)
{
	for (int64_t i = 0; i < rows; i++)
		c[i] = outdeg[i] ? x[i] / (double)outdeg[i] : 0.0;
}

double pagerank_update(const struct csr *a, int64_t n, const double *c,
		       const double *x, double *y)
{
	double diff = 0.0;

	csr_spmv(a, c, y);
	for (int64_t i = 0; i < a->rows; i++) {
		y[i] = 0.15 / (double)n + 0.85 * y[i];
		diff = fmax(diff, fabs(y[i] - x[i]));
	}
	return diff;
}
