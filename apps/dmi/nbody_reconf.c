// SPDX-License-Identifier: GPL-2.0
/*
 * N-body on DMI, reconfigurable (dmi-reconfiguration sec. 4): the normal
 * form (nbody.c) as the body of DMI_itergroup.  DMI_main maps the
 * checkpoint (positions and velocities of all bodies, one region each) and
 * calls DMI_rescale; each itergroup makes its block's bodies at step 0 or
 * restores them from the checkpoint, runs steps until DMI_check_rescale
 * says nodes join or leave, and writes its block back with EXCLUSIVE (so a
 * leaving node hands its pages over).  The exchange is nbody.c's, on
 * pages mapped per itergroup for its blocks.  Node 0 takes the checksum
 * over the checkpointed positions.
 *
 * usage: nbody_reconf [small|bench] [INIT_NODE_NUM]
 */
#include <stdio.h>
#include <stdlib.h>

#include "checksum.h"
#include "common.h"
#include "dmi_common.h"
#include "nbody.h"
#include <dmi_main.h>

struct data_t {
	int64_t iter, itergroups;
	int64_t pos, vel, root;	/* checkpoint: 3N doubles each; dmi_map's page */
	int32_t size;
};

#define CKPT_PAGE 4096

void DMI_main(int argc, char **argv)
{
	enum app_size size = parse_size(argc > 2 ? 2 : argc, argv, argv[0]);
	int init_node_num = argc > 2 ? atoi(argv[2]) : 1;
	struct nbody_params p = nbody_params(size);
	int64_t n = nbody_count(&p), bytes = 3 * n * (int64_t)sizeof(double);
	struct data_t data = { .size = size };

	data.pos = DMI_CHECK(DMI_mmap(CKPT_PAGE, (bytes + CKPT_PAGE - 1) / CKPT_PAGE));
	data.vel = DMI_CHECK(DMI_mmap(CKPT_PAGE, (bytes + CKPT_PAGE - 1) / CKPT_PAGE));
	data.root = DMI_CHECK(DMI_mmap(4096, 1));
	int64_t addr = DMI_CHECK(DMI_mmap(sizeof(data), 1));

	DMI_CHECK(DMI_write(addr, sizeof(data), &data, PUT));
	double t0 = wall_seconds();

	DMI_CHECK(DMI_rescale(addr, init_node_num));
	double t = wall_seconds() - t0;
	double *pos = xcalloc((size_t)(3 * n), sizeof(double));
	cks_t acc = 0.0L;

	DMI_CHECK(DMI_read(addr, sizeof(data), &data, GET));
	DMI_CHECK(DMI_read(data.pos, bytes, pos, GET));
	cks_add(&acc, 0, pos, 3 * n, 1);
	printf("itergroups %lld\n", (long long)data.itergroups);
	report("nbody", "dmi-reconf", DMI_size(), size, (int)data.iter, t, (double)acc);
	free(pos);
}

int DMI_itergroup(int rank, int pnum, int64_t addr)
{
	struct data_t data;

	DMI_CHECK(DMI_read(addr, sizeof(data), &data, GET));	/* restore */
	struct dmi_world w = dmi_itergroup_start(rank, pnum, data.root);
	struct nbody_params p = nbody_params((enum app_size)data.size);
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
	int64_t off = 3 * i0 * (int64_t)sizeof(double), len = 3 * cnt * (int64_t)sizeof(double);

	nbody_init(&p, 0, n, NULL, NULL, mass_all);
	if (data.iter == 0) {
		nbody_init(&p, i0, cnt, pos, vel, NULL);
	} else if (cnt) {
		DMI_CHECK(DMI_read(data.pos + off, len, pos, GET));
		DMI_CHECK(DMI_read(data.vel + off, len, vel, GET));
	}
	dmi_trace_restored(&w);

	for (int step = (int)data.iter; step < p.steps; step++) {
		int64_t set = posr + (int64_t)(step & 1) * w.size * page;
		int na = 0;

		if (DMI_CHECK(DMI_check_rescale()))
			break;
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
		data.iter = step + 1;
		dmi_trace(&w, data.iter);
	}
	/* checkpoint: this block, where the next itergroup reads it */
	if (cnt) {
		DMI_CHECK(DMI_write(data.pos + off, len, pos, EXCLUSIVE));
		DMI_CHECK(DMI_write(data.vel + off, len, vel, EXCLUSIVE));
	}
	dmi_itergroup_end(&w);
	if (rank == 0) {
		data.itergroups++;
		DMI_CHECK(DMI_write(addr, sizeof(data), &data, PUT));
	}
	free(pos_all);
	free(mass_all);
	free(pos);
	free(vel);
	free(acc);
	return data.iter != p.steps;
}
