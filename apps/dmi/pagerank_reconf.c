// SPDX-License-Identifier: GPL-2.0
/*
 * PageRank on DMI, reconfigurable (dmi-reconfiguration sec. 4): the normal
 * form (pagerank.c, described below) as the body of DMI_itergroup.
 * DMI_main maps the checkpoint (the ranks x of all vertices) and calls
 * DMI_rescale; each itergroup makes the rows of its block and sums their
 * out-degrees as pagerank.c does, starts from x = 1/n or restores its block
 * of x, iterates until DMI_check_rescale says nodes join or leave (or x
 * converged), and writes its block of x back with EXCLUSIVE.  Node 0 takes
 * the checksum over the checkpointed ranks.
 *
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
#include <stdio.h>
#include <stdlib.h>

#include "checksum.h"
#include "common.h"
#include "csr.h"
#include "dmi_common.h"
#include "gvec.h"
#include "pagerank.h"
#include <dmi_main.h>

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

struct data_t {
	int64_t iter, itergroups, done;
	int64_t x, root;	/* checkpoint: n doubles; dmi_map's page */
	int32_t size;
};

#define CKPT_PAGE 4096

void DMI_main(int argc, char **argv)
{
	enum app_size size = parse_size(argc > 2 ? 2 : argc, argv, argv[0]);
	int init_node_num = argc > 2 ? atoi(argv[2]) : 1;
	struct pagerank_params p = pagerank_params(size);
	int64_t n = pagerank_n(&p), bytes = n * (int64_t)sizeof(double);
	struct data_t data = { .size = size };

	data.x = DMI_CHECK(DMI_mmap(CKPT_PAGE, (bytes + CKPT_PAGE - 1) / CKPT_PAGE));
	data.root = DMI_CHECK(DMI_mmap(4096, 1));
	int64_t addr = DMI_CHECK(DMI_mmap(sizeof(data), 1));

	DMI_CHECK(DMI_write(addr, sizeof(data), &data, PUT));
	double t0 = wall_seconds();

	DMI_CHECK(DMI_rescale(addr, init_node_num));
	double t = wall_seconds() - t0;
	double *x = xcalloc((size_t)n, sizeof(double));
	cks_t acc = 0.0L;

	DMI_CHECK(DMI_read(addr, sizeof(data), &data, GET));
	DMI_CHECK(DMI_read(data.x, bytes, x, GET));
	cks_add(&acc, 0, x, n, 1);
	printf("itergroups %lld\n", (long long)data.itergroups);
	report("pagerank", "dmi-reconf", DMI_size(), size, (int)data.iter, t, (double)acc);
	free(x);
}

int DMI_itergroup(int rank, int pnum, int64_t addr)
{
	struct data_t data;

	DMI_CHECK(DMI_read(addr, sizeof(data), &data, GET));	/* restore */
	struct dmi_world w = dmi_itergroup_start(rank, pnum, data.root);
	struct pagerank_params p = pagerank_params((enum app_size)data.size);
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

	if (data.iter == 0)
		for (int64_t i = 0; i < nloc; i++)
			x[i] = 1.0 / (double)n;
	else if (nloc)
		DMI_CHECK(DMI_read(data.x + lo * (int64_t)sizeof(double),
				   nloc * (int64_t)sizeof(double), x, GET));
	dmi_trace_restored(&w);
	int it = (int)data.iter;

	while (it < p.max_iters && !data.done) {
		double diff;

		if (DMI_CHECK(DMI_check_rescale()))
			break;
		pagerank_contrib(nloc, x, outdeg, c);
		gvec_put(&g, c);
		DMI_CHECK(DMI_barrier());
		gvec_get(&g, c);
		diff = pagerank_update(&a, n, c, x, y);
		diff = dmi_allreduce(&red, diff, DMI_OP_MAX);
		swap_arrays(&x, &y);
		it++;
		dmi_trace(&w, it);
		if ((double)n * diff < p.tol)
			data.done = 1;
	}
	/* checkpoint: this block, where the next itergroup reads it */
	if (nloc)
		DMI_CHECK(DMI_write(data.x + lo * (int64_t)sizeof(double),
				    nloc * (int64_t)sizeof(double), x, EXCLUSIVE));
	dmi_itergroup_end(&w);
	if (rank == 0) {
		data.iter = it;
		data.itergroups++;
		DMI_CHECK(DMI_write(addr, sizeof(data), &data, PUT));
	}
	gvec_free(&g);
	dmi_reduce_free(&red);
	csr_free(&a);
	free(outdeg);
	free(x);
	free(y);
	free(c);
	return !data.done && it < p.max_iters;
}
