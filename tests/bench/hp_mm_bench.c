// SPDX-License-Identifier: GPL-2.0
/*
 * The paper's section 4.4.3 in the guest: mmap+munmap and first-touch page
 * faults on the shared range (address-space switching and page-table
 * redirection) against the private range.  Both paths run interleaved in
 * the same process, several repetitions each; the output is min/median per
 * path and the ratio of medians.  Absolute times under QEMU TCG mean little;
 * the ratios are the result.
 */
#include "../lib/halfproc_test.h"
#include <time.h>

#define REPS 7

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double mmap_munmap(int shared, int n)
{
	int flags = MAP_PRIVATE | MAP_ANONYMOUS | (shared ? MAP_HALFPROC : 0);
	double t = now();

	for (int i = 0; i < n; i++) {
		void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, flags, -1, 0);

		if (p == MAP_FAILED || (shared && !in_range(p, 4096)))
			exit(2);
		munmap(p, 4096);
	}
	return now() - t;
}

static double faults(int shared, int pages)
{
	int flags = MAP_PRIVATE | MAP_ANONYMOUS | (shared ? MAP_HALFPROC : 0);
	char *p = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, flags, -1, 0);
	double t;

	if (p == MAP_FAILED)
		exit(3);
	/* No THP: one fault per 4 KiB page, as in the paper. */
	madvise(p, pages * PAGE, MADV_NOHUGEPAGE);
	t = now();
	for (int i = 0; i < pages; i++)
		p[i * PAGE] = 1;
	t = now() - t;
	munmap(p, pages * PAGE);
	return t;
}

static void report(const char *what, double *priv, double *shr, int n)
{
	qsort(priv, REPS, sizeof(double), cmp);
	qsort(shr, REPS, sizeof(double), cmp);
	printf("%-14s private min %8.1f ns med %8.1f ns | shared min %8.1f ns med %8.1f ns | shared/private median %.3f (min %.3f)\n",
	       what, priv[0] / n * 1e9, priv[REPS / 2] / n * 1e9,
	       shr[0] / n * 1e9, shr[REPS / 2] / n * 1e9,
	       shr[REPS / 2] / priv[REPS / 2], shr[0] / priv[0]);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 20000, pages = argc > 2 ? atoi(argv[2]) : 8192;
	double mp[REPS], ms[REPS], fp[REPS], fs[REPS];
	pid_t peer;

	setvbuf(stdout, NULL, _IONBF, 0);
	if (!hp_supported()) {
		printf("# hp_mm_bench: halfproc module not loaded\n");
		return 1;
	}
	/* A second member keeps the set realistic (flushes fan out to it). */
	if (hp_anon(PAGE) == MAP_FAILED)
		return 1;
	peer = hp_spawn();
	if (peer == 0) {
		pause();
		_exit(0);
	}
	mmap_munmap(0, n / 10);
	mmap_munmap(1, n / 10);
	for (int r = 0; r < REPS; r++) {
		mp[r] = mmap_munmap(0, n);
		ms[r] = mmap_munmap(1, n);
		fp[r] = faults(0, pages);
		fs[r] = faults(1, pages);
	}
	printf("# section 4.4.3: %d mmap+munmap and %d first-touch faults per rep, %d reps, 2 members\n",
	       n, pages, REPS);
	report("mmap+munmap", mp, ms, n);
	report("page fault", fp, fs, pages);
	kill(peer, SIGKILL);
	wait_status(peer);
	return 0;
}
