// SPDX-License-Identifier: GPL-2.0
#include "dmi_reconf.h"

#include <stdio.h>
#include <stdlib.h>

#include "checksum.h"

#define CKPT_PAGE 4096

void dmi_reconf_main(int argc, char **argv, const char *app, enum app_size size,
		     int nvec, int64_t len)
{
	int init_node_num = argc > 2 ? atoi(argv[2]) : 1;
	int64_t bytes = len * (int64_t)sizeof(double);
	struct dmi_ckpt c = { .size = size, .nvec = nvec, .len = len, .edge = size_edge() };

	if (nvec < 1 || nvec > DMI_CKPT_VECS) {
		fprintf(stderr, "dmi_reconf_main: %d vectors (1 to %d)\n", nvec, DMI_CKPT_VECS);
		exit(2);
	}
	for (int k = 0; k < nvec; k++)
		c.vec[k] = DMI_CHECK(DMI_mmap(CKPT_PAGE, (bytes + CKPT_PAGE - 1) / CKPT_PAGE));
	c.root = DMI_CHECK(DMI_mmap(4096, 1));
	int64_t addr = DMI_CHECK(DMI_mmap(sizeof(c), 1));

	DMI_CHECK(DMI_write(addr, sizeof(c), &c, PUT));
	double t0 = wall_seconds();

	DMI_CHECK(DMI_rescale(addr, init_node_num));
	double t = wall_seconds() - t0;
	double *x = xcalloc((size_t)len, sizeof(double));
	cks_t acc = 0.0L;

	DMI_CHECK(DMI_read(addr, sizeof(c), &c, GET));
	DMI_CHECK(DMI_read(c.vec[0], bytes, x, GET));
	cks_add(&acc, 0, x, len, 1);
	printf("itergroups %lld\n", (long long)c.itergroups);
	report(app, "dmi-reconf", DMI_size(), size, (int)c.iter, t, (double)acc);
	free(x);
	DMI_CHECK(DMI_munmap(addr));
	DMI_CHECK(DMI_munmap(c.root));
	for (int k = 0; k < nvec; k++)
		DMI_CHECK(DMI_munmap(c.vec[k]));
}

struct dmi_world dmi_reconf_start(int rank, int pnum, int64_t addr, struct dmi_ckpt *c)
{
	DMI_CHECK(DMI_read(addr, sizeof(*c), c, GET));
	if (c->size == SIZE_EDGE)
		size_set_edge(c->edge);
	return dmi_itergroup_start(rank, pnum, c->root);
}

static void check_range(const struct dmi_ckpt *c, int k, int64_t lo, int64_t n)
{
	if (k < 0 || k >= c->nvec || lo < 0 || n < 0 || lo + n > c->len) {
		fprintf(stderr, "dmi_ckpt: vector %d entries [%lld, %lld) outside %d x %lld\n", k,
			(long long)lo, (long long)(lo + n), c->nvec, (long long)c->len);
		exit(2);
	}
}

void dmi_ckpt_get(const struct dmi_ckpt *c, int k, int64_t lo, int64_t n, double *buf)
{
	check_range(c, k, lo, n);
	if (n)
		DMI_CHECK(DMI_read(c->vec[k] + lo * (int64_t)sizeof(double),
				   n * (int64_t)sizeof(double), buf, GET));
}

void dmi_ckpt_put(const struct dmi_ckpt *c, int k, int64_t lo, int64_t n, const double *buf)
{
	check_range(c, k, lo, n);
	if (n)
		DMI_CHECK(DMI_write(c->vec[k] + lo * (int64_t)sizeof(double),
				    n * (int64_t)sizeof(double), (void *)buf, EXCLUSIVE));
}

void dmi_reconf_end(const struct dmi_world *w, int64_t addr, struct dmi_ckpt *c)
{
	dmi_itergroup_end(w);
	if (w->rank == 0) {
		c->itergroups++;
		DMI_CHECK(DMI_write(addr, sizeof(*c), c, PUT));
	}
}
