// SPDX-License-Identifier: GPL-2.0
#include "gvec.h"

#include <stdlib.h>

void gvec_setup(struct gvec *g, struct csr *a, int64_t n,
		const struct dmi_world *w)
{
	int p = w->size;
	int64_t *ghost, pages = p, maxlen = 0;

	for (int q = 0; q < p; q++)
		if (block_len(n, p, q) > maxlen)
			maxlen = block_len(n, p, q);
	g->page = (maxlen ? maxlen : 1) * (int64_t)sizeof(double);
	dmi_map(1, &g->page, &pages, &g->base);
	g->lo = block_lo(n, p, w->rank);
	g->nloc = block_len(n, p, w->rank);
	g->nghost = csr_localize(a, g->lo, g->nloc, &ghost);

	/* plan: ranges [start, end) of global entries within one block */
	g->acc = xcalloc((size_t)g->nghost + 1, sizeof(DMI_access_t));
	g->sidx = xcalloc((size_t)g->nghost + 1, sizeof(int64_t));
	int64_t *start = xcalloc((size_t)g->nghost + 1, sizeof(int64_t));
	int64_t *len = xcalloc((size_t)g->nghost + 1, sizeof(int64_t));
	int *owner = xcalloc((size_t)g->nghost + 1, sizeof(int));
	int64_t nacc = 0, total = 0;

	for (int64_t k = 0; k < g->nghost; k++) {
		int q = block_owner(n, p, ghost[k]);

		if (nacc && owner[nacc - 1] == q &&
		    ghost[k] - (start[nacc - 1] + len[nacc - 1]) < GVEC_GAP) {
			total += ghost[k] + 1 - (start[nacc - 1] + len[nacc - 1]);
			len[nacc - 1] = ghost[k] + 1 - start[nacc - 1];
		} else {
			owner[nacc] = q;
			start[nacc] = ghost[k];
			len[nacc++] = 1;
			total++;
		}
		g->sidx[k] = total - 1;
	}
	g->scratch = xcalloc((size_t)total + 1, sizeof(double));
	for (int64_t r = 0, off = 0; r < nacc; r++) {
		int q = owner[r];
		int64_t addr = g->base + q * g->page +
			       (start[r] - block_lo(n, p, q)) * (int64_t)sizeof(double);

		g->acc[r] = (DMI_access_t){ addr, len[r] * (int64_t)sizeof(double),
					    g->scratch + off };
		off += len[r];
	}
	g->nacc = nacc;
	g->base += w->rank * g->page;	/* from now on: our own block */
	free(ghost);
	free(start);
	free(len);
	free(owner);
}

void gvec_put(struct gvec *g, double *x)
{
	if (g->nloc)
		DMI_CHECK(DMI_write(g->base, g->nloc * (int64_t)sizeof(double),
				    x, EXCLUSIVE));
}

void gvec_get(struct gvec *g, double *x)
{
	if (!g->nacc)
		return;
	DMI_CHECK(DMI_group_read(g->acc, g->nacc, GET));
	for (int64_t k = 0; k < g->nghost; k++)
		x[g->nloc + k] = g->scratch[g->sidx[k]];
}

void gvec_free(struct gvec *g)
{
	free(g->acc);
	free(g->scratch);
	free(g->sidx);
}
