/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * Group reads over several owners, checked against single reads and the
 * known contents (`dmi run -n N ./gather`, tools/dmi/tests/run.rs). Every
 * node writes its share of the pages (EXCLUSIVE: it becomes their owner,
 * mostly not their home), then reads 150 random ranges per call in every
 * mode: ranges crossing pages, several ranges of one page (the runtime sends
 * those as one access: one request and one answer per page), overlapping
 * and repeated ones. Then the pages change owners and contents, and the
 * same again: copies cached by the INVALIDATE and UPDATE reads must not
 * show the old contents. Each node prints "gather ok: node R of N, K
 * ranges, B bytes" or what differed, and exits non-zero on a difference.
 */
#include <dmi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAGE 256
#define RANGES 150
#define MAXLEN 600
#define ROUNDS 4

static int failures;

static uint8_t expected(int phase, int64_t pos)
{
	int64_t p = pos / PAGE, i = pos % PAGE;

	return (uint8_t)(p * 131 + i * 17 + phase * 59 + 11);
}

static uint64_t next(uint64_t *s)
{
	*s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
	return *s >> 33;
}

/* Writes the pages whose turn it is in `phase` (EXCLUSIVE: this node owns them after). */
static void write_share(int64_t base, int64_t pages, int phase, int rank, int size)
{
	uint8_t buf[PAGE];

	for (int64_t p = 0; p < pages; p++) {
		if ((p + phase) % size != rank)
			continue;
		for (int i = 0; i < PAGE; i++)
			buf[i] = expected(phase, p * PAGE + i);
		if (DMI_write(base + p * PAGE, PAGE, buf, EXCLUSIVE) < 0) {
			fprintf(stderr, "gather: write of page %lld: %s\n", (long long)p, DMI_errmsg());
			failures++;
		}
	}
}

/* One group read of random ranges in `mode`, checked. Returns its bytes. */
static int64_t check_round(int64_t base, int64_t pages, int phase, int mode, uint64_t *seed, int rank)
{
	static DMI_access_t acc[RANGES];
	static uint8_t bufs[RANGES][MAXLEN], single[MAXLEN];
	int64_t len = pages * PAGE, bytes = 0;

	for (int k = 0; k < RANGES; k++) {
		int64_t off, size;

		if (k > 0 && next(seed) % 4 == 0) {
			/* Close to the previous range: the same page again. */
			off = (acc[k - 1].addr - base) + (int64_t)(next(seed) % 64);
		} else {
			off = (int64_t)(next(seed) % (uint64_t)len);
		}
		size = 1 + (int64_t)(next(seed) % MAXLEN);
		if (off >= len)
			off = len - 1;
		if (off + size > len)
			size = len - off;
		acc[k] = (DMI_access_t){ base + off, size, bufs[k] };
		bytes += size;
	}
	if (DMI_group_read(acc, RANGES, mode) < 0) {
		fprintf(stderr, "gather: node %d: group read (mode %d): %s\n", rank, mode, DMI_errmsg());
		failures++;
		return bytes;
	}
	for (int k = 0; k < RANGES; k++) {
		int64_t off = acc[k].addr - base;

		for (int64_t i = 0; i < acc[k].size; i++) {
			if (bufs[k][i] != expected(phase, off + i)) {
				fprintf(stderr,
					"gather: node %d: phase %d mode %d range %d (%lld bytes at %lld): "
					"byte %lld is %u, expected %u\n",
					rank, phase, mode, k, (long long)acc[k].size, (long long)off,
					(long long)i, bufs[k][i], expected(phase, off + i));
				failures++;
				break;
			}
		}
		if (DMI_read(acc[k].addr, acc[k].size, single, GET) < 0 ||
		    memcmp(single, bufs[k], (size_t)acc[k].size) != 0) {
			fprintf(stderr, "gather: node %d: range %d: the single read differs\n", rank, k);
			failures++;
		}
	}
	return bytes;
}

int main(void)
{
	if (DMI_init() < 0) {
		fprintf(stderr, "gather: DMI_init: %s\n", DMI_errmsg());
		return 1;
	}
	int rank = DMI_rank(), size = DMI_size();
	int64_t pages = 3 * (int64_t)size + 1, base;

	if (rank == 0) {
		base = DMI_mmap(PAGE, pages);
		if (base < 0 || DMI_write(DMI_root(), 8, &base, PUT) < 0) {
			fprintf(stderr, "gather: mmap: %s\n", DMI_errmsg());
			return 1;
		}
	}
	if (DMI_barrier() < 0 || DMI_read(DMI_root(), 8, &base, GET) < 0) {
		fprintf(stderr, "gather: setup: %s\n", DMI_errmsg());
		return 1;
	}
	uint64_t seed = 0x9e3779b97f4a7c15ULL * (uint64_t)(rank + 1);
	int64_t ranges = 0, bytes = 0;
	const int modes[3] = { GET, INVALIDATE, UPDATE };

	for (int phase = 0; phase < 2; phase++) {
		write_share(base, pages, phase, rank, size);
		DMI_barrier();
		for (int r = 0; r < ROUNDS; r++) {
			bytes += check_round(base, pages, phase, modes[r % 3], &seed, rank);
			ranges += RANGES;
		}
		/* Nobody writes the next phase before every node checked this one. */
		DMI_barrier();
	}
	if (failures) {
		fprintf(stderr, "gather: node %d: %d differences\n", rank, failures);
		DMI_finalize();
		return 1;
	}
	printf("gather ok: node %d of %d, %lld ranges, %lld bytes\n", rank, size, (long long)ranges,
	       (long long)bytes);
	DMI_finalize();
	return 0;
}
