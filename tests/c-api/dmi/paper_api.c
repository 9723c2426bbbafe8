// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * A DMI program as a user writes it against the installed <dmi.h>, in the
 * paper's forms: uint64_t DMI_thread(uint64_t arg_addr) run by DMI_create
 * (half-process.txt Fig. 11), DMI_mmap(page_size, page_num), DMI_write
 * (addr, size, buf, PUT) and DMI_read(..., GET), a fetch-and-add at the
 * owner, a barrier. Each node creates INST instances; instance k writes
 * k*k+7 into slot k; node 0 reads every slot back and prints the sum and
 * how many nodes added 1 to the counter. Run with `dmi run -n 2`.
 *
 * tests/c-api/run.sh builds it out of tree with pkg-config --cflags --libs
 * dmi and compares the line below with what it prints.
 * EXPECT: dmi-c-api: nodes 2 slots 4 sum 42 counter 2
 */
#include <dmi.h>
#include <inttypes.h>
#include <stdio.h>

#define INST 2

static int64_t region; /* set before DMI_create; the instances inherit it */

uint64_t DMI_thread(uint64_t arg_addr)
{
	int64_t k = ((int64_t)arg_addr - region) / 8, v = k * k + 7;

	if (DMI_write((int64_t)arg_addr, 8, &v, PUT) != 0) {
		fprintf(stderr, "instance %" PRId64 ": DMI_write: %s\n", k, DMI_errmsg());
		return 1;
	}
	return 0;
}

static int fail(const char *what)
{
	fprintf(stderr, "node %d: %s: %s\n", DMI_rank(), what, DMI_errmsg());
	return 1;
}

int main(void)
{
	DMI_instance_t h[INST];
	int64_t counter, one = 1, old, nodes, slots;

	if (DMI_init() != 0)
		return fail("DMI_init");
	nodes = DMI_size();
	slots = nodes * INST;
	/* Rank 0 makes the regions and leaves their addresses in the root page. */
	if (DMI_rank() == 0) {
		int64_t a[2] = { DMI_mmap(8, slots), DMI_mmap(8, 1) };

		if (a[0] < 0 || a[1] < 0 || DMI_write(DMI_root(), sizeof(a), a, PUT) != 0)
			return fail("DMI_mmap");
	}
	if (DMI_barrier() != 0)
		return fail("DMI_barrier");
	{
		int64_t a[2];

		if (DMI_read(DMI_root(), sizeof(a), a, GET) != 0)
			return fail("DMI_read of the root page");
		region = a[0];
		counter = a[1];
	}
	for (int i = 0; i < INST; i++)
		if (DMI_create(&h[i], region + (DMI_rank() * INST + i) * 8) != 0)
			return fail("DMI_create");
	for (int i = 0; i < INST; i++)
		if (DMI_join(h[i]) != 0)
			return fail("DMI_join");
	if (DMI_atomic(counter, 8, &one, 8, &old, DMI_FETCH_ADD_INT64) != 0)
		return fail("DMI_atomic");
	if (DMI_barrier() != 0)
		return fail("DMI_barrier");
	if (DMI_rank() == 0) {
		int64_t sum = 0, v, c;

		for (int64_t k = 0; k < slots; k++) {
			if (DMI_read(region + k * 8, 8, &v, GET) != 0)
				return fail("DMI_read");
			sum += v;
		}
		if (DMI_read(counter, 8, &c, GET) != 0)
			return fail("DMI_read of the counter");
		printf("dmi-c-api: nodes %" PRId64 " slots %" PRId64 " sum %" PRId64
		       " counter %" PRId64 "\n",
		       nodes, slots, sum, c);
	}
	if (DMI_barrier() != 0)
		return fail("DMI_barrier");
	return DMI_finalize() != 0 ? fail("DMI_finalize") : 0;
}
