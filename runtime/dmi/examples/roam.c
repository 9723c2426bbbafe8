/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * A plain DMI program (main, DMI_init, one rank per node) plus one
 * DMI_yield() per iteration, for movable runs (docs/dmi-reconf.md, "DMI_yield":
 * cross-node moves): `dmi run -n N --movable ./roam [ITERS]` runs each
 * rank as a compute instance that DMI_MOVE_AT=N:RANK@NODE, --shrink-at and
 * --grow-at move between nodes. Each rank's state that matters is private
 * - a global array, a malloc'd buffer and an array on its stack - and
 * every iteration it also passes its running checksum to its right
 * neighbour through the global address space (EXCLUSIVE write, barrier,
 * GET), so the checksums depend on every rank's whole history. They must
 * not depend on the moves. One line per rank:
 *
 *   rank R: sum HEX moves M pid P0 -> P1
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <dmi.h>

#define WORDS 4096

static uint64_t global_state[WORDS];

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	return x;
}

static void check(int rc, const char *what, int rank)
{
	if (rc < 0) {
		fprintf(stderr, "rank %d: %s: %s\n", rank, what, DMI_errmsg());
		exit(3);
	}
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 12;
	uint64_t stack_state[64];

	if (iters < 1) {
		fprintf(stderr, "usage: roam [ITERS >= 1]\n");
		return 2;
	}
	if (DMI_init()) {
		fprintf(stderr, "DMI_init: %s\n", DMI_errmsg());
		return 1;
	}
	int rank = DMI_rank(), size = DMI_size(), moves = 0;
	int64_t slots = 0;
	uint64_t *heap = malloc(WORDS * sizeof(*heap));
	pid_t first = getpid();

	if (!heap)
		return 2;
	if (rank == 0) {
		slots = DMI_mmap(8, 2 * size);
		check(slots < 0 ? -1 : 0, "DMI_mmap", rank);
		check(DMI_write(DMI_root(), 8, &slots, DMI_PUT), "DMI_write root", rank);
	}
	check(DMI_barrier(), "DMI_barrier", rank);
	check(DMI_read(DMI_root(), 8, &slots, DMI_GET), "DMI_read root", rank);

	uint64_t sum = (uint64_t)rank;
	for (int j = 0; j < WORDS; j++) {
		global_state[j] = mix((uint64_t)rank * WORDS + j);
		heap[j] = mix(global_state[j]);
	}
	for (int j = 0; j < 64; j++)
		stack_state[j] = mix(rank + j);
	for (int it = 0; it < iters; it++) {
		int par = it & 1;
		int r = DMI_yield();

		check(r, "DMI_yield", rank);
		moves += r;
		for (int j = 0; j < WORDS; j++) {
			global_state[j] = mix(global_state[j] + heap[(j + it) % WORDS]);
			heap[j] += global_state[j] ^ stack_state[j % 64];
			stack_state[j % 64] += heap[j];
		}
		for (int j = 0; j < WORDS; j++)
			sum = mix(sum + global_state[j] + heap[j]);
		/* slots alternate by parity: a rank rewrites a slot only after
		 * the next barrier, which its neighbour passes after reading it */
		uint64_t left = 0;
		check(DMI_write(slots + (par * size + rank) * 8, 8, &sum, DMI_EXCLUSIVE),
		      "DMI_write", rank);
		check(DMI_barrier(), "DMI_barrier", rank);
		check(DMI_read(slots + (par * size + (rank + size - 1) % size) * 8, 8, &left,
			       DMI_GET),
		      "DMI_read", rank);
		sum = mix(sum ^ left);
	}
	for (int j = 0; j < 64; j++)
		sum = mix(sum + stack_state[j]);
	printf("rank %d: sum %016" PRIx64 " moves %d pid %d -> %d\n", rank, sum, moves, (int)first,
	       (int)getpid());
	fflush(stdout);
	free(heap);
	check(DMI_finalize(), "DMI_finalize", rank);
	return 0;
}
