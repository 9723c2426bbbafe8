/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * Remote swap (`DMI_POOL_PAGES=N dmi run -n 3 ./swap PAGES`): node 0 writes
 * PAGES pages of 4 KiB with EXCLUSIVE (each ends up owned by node 0 unless
 * its pool is full and pages move to other nodes), then every node reads
 * every page back in every read mode and checks each byte. Node 0 prints
 * "swap ok: PAGES pages on N nodes". A write that finds every pool full
 * prints the error and exits 2.
 */
#include <dmi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAGE 4096

static void fill(unsigned char *buf, int64_t page)
{
	for (int i = 0; i < PAGE; i++)
		buf[i] = (unsigned char)(page * 7 + i * 13 + 1);
}

int main(int argc, char **argv)
{
	int64_t pages = argc > 1 ? atoll(argv[1]) : 0;
	if (pages <= 0) {
		fprintf(stderr, "usage: swap PAGES (a number > 0)\n");
		return 1;
	}
	if (DMI_init() < 0) {
		fprintf(stderr, "swap: DMI_init: %s\n", DMI_errmsg());
		return 1;
	}
	int rank = DMI_rank(), size = DMI_size();
	static unsigned char buf[PAGE], want[PAGE];
	int64_t base;
	if (rank == 0) {
		base = DMI_mmap(PAGE, pages);
		if (base < 0 || DMI_write(DMI_root(), 8, &base, DMI_PUT) < 0) {
			fprintf(stderr, "swap: DMI_mmap: %s\n", DMI_errmsg());
			return 1;
		}
		for (int64_t p = 0; p < pages; p++) {
			fill(buf, p);
			if (DMI_write(base + p * PAGE, PAGE, buf, DMI_EXCLUSIVE) < 0) {
				fprintf(stderr, "swap: write of page %lld: %s\n", (long long)p, DMI_errmsg());
				return 2;
			}
		}
	}
	if (DMI_barrier() < 0 || DMI_read(DMI_root(), 8, &base, DMI_GET) < 0) {
		fprintf(stderr, "swap: node %d: %s\n", rank, DMI_errmsg());
		return 1;
	}
	static const int modes[3] = { DMI_INVALIDATE, DMI_UPDATE, DMI_GET };
	int bad = 0;
	for (int round = 0; round < 3; round++) {
		for (int64_t p = 0; p < pages; p++) {
			int mode = modes[(p + rank + round) % 3];
			if (DMI_read(base + p * PAGE, PAGE, buf, mode) < 0) {
				fprintf(stderr, "swap: node %d: read of page %lld: %s\n", rank, (long long)p,
					DMI_errmsg());
				return 1;
			}
			fill(want, p);
			if (memcmp(buf, want, PAGE) != 0) {
				fprintf(stderr, "swap: node %d: page %lld has wrong contents\n", rank,
					(long long)p);
				bad++;
			}
		}
	}
	if (DMI_barrier() < 0) {
		fprintf(stderr, "swap: node %d: barrier: %s\n", rank, DMI_errmsg());
		return 1;
	}
	if (rank == 0 && bad == 0)
		printf("swap ok: %lld pages on %d nodes\n", (long long)pages, size);
	DMI_finalize();
	return bad ? 1 : 0;
}
