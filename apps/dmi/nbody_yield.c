// SPDX-License-Identifier: GPL-2.0
/* The movable form (docs/apps.md, Table 2): dmi/nbody.c plus one DMI_yield() per iteration; run with dmi run --movable. */
/*
 * N-body on DMI: each node owns a block of bodies (a slab along z) and
 * keeps their velocities in its memory; the positions of all bodies live in
 * the global address space, one page per node's block.  Every step a node
 * writes its block's positions into its page with EXCLUSIVE (owner from the
 * first write on), meets the others at DMI_barrier, and reads every page
 * with UPDATE: every node reads every page every step, so each node keeps a
 * copy that the owner's next write refreshes (pushed before that write
 * returns, hence before the barrier), and the reads after the barrier are
 * local.  The pages alternate between two sets by step parity, so one
 * barrier per step suffices.  Masses never change: every node makes them
 * all once.
 */
#include <stdlib.h>

#include "checksum.h"
#include "common.h"
#include "dmi_common.h"
#include "nbody.h"

int main(int argc, char **argv)
{
	enum app_size size = parse_size(argc, argv, argv[0]);
	struct dmi_world w = dmi_start();
	struct nbody_params p = nbody_params(size);
	int64_t n = nbody_count(&p);
	int64_t i0 = block_lo(n, w.size, w.rank);
	int64_t cnt = block_len(n, w.size, w.rank);
	int64_t page = 0, pages = 2 * (int64_t)w.size, posr;

	for (int q = 0; q < w.size; q++)
		if (3 * block_len(n, w.size, q) * (int64_t)sizeof(double) > page)
			page = 3 * block_len(n, w.size, q) * (int64_t)sizeof(double);
	dmi_map(1, &page, &pages, &posr);

	double *pos_all = xcalloc((size_t)(3 * n), sizeof(double));
	double *mass_all = xcalloc((size_t)n, sizeof(double));
	double *pos = xcalloc((size_t)(3 * cnt), sizeof(double));
	double *vel = xcalloc((size_t)(3 * cnt), sizeof(double));
	DMI_access_t *acc = xcalloc((size_t)w.size, sizeof(DMI_access_t));

	nbody_init(&p, 0, n, NULL, NULL, mass_all);
	nbody_init(&p, i0, cnt, pos, vel, NULL);
	DMI_CHECK(DMI_barrier());
	double t0 = wall_seconds();

	for (int step = 0; step < p.steps; step++) {
		DMI_yield();
		int64_t set = posr + (int64_t)(step & 1) * w.size * page;
		int na = 0;

		if (cnt)
			DMI_CHECK(DMI_write(set + w.rank * page,
					    3 * cnt * (int64_t)sizeof(double), pos,
					    EXCLUSIVE));
		DMI_CHECK(DMI_barrier());
		for (int q = 0; q < w.size; q++)
			if (block_len(n, w.size, q))
				acc[na++] = (DMI_access_t){
					set + q * page,
					3 * block_len(n, w.size, q) * (int64_t)sizeof(double),
					pos_all + 3 * block_lo(n, w.size, q)
				};
		DMI_CHECK(DMI_group_read(acc, na, UPDATE));
		nbody_step(&p, n, pos_all, mass_all, i0, cnt, pos, vel);
	}
	double t = wall_seconds() - t0;
	cks_t part = 0.0L;

	cks_add(&part, (uint64_t)(3 * i0), pos, 3 * cnt, 1);
	free(pos_all);
	free(mass_all);
	free(pos);
	free(vel);
	free(acc);
	dmi_report(&w, "nbody", size, p.steps, t, part);
	return 0;
}
