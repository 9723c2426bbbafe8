/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the reconfigurable apps (APP_reconf.c, dmi_main.h) do the same way:
 * the checkpoint in the global address space (Fig. 7's data_t: the
 * iterations done and up to DMI_CKPT_VECS vectors of doubles indexed
 * globally, so an itergroup of any size finds its block), DMI_main, and the
 * start and end of an itergroup.
 */
#ifndef APPS_DMI_RECONF_H
#define APPS_DMI_RECONF_H

#include <stdint.h>

#include "common.h"
#include "dmi_common.h"

#define DMI_CKPT_VECS 3

struct dmi_ckpt {
	int64_t iter;		/* iterations done */
	int64_t itergroups;	/* itergroups run (for the report) */
	int64_t done;		/* set by the app when it converged */
	int64_t root;		/* dmi_map's page in an itergroup */
	int64_t vec[DMI_CKPT_VECS];	/* len doubles each */
	int64_t len;
	double val[2];		/* app scalars */
	int32_t size, nvec;
	int32_t edge, pad;	/* size_edge() for SIZE_EDGE: the other nodes never parse argv */
};

/*
 * DMI_main: maps nvec vectors of len doubles (pages of 4 KiB), the page for
 * dmi_map and the checkpoint itself, runs DMI_rescale on INIT_NODE_NUM
 * nodes (argv[2], default 1), then prints "itergroups N" and the report
 * with the checksum of vector 0 (the result).
 */
void dmi_reconf_main(int argc, char **argv, const char *app, enum app_size size,
		     int nvec, int64_t len);

/* Start of DMI_itergroup: reads the checkpoint at addr into c and starts
 * the itergroup (dmi_itergroup_start). */
struct dmi_world dmi_reconf_start(int rank, int pnum, int64_t addr, struct dmi_ckpt *c);

/* Restore / checkpoint entries [lo, lo + n) of vector k (EXCLUSIVE: this
 * node owns the pages of its block, and hands them over when it leaves). */
void dmi_ckpt_get(const struct dmi_ckpt *c, int k, int64_t lo, int64_t n, double *buf);
void dmi_ckpt_put(const struct dmi_ckpt *c, int k, int64_t lo, int64_t n, const double *buf);

/* End of DMI_itergroup, after every thread's dmi_ckpt_put: waits for them
 * (dmi_itergroup_end) and, on rank 0, writes c back with one more
 * itergroup. */
void dmi_reconf_end(const struct dmi_world *w, int64_t addr, struct dmi_ckpt *c);

#endif
