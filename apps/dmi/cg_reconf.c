// SPDX-License-Identifier: GPL-2.0
/*
 * CG on DMI, reconfigurable (dmi-reconfiguration sec. 4): the normal form
 * (cg.c, described below) as the body of DMI_itergroup.  DMI_main maps the
 * checkpoint (x, r and d of all rows; rr and bb in the data page) and calls
 * DMI_rescale; each itergroup makes the rows of its block, starts from
 * x = 0 or restores its block of x, r and d, iterates until
 * DMI_check_rescale says nodes join or leave (or the residual is small
 * enough), and writes its blocks back with EXCLUSIVE.  Node 0 takes the
 * checksum over the checkpointed x.
 *
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
#include <stdio.h>
#include <stdlib.h>

#include "checksum.h"
#include "common.h"
#include "csr.h"
#include "dmi_common.h"
#include "fem.h"
#include "gvec.h"
#include <dmi_main.h>

struct data_t {
	int64_t iter, itergroups;
	int64_t v[3], root;	/* checkpoint: x, r, d (n doubles each); dmi_map's page */
	double rr, bb;
	int32_t size;
};

#define CKPT_PAGE 4096

void DMI_main(int argc, char **argv)
{
	enum app_size size = parse_size(argc > 2 ? 2 : argc, argv, argv[0]);
	int init_node_num = argc > 2 ? atoi(argv[2]) : 1;
	struct cg_params p = cg_params(size);
	int64_t n = cg_n(&p), bytes = n * (int64_t)sizeof(double);
	struct data_t data = { .size = size };

	for (int k = 0; k < 3; k++)
		data.v[k] = DMI_CHECK(DMI_mmap(CKPT_PAGE, (bytes + CKPT_PAGE - 1) / CKPT_PAGE));
	data.root = DMI_CHECK(DMI_mmap(4096, 1));
	int64_t addr = DMI_CHECK(DMI_mmap(sizeof(data), 1));

	DMI_CHECK(DMI_write(addr, sizeof(data), &data, PUT));
	double t0 = wall_seconds();

	DMI_CHECK(DMI_rescale(addr, init_node_num));
	double t = wall_seconds() - t0;
	double *x = xcalloc((size_t)n, sizeof(double));
	cks_t acc = 0.0L;

	DMI_CHECK(DMI_read(addr, sizeof(data), &data, GET));
	DMI_CHECK(DMI_read(data.v[0], bytes, x, GET));
	cks_add(&acc, 0, x, n, 1);
	printf("itergroups %lld\n", (long long)data.itergroups);
	report("cg", "dmi-reconf", DMI_size(), size, (int)data.iter, t, (double)acc);
	free(x);
}

int DMI_itergroup(int rank, int pnum, int64_t addr)
{
	struct data_t data;

	DMI_CHECK(DMI_read(addr, sizeof(data), &data, GET));	/* restore */
	struct dmi_world w = dmi_itergroup_start(rank, pnum, data.root);
	struct cg_params p = cg_params((enum app_size)data.size);
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

	double *ckpt[3] = { x, r, d };
	int64_t off = lo * (int64_t)sizeof(double), len = nloc * (int64_t)sizeof(double);

	if (data.iter == 0) {
		fem_rhs(lo, nloc, b);
		for (int64_t i = 0; i < nloc; i++)
			r[i] = d[i] = b[i];
		data.bb = dmi_allreduce(&red, vec_dot(nloc, b, b), DMI_OP_SUM);
		data.rr = data.bb;
	} else if (nloc) {
		for (int k = 0; k < 3; k++)
			DMI_CHECK(DMI_read(data.v[k] + off, len, ckpt[k], GET));
	}
	dmi_trace_restored(&w);
	double bb = data.bb, rr = data.rr;
	int it = (int)data.iter;

	while (it < p.max_iters && sqrt(rr) > p.tol * sqrt(bb)) {
		if (DMI_CHECK(DMI_check_rescale()))
			break;
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
		dmi_trace(&w, it);
	}
	/* checkpoint: these blocks, where the next itergroup reads them */
	if (nloc)
		for (int k = 0; k < 3; k++)
			DMI_CHECK(DMI_write(data.v[k] + off, len, ckpt[k], EXCLUSIVE));
	dmi_itergroup_end(&w);
	if (rank == 0) {
		data.iter = it;
		data.rr = rr;
		data.itergroups++;
		DMI_CHECK(DMI_write(addr, sizeof(data), &data, PUT));
	}
	gvec_free(&g);
	dmi_reduce_free(&red);
	csr_free(&a);
	free(b);
	free(x);
	free(r);
	free(d);
	free(q);
	return it < p.max_iters && sqrt(rr) > p.tol * sqrt(bb);
}
