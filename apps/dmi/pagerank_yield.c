// SPDX-License-Identifier: GPL-2.0
/* The movable form (docs/apps.md, Table 2): dmi/pagerank.c plus one DMI_yield() per iteration; run with dmi run --movable. */
/*
 * PageRank on DMI: each node generates and owns the in-edge rows and the
 * ranks of a block of vertices.  The contributions x[j] / outdeg(j) form a
 * vector in the global address space (gvec.c: one page per node's block,
 * written with EXCLUSIVE by its owner, the entries other rows need read
 * with one group GET).  Out-degrees are summed once: every node writes its
 * count of all sources into its own page of a counts region and reads the
 * slices of its block from every node's page (GET).  Convergence is a
 * maximum over the nodes through the global address space (dmi_allreduce).
 *
 * The contributions need no second set of pages: a node overwrites its
 * block only after the convergence barrier of the iteration before, which
 * every node reaches after its reads.
 */
#include <stdlib.h>

#include "checksum.h"
#include "common.h"
#include "csr.h"
#include "dmi_common.h"
#include "gvec.h"
#include "pagerank.h"

/* outdeg[0 .. nloc): the out-degrees of our block, summed over all nodes. */
static void sum_outdeg(const struct dmi_world *w, const struct csr *a,
		       int64_t n, int64_t lo, int64_t nloc, int64_t *outdeg)
{
	int64_t page = n * (int64_t)sizeof(int64_t), pages = w->size, counts;
	int64_t *count = xcalloc((size_t)n, sizeof(int64_t));
	int64_t *theirs = xcalloc((size_t)(w->size * nloc) + 1, sizeof(int64_t));
	DMI_access_t *acc = xcalloc((size_t)w->size, sizeof(DMI_access_t));

	dmi_map(1, &page, &pages, &counts);
	pagerank_count_out(a, 0, n, count);
	DMI_CHECK(DMI_write(counts + w->rank * page, page, count, EXCLUSIVE));
	DMI_CHECK(DMI_barrier());
	for (int q = 0; q < w->size; q++)
		acc[q] = (DMI_access_t){ counts + q * page + lo * (int64_t)sizeof(int64_t),
					 nloc * (int64_t)sizeof(int64_t),
					 theirs + q * nloc };
	if (nloc)
		DMI_CHECK(DMI_group_read(acc, w->size, GET));
	for (int q = 0; q < w->size; q++)
		for (int64_t i = 0; i < nloc; i++)
			outdeg[i] += theirs[q * nloc + i];
	DMI_CHECK(DMI_barrier());	/* everybody read: the region can go */
	if (w->rank == 0)
		dmi_unmap(counts);
	free(count);
	free(theirs);
	free(acc);
}

int main(int argc, char **argv)
{
	enum app_size size = parse_size(argc, argv, argv[0]);
	struct dmi_world w = dmi_start();
	struct pagerank_params p = pagerank_params(size);
	int64_t n = pagerank_n(&p);
	int64_t lo = block_lo(n, w.size, w.rank);
	int64_t nloc = block_len(n, w.size, w.rank);
	struct csr a;
	struct gvec g;
	struct dmi_reduce red;

	pagerank_graph(&p, lo, nloc, &a);
	int64_t *outdeg = xcalloc((size_t)nloc + 1, sizeof(int64_t));

	sum_outdeg(&w, &a, n, lo, nloc, outdeg);
	gvec_setup(&g, &a, n, &w);
	dmi_reduce_init(&red, &w);
	double *x = xcalloc((size_t)nloc + 1, sizeof(double));
	double *y = xcalloc((size_t)nloc + 1, sizeof(double));
	double *c = xcalloc((size_t)(nloc + g.nghost) + 1, sizeof(double));

	for (int64_t i = 0; i < nloc; i++)
		x[i] = 1.0 / (double)n;
	DMI_CHECK(DMI_barrier());
	double t0 = wall_seconds();
	int it = 0;

	while (it < p.max_iters) {
		DMI_yield();
		double diff;

		pagerank_contrib(nloc, x, outdeg, c);
		gvec_put(&g, c);
		DMI_CHECK(DMI_barrier());
		gvec_get(&g, c);
		diff = pagerank_update(&a, n, c, x, y);
		diff = dmi_allreduce(&red, diff, DMI_OP_MAX);
		swap_arrays(&x, &y);
		it++;
		if ((double)n * diff < p.tol)
			break;
	}
	double t = wall_seconds() - t0;
	cks_t part = 0.0L;

	cks_add(&part, (uint64_t)lo, x, nloc, 1);
	gvec_free(&g);
	dmi_reduce_free(&red);
	csr_free(&a);
	free(outdeg);
	free(x);
	free(y);
	free(c);
	dmi_report(&w, "pagerank", size, it, t, part);
	return 0;
}
