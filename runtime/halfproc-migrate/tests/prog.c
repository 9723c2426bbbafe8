/* Test program for halfproc-migrate: globals, malloc state, stdio buffers,
 * SSE doubles. Deterministic output for a given iteration count. With a
 * second argument "wait" it reads stdin to EOF before its last line (the
 * node daemon's tests hold it running that way). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t counter;           /* .bss */
static double acc = 1.0;           /* .data */
static char *bufs[64];             /* heap pointers in .bss */
static size_t sizes[64];
static const char *label = "step"; /* pointer into .rodata */

int main(int argc, char **argv)
{
	long iters = argc > 1 ? atol(argv[1]) : 3000;
	uint64_t h = 1469598103934665603ULL;

	for (long i = 0; i < iters; i++) {
		size_t n = 1000 + (h % 60000);
		free(bufs[i % 64]);
		bufs[i % 64] = malloc(n);
		if (!bufs[i % 64])
			return 99;
		sizes[i % 64] = n;
		memset(bufs[i % 64], (int)(h & 0xff), n);
		for (int k = 0; k < 20000; k++) {
			long j = bufs[(i + k) % 64] ? (i + k) % 64 : i % 64;
			h ^= (uint64_t)(unsigned char)bufs[j][k % sizes[j]] + (uint64_t)k;
			h *= 1099511628211ULL;
		}
		counter += h & 0xffff;
		acc = acc * 1.0000001 + (double)(h & 0xff) / 256.0;
		if (i % 50 == 0)
			printf("%s %ld h=%016llx counter=%llu acc=%.6f\n", label, i,
			       (unsigned long long)h, (unsigned long long)counter, acc);
	}
	if (argc > 2 && !strcmp(argv[2], "wait"))
		while (getchar() != EOF)
			;
	printf("done counter=%llu acc=%.6f\n", (unsigned long long)counter, acc);
	return (int)(counter % 200);
}
