/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A vector of n doubles in the global address space, distributed like the
 * rows (block_lo): node q's block [lo_q, lo_q + len_q) is page q of the
 * region, so a node's writes of its block never touch another node's page.
 * It writes its block with EXCLUSIVE (it becomes the page's owner at the
 * first write; every later write is local) and reads the entries its rows
 * need from other blocks with one group GET per exchange.
 *
 * gvec_setup renumbers a block of CSR rows like halo.c does for MPI (own
 * entries, then ghosts ascending: csr_localize) and plans the reads: runs
 * of ghosts with gaps of at most GVEC_GAP entries in one block are read as
 * one range into a scratch buffer (a few unused entries cost less than an
 * access each), then copied into the ghost part.
 */
#ifndef APPS_GVEC_H
#define APPS_GVEC_H

#include <stdint.h>

#include "csr.h"
#include "dmi_common.h"

#ifndef GVEC_GAP	/* -DGVEC_GAP=N to try another (docs/apps.md) */
#define GVEC_GAP 16
#endif

struct gvec {
	int64_t base, page;	/* region address, bytes per page */
	int64_t lo, nloc, nghost;
	int64_t nacc;		/* ranges read per exchange */
	DMI_access_t *acc;
	double *scratch;
	int64_t *sidx;		/* ghost k is scratch[sidx[k]] */
};

/* Collective. Maps the region and renumbers a's columns. */
void gvec_setup(struct gvec *g, struct csr *a, int64_t n,
		const struct dmi_world *w);

/* Writes x[0 .. nloc) into this node's block. */
void gvec_put(struct gvec *g, double *x);

/* Reads x[nloc .. nloc + nghost) from the other blocks (after a barrier). */
void gvec_get(struct gvec *g, double *x);

void gvec_free(struct gvec *g);

#endif
