// SPDX-License-Identifier: GPL-2.0
#include "dmi_common.h"

#include <stdio.h>
#include <stdlib.h>

int64_t dmi_check(int64_t rc, const char *what)
{
	if (rc < 0) {
		fprintf(stderr, "node %d: %s: %s\n", DMI_rank(), what,
			DMI_errmsg());
		exit(1);
	}
	return rc;
}

struct dmi_world dmi_start(void)
{
	struct dmi_world w;

	DMI_CHECK(DMI_init());
	w.rank = DMI_rank();
	w.size = DMI_size();
	return w;
}

/* Root page bytes used by earlier dmi_map calls (the same on every node). */
static int64_t root_used;
/* In an itergroup: the page standing in for the root page, our rank, and
 * the regions rank 0 mapped (to unmap at the end). */
static int64_t group_root = -1;
static int group_rank = -1;
static int64_t group_maps[16];
static int group_nmaps;

void dmi_map(int n, const int64_t *page_size, const int64_t *page_num,
	     int64_t *addr)
{
	int64_t at = (group_root >= 0 ? group_root : DMI_root()) + root_used;
	int64_t bytes = n * (int64_t)sizeof(*addr);
	int rank = group_rank >= 0 ? group_rank : DMI_rank();

	if (root_used + bytes > 4096) {
		fprintf(stderr, "dmi_map: the root page is full\n");
		exit(1);
	}
	root_used += bytes;
	if (rank == 0) {
		for (int k = 0; k < n; k++) {
			addr[k] = DMI_CHECK(DMI_mmap(page_size[k], page_num[k]));
			if (group_rank < 0)
				continue;
			if (group_nmaps == (int)(sizeof(group_maps) / sizeof(*group_maps))) {
				fprintf(stderr, "dmi_map: more than %d regions in an itergroup\n",
					group_nmaps);
				exit(1);
			}
			group_maps[group_nmaps++] = addr[k];
		}
		DMI_CHECK(DMI_write(at, bytes, addr, PUT));
	}
	DMI_CHECK(DMI_barrier());
	if (rank != 0)
		DMI_CHECK(DMI_read(at, bytes, addr, GET));
}

void dmi_reduce_init(struct dmi_reduce *r, const struct dmi_world *w)
{
	int64_t ps = sizeof(double), pn = 2 * w->size;

	r->w = *w;
	dmi_map(1, &ps, &pn, &r->slots);
	r->parity = 0;
	r->vals = xcalloc((size_t)w->size, sizeof(double));
	r->acc = xcalloc((size_t)w->size, sizeof(DMI_access_t));
}

double dmi_allreduce(struct dmi_reduce *r, double v, enum dmi_op op)
{
	int p = r->w.size;
	int64_t set = r->slots + (int64_t)r->parity * p * sizeof(double);

	DMI_CHECK(DMI_write(set + r->w.rank * (int64_t)sizeof(double),
			    sizeof(double), &v, EXCLUSIVE));
	DMI_CHECK(DMI_barrier());
	for (int q = 0; q < p; q++)
		r->acc[q] = (DMI_access_t){ set + q * (int64_t)sizeof(double),
					    sizeof(double), &r->vals[q] };
	DMI_CHECK(DMI_group_read(r->acc, p, GET));
	r->parity ^= 1;

	double s = r->vals[0];

	for (int q = 1; q < p; q++)
		s = op == DMI_OP_MAX ? (r->vals[q] > s ? r->vals[q] : s)
				     : s + r->vals[q];
	return s;
}

void dmi_reduce_free(struct dmi_reduce *r)
{
	free(r->vals);
	free(r->acc);
}

/* One node's contribution to the report. */
struct part {
	cks_t checksum;
	double seconds;
};

void dmi_report(const struct dmi_world *w, const char *app, enum app_size size,
		int iterations, double seconds, cks_t part)
{
	int64_t ps = sizeof(struct part), pn = w->size, at;
	struct part mine = { part, seconds };

	dmi_map(1, &ps, &pn, &at);
	DMI_CHECK(DMI_write(at + w->rank * ps, ps, &mine, PUT));
	DMI_CHECK(DMI_barrier());
	if (w->rank == 0) {
		struct part *all = xcalloc((size_t)w->size, sizeof(*all));
		DMI_access_t *acc = xcalloc((size_t)w->size, sizeof(*acc));
		cks_t sum = 0.0L;
		double slowest = 0.0;

		for (int q = 0; q < w->size; q++)
			acc[q] = (DMI_access_t){ at + q * ps, ps, &all[q] };
		DMI_CHECK(DMI_group_read(acc, w->size, GET));
		for (int q = 0; q < w->size; q++) {
			sum += all[q].checksum;
			if (all[q].seconds > slowest)
				slowest = all[q].seconds;
		}
		report(app, "dmi", w->size, size, iterations, slowest,
		       (double)sum);
		free(all);
		free(acc);
	}
	DMI_CHECK(DMI_finalize());
}

static void trace(const struct dmi_world *w, const char *event, int64_t iter)
{
	static int on = -1;

	if (on < 0)
		on = getenv("APPS_TRACE") != NULL;
	if (on && w->rank == 0) {
		printf("trace %s %lld %.6f %d\n", event, (long long)iter, wall_seconds(),
		       w->size);
		fflush(stdout);
	}
}

struct dmi_world dmi_itergroup_start(int rank, int pnum, int64_t root)
{
	struct dmi_world w = { rank, pnum };

	trace(&w, "start", -1);
	group_root = root;
	group_rank = rank;
	group_nmaps = 0;
	root_used = 0;
	return w;
}

void dmi_unmap(int64_t addr)
{
	DMI_CHECK(DMI_munmap(addr));
	for (int k = 0; k < group_nmaps; k++)
		if (group_maps[k] == addr)
			group_maps[k] = group_maps[--group_nmaps];
}

void dmi_itergroup_end(const struct dmi_world *w)
{
	DMI_CHECK(DMI_barrier());	/* nobody uses the regions any more */
	if (w->rank == 0)
		for (int k = 0; k < group_nmaps; k++)
			DMI_CHECK(DMI_munmap(group_maps[k]));
	group_nmaps = 0;
	root_used = 0;
	trace(w, "end", -1);
}

void dmi_trace(const struct dmi_world *w, int64_t iter)
{
	trace(w, "iter", iter);
}

void dmi_trace_restored(const struct dmi_world *w)
{
	trace(w, "restored", -1);
}
