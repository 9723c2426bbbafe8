/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * DMI_yield (docs/dmi-reconf.md, "DMI_yield"): every node creates NINST compute
 * instances; each runs ITERS iterations over private state that matters -
 * a global array, a malloc'd buffer and an array on its stack - calling
 * DMI_yield() every iteration and, after it, a DMI_write/DMI_read round
 * trip of its running checksum (so its mailbox works after a move). Moves
 * are scheduled with DMI_MOVE_AT; the checksums must not depend on them.
 *
 *   dmi run -n N ./yield NINST           one line per instance:
 *       instance G: sum HEX moves M pid P0 -> P1
 *   dmi run -n N ./yield NINST socket    instance 0 of each node holds a
 *                                        socket (so it cannot be moved)
 *   dmi run -n 1 ./yield 1 bench [N]     ns per DMI_yield without a move
 *   dmi run -n N ./yield NINST linger    an instance sleeps 5 s after each
 *                                        move before its next DMI call
 *   dmi run -n N ./yield NINST barrier   after each yield every instance
 *                                        passes a DMI_barrier and mixes in
 *                                        its neighbour's checksum (the next
 *                                        instance's, across nodes); each
 *                                        instance G returns G % 3, and the
 *                                        node prints what DMI_join said:
 *       join G: RC MESSAGE
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <dmi.h>

#define ITERS 12
#define WORDS 4096

static int64_t region; /* set by main() before DMI_create */
static int ninst, ntotal, hold_socket, bench, linger, barrier;
static uint64_t global_state[WORDS];
static int program_fd = -1; /* opened by main() before DMI_create */

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	return x;
}

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static int64_t run_bench(void)
{
	int n = bench > 1 ? bench : 20000;
	double t0 = now_ns();

	for (int i = 0; i < n; i++)
		if (DMI_yield() != 0)
			return 1;
	printf("yield without a move: %.0f ns\n", (now_ns() - t0) / n);
	fflush(stdout);
	return 0;
}

uint64_t DMI_thread(uint64_t arg_addr)
{
	int64_t g = (int64_t)arg_addr;
	uint64_t stack_state[64];
	uint64_t *heap = malloc(WORDS * sizeof(*heap));
	uint64_t sum = (uint64_t)g;
	int moves = 0, sock = -1;
	pid_t first = getpid();

	if (bench)
		return run_bench();
	if (!heap)
		return 2;
	if (fcntl(program_fd, F_GETFD) < 0)
		return 5; /* DMI_create closed the program's descriptor */
	close(program_fd); /* not to be moved */
	if (hold_socket && g % ninst == 0)
		sock = socket(AF_INET, SOCK_STREAM, 0);
	for (int j = 0; j < WORDS; j++) {
		global_state[j] = mix(g * WORDS + j);
		heap[j] = mix(global_state[j]);
	}
	for (int j = 0; j < 64; j++)
		stack_state[j] = mix(g + j);
	for (int it = 0; it < ITERS; it++) {
		for (int j = 0; j < WORDS; j++) {
			global_state[j] = mix(global_state[j] + heap[(j + it) % WORDS]);
			heap[j] += global_state[j] ^ stack_state[j % 64];
			stack_state[j % 64] += heap[j];
		}
		for (int j = 0; j < WORDS; j++)
			sum = mix(sum + global_state[j] + heap[j]);
		int r = DMI_yield();
		if (r < 0) {
			fprintf(stderr, "instance %" PRId64 ": DMI_yield: %s\n", g, DMI_errmsg());
			return 3;
		}
		moves += r;
		if (r == 1 && linger)
			sleep(5);
		uint64_t back = 0;
		if (DMI_write(region + g * 8, 8, &sum, DMI_EXCLUSIVE) ||
		    DMI_read(region + g * 8, 8, &back, DMI_GET) || back != sum) {
			fprintf(stderr, "instance %" PRId64 ": round trip after yield %d: %s\n", g,
				it + 1, DMI_errmsg());
			return 4;
		}
		if (barrier) {
			/* two slots per instance, by iteration: the neighbour
			 * writes this one again only after the next barrier */
			int64_t slots = region + (256 + (it % 2) * 128) * 8;
			uint64_t theirs = 0;
			if (DMI_write(slots + g * 8, 8, &sum, DMI_EXCLUSIVE) || DMI_barrier() ||
			    DMI_read(slots + ((g + 1) % ntotal) * 8, 8, &theirs, DMI_GET)) {
				fprintf(stderr, "instance %" PRId64 ": barrier after yield %d: %s\n",
					g, it + 1, DMI_errmsg());
				return 6;
			}
			sum = mix(sum ^ theirs);
		}
	}
	for (int j = 0; j < 64; j++)
		sum = mix(sum + stack_state[j]);
	printf("instance %" PRId64 ": sum %016" PRIx64 " moves %d pid %d -> %d\n", g, sum, moves,
	       (int)first, (int)getpid());
	fflush(stdout);
	if (sock >= 0)
		close(sock);
	free(heap);
	return barrier ? (uint64_t)(g % 3) : 0;
}

int main(int argc, char **argv)
{
	if (argc < 2 || (ninst = atoi(argv[1])) < 1) {
		fprintf(stderr, "usage: yield NINST [socket|bench]\n");
		return 2;
	}
	hold_socket = argc > 2 && !strcmp(argv[2], "socket");
	linger = argc > 2 && !strcmp(argv[2], "linger");
	barrier = argc > 2 && !strcmp(argv[2], "barrier");
	/* the program's own descriptor (not close-on-exec): every instance
	 * must still have it (DMI_create closes only the runtime's) */
	program_fd = socket(AF_UNIX, SOCK_DGRAM, 0);
	if (program_fd < 0)
		return 1;
	bench = argc > 2 && !strcmp(argv[2], "bench") ? (argc > 3 ? atoi(argv[3]) : 1) : 0;
	if (DMI_init())
		return 1;
	int rank = DMI_rank(), fail = 0;
	ntotal = DMI_size() * ninst;
	if (ninst > 64 || ntotal > (barrier ? 128 : 512)) {
		fprintf(stderr, "at most 64 instances per node, 512 in all (128 with barrier)\n");
		return 2;
	}
	if (rank == 0) {
		region = DMI_mmap(4096, 1);
		if (region < 0 || DMI_write(DMI_root(), 8, &region, DMI_PUT) != 0) {
			fprintf(stderr, "mmap: %s\n", DMI_errmsg());
			return 1;
		}
	}
	if (DMI_barrier() != 0 || DMI_read(DMI_root(), 8, &region, DMI_GET) != 0) {
		fprintf(stderr, "node %d: start: %s\n", rank, DMI_errmsg());
		return 1;
	}
	DMI_instance_t h[64];
	int n = ninst;
	for (int i = 0; i < n; i++)
		if (DMI_create(&h[i], (int64_t)rank * ninst + i)) {
			fprintf(stderr, "DMI_create: %s\n", DMI_errmsg());
			return 1;
		}
	for (int i = 0; i < n; i++) {
		int rc = DMI_join(h[i]);
		if (barrier)
			printf("join %d: %d %s\n", rank * ninst + i, rc, rc ? DMI_errmsg() : "");
		else if (rc) {
			fprintf(stderr, "DMI_join: %s\n", DMI_errmsg());
			fail = 1;
		}
	}
	fflush(stdout);
	if (DMI_finalize())
		return 1;
	return fail;
}
