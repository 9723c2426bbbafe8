/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What every DMI app does the same way: start, share region addresses,
 * reduce a double over the nodes, and report from node 0 - all through the
 * global address space (dmi.h).
 */
#ifndef APPS_DMI_COMMON_H
#define APPS_DMI_COMMON_H

#include <stdint.h>

#include <dmi.h>

#include "checksum.h"
#include "common.h"

struct dmi_world {
	int rank, size;
};

/* Exits with "what: DMI_errmsg()" when rc < 0; returns rc otherwise. */
int64_t dmi_check(int64_t rc, const char *what);
#define DMI_CHECK(call) dmi_check((call), #call)

/* DMI_init and this node's rank and the node count. */
struct dmi_world dmi_start(void);

/*
 * Collective: node 0 maps n regions, region k of page_num[k] pages of
 * page_size[k] bytes, and passes their addresses to every node through the
 * root page; addr[k] gets them on every node.
 */
void dmi_map(int n, const int64_t *page_size, const int64_t *page_num,
	     int64_t *addr);

/*
 * An all-reduce of one double: every node writes its value into its own
 * slot (one page each, EXCLUSIVE: the node becomes its owner once and every
 * later write is local), meets the others at the barrier and reads all
 * slots with one group GET, combining them in rank order, so every node
 * gets the same bits.  The slots alternate between two sets by call
 * parity, so one barrier per reduction suffices: a node can overwrite a set
 * only after the next reduction's barrier, which every node reaches after
 * reading it.
 */
enum dmi_op { DMI_OP_SUM, DMI_OP_MAX };
struct dmi_reduce {
	struct dmi_world w;
	int64_t slots;		/* 2 * size pages of one double */
	int parity;
	double *vals;
	DMI_access_t *acc;
};

void dmi_reduce_init(struct dmi_reduce *r, const struct dmi_world *w);
double dmi_allreduce(struct dmi_reduce *r, double v, enum dmi_op op);
void dmi_reduce_free(struct dmi_reduce *r);

/*
 * Adds the nodes' checksum parts in rank order and, on node 0, prints the
 * report with the slowest node's time; then DMI_finalize.
 */
void dmi_report(const struct dmi_world *w, const char *app, enum app_size size,
		int iterations, double seconds, cks_t part);

/*
 * Reconfigurable programs (dmi_main.h): the world of an itergroup is its
 * threads, rank of pnum.  dmi_itergroup_start makes dmi_map (and what is
 * built on it: dmi_reduce_init, gvec_setup) work inside DMI_itergroup with
 * that rank, passing addresses through the page at `root` (a global page of
 * 4096 bytes the program maps in DMI_main) instead of the root page;
 * dmi_itergroup_end waits for the itergroup's threads and unmaps, on rank
 * 0, what dmi_map mapped since the start.  root is -1 in an itergroup that
 * calls no dmi_map.
 */
struct dmi_world dmi_itergroup_start(int rank, int pnum, int64_t root);
/* DMI_munmap of a region dmi_map mapped (from rank 0, before the end). */
void dmi_unmap(int64_t addr);
void dmi_itergroup_end(const struct dmi_world *w);

/*
 * With APPS_TRACE set in the environment, rank 0 prints "trace EVENT ITER
 * SECONDS NODES" (wall_seconds; ITER: iterations done): EVENT "iter" after
 * each iteration (dmi_trace), "start" when an itergroup starts
 * (dmi_itergroup_start), "restored" when rank 0 has restored its state
 * (dmi_trace_restored) and "end" when every thread has checkpointed
 * (dmi_itergroup_end), for apps/timeline.sh.
 */
void dmi_trace(const struct dmi_world *w, int64_t iter);
void dmi_trace_restored(const struct dmi_world *w);

#endif
