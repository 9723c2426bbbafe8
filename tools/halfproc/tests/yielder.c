/* A program that links the runtime and calls halfproc_yield() (the
 * node_yield tests): `yielder MODE ROUNDS`.
 *   yield  ROUNDS rounds of hashing, a yield after each; then, until
 *          stdin ends, a yield every 10 ms.
 *   stall  one yield (the page exists), then ROUNDS rounds of hashing and
 *          a wait for stdin's end without yielding; then one last yield.
 * stdout: the hash every 1000 rounds, the final hash and the last yield's
 * answer in stall mode (equal to an unmigrated run's); stderr: how many
 * yields returned 1 (the moves seen at a yield). */
#define _GNU_SOURCE
#include <halfproc.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static unsigned long h = 1469598103934665603UL;
static long moved;

static void work(long i)
{
	static unsigned char scratch[1 << 16];

	for (int j = 0; j < 4000; j++) {
		scratch[(i * 7 + j) & (sizeof(scratch) - 1)] ^= (unsigned char)j;
		h = (h ^ (unsigned long)(i * 31 + j) ^ scratch[j & 1023]) * 1099511628211UL;
	}
}

static int yield_or_die(void)
{
	int r = halfproc_yield();

	if (r < 0) {
		perror("halfproc_yield");
		exit(2);
	}
	moved += r;
	return r;
}

/* Whether stdin has ended, after waiting up to @ms for it. */
static int stdin_ended(int ms)
{
	struct pollfd p = { .fd = 0, .events = POLLIN };
	char b[256];

	if (poll(&p, 1, ms) <= 0)
		return 0;
	return read(0, b, sizeof(b)) <= 0;
}

int main(int argc, char **argv)
{
	int stall = argc > 2 && !strcmp(argv[1], "stall");
	long rounds = argc > 2 ? atol(argv[2]) : 0;
	char *heap = malloc(1 << 20);

	if (argc != 3 || (!stall && strcmp(argv[1], "yield")) || !heap) {
		fprintf(stderr, "usage: yielder yield|stall ROUNDS\n");
		return 2;
	}
	memset(heap, 0x5a, 1 << 20);
	if (stall)
		yield_or_die();
	for (long i = 0; i < rounds; i++) {
		work(i);
		heap[(i * 4099) & ((1 << 20) - 1)] ^= (char)h;
		if (!stall)
			yield_or_die();
		if (i % 1000 == 0)
			printf("round %ld hash %016lx\n", i, h);
	}
	while (!stdin_ended(10))
		if (!stall)
			yield_or_die();
	for (long i = 0; i < 1 << 20; i += 4096)
		h = (h ^ (unsigned char)heap[i]) * 1099511628211UL;
	printf("done %016lx\n", h);
	if (stall)
		printf("last yield %d\n", yield_or_die());
	fprintf(stderr, "yielder: moved %ld\n", moved);
	return 3;
}
