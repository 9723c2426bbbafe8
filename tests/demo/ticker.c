// SPDX-License-Identifier: GPL-2.0
/*
 * The main job's migration demo: a plain C program that knows nothing of
 * halfproc.  Its state lives in a global, on the heap (a malloc'ed table it
 * keeps rewriting) and on its stack; every TICK_MS it prints one numbered
 * line with a running digest of that state, and at the end it exits with a
 * status derived from the digest.  Whatever node it ends on, the lines must
 * run 0..N-1 without a gap or a repeat and the digest and status must equal
 * those of a run that never moved (`ticker N` prints them too).
 *
 * `ticker N stdin` then reads its stdin to the end before the last line: a
 * test that holds stdin open until its moves are done cannot see it finish
 * before them, however slow the moves.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TABLE 4096
#define TICK_MS 40

static uint64_t digest = 1469598103934665603ULL; /* a global */

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100;
	uint64_t *table = malloc(TABLE * sizeof(*table)); /* heap */
	struct timespec tick = { 0, TICK_MS * 1000000L };

	if (!table || n <= 0)
		return 2;
	for (long i = 0; i < TABLE; i++)
		table[i] = (uint64_t)i * 2654435761u;
	for (long i = 0; i < n; i++) {
		uint64_t local = digest ^ (uint64_t)i; /* stack */

		for (long j = 0; j < TABLE; j++) {
			table[j] = table[j] * 6364136223846793005ULL + local;
			local ^= table[j] >> 29;
		}
		digest = (digest ^ local) * 1099511628211ULL;
		printf("tick %ld digest %016llx pid %d\n", i,
		       (unsigned long long)digest, (int)getpid());
		fflush(stdout);
		nanosleep(&tick, NULL);
	}
	free(table);
	if (argc > 2 && !strcmp(argv[2], "stdin")) {
		char buf[4096];

		while (read(0, buf, sizeof(buf)) > 0)
			;
	}
	printf("done digest %016llx\n", (unsigned long long)digest);
	return (int)(digest % 200) + 1;
}
