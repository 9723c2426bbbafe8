// SPDX-License-Identifier: GPL-2.0
/* The movable form (docs/apps.md, Table 2): dmi/cg.c plus one DMI_yield() per iteration; run with dmi run --movable. */
/*
 * Conjugate gradients on the distorted FEM matrix, on DMI: each node
 * generates and owns a block of rows of A and of b; x, r and q stay in its
 * memory.  The search direction d is a vector in the global address space
 * (gvec.c: one page per node's block, written with EXCLUSIVE by its owner,
 * the entries the block's rows reference read with one group GET before
 * each product).  The two dot products per iteration are sums over the
 * nodes through the global address space (dmi_allreduce, added in rank
 * order).
 *
 * d needs no second set of pages: a node overwrites its block only after
 * the barriers of the iteration's dot products, which every node reaches
 * after its reads.
 */
#include <math.h>
#include <stdlib.h>

#include "checksum.h"
#include "common.h"
#include "csr.h"
#include "dmi_common.h"
#include "fem.h"
#include "gvec.h"

int main(int argc, char **argv)
{
	enum app_size size = parse_size(argc, argv, argv[0]);
	struct dmi_world w = dmi_start();
	struct cg_params p = cg_params(size);
	int64_t n = cg_n(&p);
	int64_t lo = block_lo(n, w.size, w.rank);
	int64_t nloc = block_len(n, w.size, w.rank);
	struct csr a;
	struct gvec g;
	struct dmi_reduce red;

	fem_matrix(&p, lo, nloc, &a);
	gvec_setup(&g, &a, n, &w);
	dmi_reduce_init(&red, &w);
	double *b = xcalloc((size_t)nloc + 1, sizeof(double));
	double *x = xcalloc((size_t)nloc + 1, sizeof(double));
	double *r = xcalloc((size_t)nloc + 1, sizeof(double));
	double *d = xcalloc((size_t)(nloc + g.nghost) + 1, sizeof(double));
	double *q = xcalloc((size_t)nloc + 1, sizeof(double));

	fem_rhs(lo, nloc, b);
	for (int64_t i = 0; i < nloc; i++)
		r[i] = d[i] = b[i];
	double bb = dmi_allreduce(&red, vec_dot(nloc, b, b), DMI_OP_SUM), rr = bb;

	DMI_CHECK(DMI_barrier());
	double t0 = wall_seconds();
	int it = 0;

	while (it < p.max_iters && sqrt(rr) > p.tol * sqrt(bb)) {
		DMI_yield();
		gvec_put(&g, d);
		DMI_CHECK(DMI_barrier());
		gvec_get(&g, d);
		csr_spmv(&a, d, q);
		double alpha = rr / dmi_allreduce(&red, vec_dot(nloc, d, q),
						  DMI_OP_SUM);

		vec_axpy(nloc, alpha, d, x);
		vec_axpy(nloc, -alpha, q, r);
		double rr_new = dmi_allreduce(&red, vec_dot(nloc, r, r), DMI_OP_SUM);

		vec_xpby(nloc, r, rr_new / rr, d);
		rr = rr_new;
		it++;
	}
	double t = wall_seconds() - t0;
	cks_t part = 0.0L;

	cks_add(&part, (uint64_t)lo, x, nloc, 1);
	gvec_free(&g);
	dmi_reduce_free(&red);
	csr_free(&a);
	free(b);
	free(x);
	free(r);
	free(d);
	free(q);
	dmi_report(&w, "cg", size, it, t, part);
	return 0;
}
