/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * Jacobi relaxation of a 2-D heat plate on DMI, as in dmi-reconfiguration
 * sec. 5.2 (there 3-D): the interior rows are split among the nodes; every
 * iteration each node writes its first and last row to ghost pages with
 * DMI_write(EXCLUSIVE) (so it becomes, and stays, their owner), meets the
 * others at a barrier, and reads its neighbours' rows with DMI_read(GET).
 * Ghost pages are double-buffered by iteration parity, so one barrier per
 * iteration suffices. At the end every node PUTs its rows into a result
 * region and node 0 reads all rows back in one DMI_group_read and prints a
 * checksum.
 *
 *   dmi run -n 3 ./jacobi NX NY ITERS      distributed
 *   ./jacobi NX NY ITERS serial            the same computation without DMI
 *
 * Both print "checksum <value>"; they must be identical, bit for bit.
 */
#include <dmi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int NX, NY, ITERS;

static double boundary(int y, int x)
{
	if (y == 0)
		return 100.0;
	if (x == 0)
		return 50.0 * y / (NY - 1);
	if (x == NX - 1)
		return 25.0;
	return 0.0; /* bottom row and initial interior */
}

/* One row of the next iteration from the rows above, at and below it. */
static void step_row(const double *up, const double *mid, const double *down, double *out)
{
	out[0] = mid[0];
	out[NX - 1] = mid[NX - 1];
	for (int x = 1; x < NX - 1; x++)
		out[x] = 0.25 * (up[x] + down[x] + mid[x - 1] + mid[x + 1]);
}

static double checksum(const double *grid)
{
	double s = 0.0;
	for (int i = 0; i < NX * NY; i++)
		s += grid[i] * (double)(1 + i % 7);
	return s;
}

static void init_rows(double *rows, int first, int count)
{
	for (int r = 0; r < count; r++)
		for (int x = 0; x < NX; x++)
			rows[r * NX + x] = boundary(first + r, x);
}

static int serial(void)
{
	double *u = malloc(sizeof(double) * NX * NY), *v = malloc(sizeof(double) * NX * NY);
	if (!u || !v)
		return 1;
	init_rows(u, 0, NY);
	memcpy(v, u, sizeof(double) * NX * NY);
	for (int k = 0; k < ITERS; k++) {
		for (int y = 1; y < NY - 1; y++)
			step_row(&u[(y - 1) * NX], &u[y * NX], &u[(y + 1) * NX], &v[y * NX]);
		double *t = u;
		u = v;
		v = t;
	}
	printf("checksum %.17g\n", checksum(u));
	free(u);
	free(v);
	return 0;
}

#define CHECK(call)                                                                      \
	do {                                                                             \
		if ((call) < 0) {                                                        \
			fprintf(stderr, "jacobi: %s: %s\n", #call, DMI_errmsg());        \
			exit(1);                                                         \
		}                                                                        \
	} while (0)

static int64_t ghost(int64_t base, int parity, int size, int rank, int bottom)
{
	return base + ((int64_t)(parity * size + rank) * 2 + bottom) * NX * (int64_t)sizeof(double);
}

static int distributed(void)
{
	CHECK(DMI_init());
	int rank = DMI_rank(), size = DMI_size();
	int interior = NY - 2;
	if (interior < size) {
		fprintf(stderr, "jacobi: %d interior rows cannot be split over %d nodes\n", interior, size);
		return 1;
	}
	int64_t row_bytes = NX * (int64_t)sizeof(double);
	int64_t addrs[3]; /* ghost pages, result rows, row counter */
	if (rank == 0) {
		addrs[0] = DMI_mmap(row_bytes, 4 * size);
		addrs[1] = DMI_mmap(row_bytes, NY);
		addrs[2] = DMI_mmap(sizeof(int64_t), 1);
		CHECK(addrs[0]);
		CHECK(addrs[1]);
		CHECK(addrs[2]);
		CHECK(DMI_write(DMI_root(), sizeof(addrs), addrs, PUT));
	}
	CHECK(DMI_barrier());
	CHECK(DMI_read(DMI_root(), sizeof(addrs), addrs, GET));

	int lo = 1 + rank * interior / size, hi = 1 + (rank + 1) * interior / size;
	int n = hi - lo;
	/* rows lo-1 .. hi: a ghost row on each side */
	double *u = malloc(sizeof(double) * NX * (n + 2)), *v = malloc(sizeof(double) * NX * (n + 2));
	if (!u || !v)
		return 1;
	init_rows(u, lo - 1, n + 2);
	memcpy(v, u, sizeof(double) * NX * (n + 2));
	int64_t old;
	int64_t mine = n;
	CHECK(DMI_atomic(addrs[2], sizeof(int64_t), &mine, sizeof(mine), &old, DMI_FETCH_ADD_INT64));

	for (int k = 0; k < ITERS; k++) {
		int p = k % 2;
		CHECK(DMI_write(ghost(addrs[0], p, size, rank, 0), row_bytes, &u[1 * NX], EXCLUSIVE));
		CHECK(DMI_write(ghost(addrs[0], p, size, rank, 1), row_bytes, &u[n * NX], EXCLUSIVE));
		CHECK(DMI_barrier());
		DMI_access_t acc[2];
		int na = 0;
		if (rank > 0)
			acc[na++] = (DMI_access_t){ ghost(addrs[0], p, size, rank - 1, 1), row_bytes, &u[0] };
		if (rank < size - 1)
			acc[na++] = (DMI_access_t){ ghost(addrs[0], p, size, rank + 1, 0), row_bytes,
						    &u[(n + 1) * NX] };
		CHECK(DMI_group_read(acc, na, GET));
		for (int r = 1; r <= n; r++)
			step_row(&u[(r - 1) * NX], &u[r * NX], &u[(r + 1) * NX], &v[r * NX]);
		double *t = u;
		u = v;
		v = t;
	}

	/* Gather: every node PUTs its rows (node 0 also the two boundary rows). */
	DMI_access_t out[n + 2];
	int no = 0;
	for (int r = 1; r <= n; r++)
		out[no++] = (DMI_access_t){ addrs[1] + (int64_t)(lo + r - 1) * row_bytes, row_bytes, &u[r * NX] };
	double top[NX], bottom[NX];
	if (rank == 0) {
		init_rows(top, 0, 1);
		init_rows(bottom, NY - 1, 1);
		out[no++] = (DMI_access_t){ addrs[1], row_bytes, top };
		out[no++] = (DMI_access_t){ addrs[1] + (int64_t)(NY - 1) * row_bytes, row_bytes, bottom };
	}
	CHECK(DMI_group_write(out, no, PUT));
	CHECK(DMI_barrier());
	if (rank == 0) {
		double *all = malloc(sizeof(double) * NX * NY);
		DMI_access_t *rows = malloc(sizeof(DMI_access_t) * NY);
		if (!all || !rows)
			return 1;
		for (int y = 0; y < NY; y++)
			rows[y] = (DMI_access_t){ addrs[1] + y * row_bytes, row_bytes, &all[y * NX] };
		CHECK(DMI_group_read(rows, NY, GET));
		int64_t counted;
		CHECK(DMI_read(addrs[2], sizeof(counted), &counted, GET));
		if (counted != interior) {
			fprintf(stderr, "jacobi: nodes claimed %lld interior rows, not %d\n",
				(long long)counted, interior);
			return 1;
		}
		printf("checksum %.17g\n", checksum(all));
		free(all);
		free(rows);
	}
	free(u);
	free(v);
	CHECK(DMI_finalize());
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: %s NX NY ITERS [serial]\n", argv[0]);
		return 2;
	}
	NX = atoi(argv[1]);
	NY = atoi(argv[2]);
	ITERS = atoi(argv[3]);
	if (NX < 3 || NY < 3 || ITERS < 0) {
		fprintf(stderr, "jacobi: need NX >= 3, NY >= 3, ITERS >= 0\n");
		return 2;
	}
	if (argc > 4 && strcmp(argv[4], "serial") == 0)
		return serial();
	return distributed();
}
