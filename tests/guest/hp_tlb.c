// SPDX-License-Identifier: GPL-2.0
/*
 * TLB coherence stress: one member keeps remapping, write-protecting and
 * unmapping a shared-range region while other members on both vCPUs read
 * and write it.  A phase word, published only after each call returns,
 * says what every access must see; an access that gets through to an
 * unmapped or write-protected page is a stale translation (for munmap, a
 * use-after-free of a physical page).  Runs for a fixed, bounded time.
 *
 * No reader action may outlive its phase.  A reader's late load is harmless
 * (the phase word it rereads has moved on, so the result is dropped), but a
 * late store is not: a reader preempted between deciding to probe a write in
 * phase RO(g) and executing it may store after the mapper has published
 * RW(g+1) on a fresh page, legitimately, and plant g there.  So reads check
 * only the first CHECKED_BYTES of each page and write probes go to the second
 * half of the page, which nothing ever checks.
 *
 * With member TLB flushes disabled (the module built with
 * halfproc_skip_member_flush, see scripts/kmod.sh) this test must fail.
 *
 * The second run adds churn on the side: members that join, walk the region
 * and leave (each leaving mm is uninstalled and flushed while still listed
 * for the set's flushes), and whole sets created, populated and torn down
 * (the set mm is flushed before its range tables are freed).  Neither order
 * can be seen from user space directly; the run checks that the detector
 * still sees no stale translation and the kernel reports nothing.
 */
#include "../lib/halfproc_test.h"
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#include "kselftest_harness.h"

#define REGION_PAGES	16
#define RUN_SECONDS	3
#define MAX_SECONDS	25
#define MIN_CYCLES	40
#define HOLD_CHECKS	16	/* stable-phase checks per phase, at least */
#define HOLD_SECONDS	0.02	/* ... or this long */
#define CHECKED_BYTES	64		/* reads check [0, 64) of a page */
#define PROBE_OFFSET	(PAGE / 2)	/* write probes, never checked */

enum { K_RW, K_UNMAPPED, K_RO, K_TRANSITION };

struct ctl {
	atomic_ulong phase;		/* g * 4 + k */
	atomic_int stop;
	atomic_long checks[3];
	atomic_long violations[3];
	atomic_long iterations;
	atomic_long churned;
	atomic_long churn_errors;
};

static void pin_cpu(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu % sysconf(_SC_NPROCESSORS_ONLN), &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void reader(struct ctl *c, char *region, int cpu, unsigned seed)
{
	pin_cpu(cpu);
	while (!atomic_load(&c->stop)) {
		unsigned long p1, p2;
		char *addr, v = 0;
		int r, w = 0;

		seed = seed * 1103515245 + 12345;
		addr = region + (seed >> 8) % REGION_PAGES * PAGE + (seed % CHECKED_BYTES);
		p1 = atomic_load_explicit(&c->phase, memory_order_acquire);
		r = probe_read(addr, &v);
		if ((p1 & 3) == K_RO)
			w = probe_write(addr + PROBE_OFFSET, (char)(p1 >> 2));
		atomic_thread_fence(memory_order_acquire);
		p2 = atomic_load_explicit(&c->phase, memory_order_relaxed);
		if (p1 != p2)
			continue;
		switch (p1 & 3) {
		case K_RW:
			atomic_fetch_add(&c->checks[K_RW], 1);
			if (r || v != (char)(p1 >> 2))
				atomic_fetch_add(&c->violations[K_RW], 1);
			break;
		case K_UNMAPPED:
			atomic_fetch_add(&c->checks[K_UNMAPPED], 1);
			if (r == 0)
				atomic_fetch_add(&c->violations[K_UNMAPPED], 1);
			break;
		case K_RO:
			atomic_fetch_add(&c->checks[K_RO], 1);
			if (w == 0 || r || v != (char)(p1 >> 2))
				atomic_fetch_add(&c->violations[K_RO], 1);
			break;
		}
	}
}

/*
 * Run for RUN_SECONDS, longer if the machine was too slow to exercise every
 * phase enough (emulation under load), but never beyond MAX_SECONDS.
 */
static int enough(struct ctl *c, double t0)
{
	double t = now() - t0;

	if (t >= MAX_SECONDS)
		return 1;
	return t >= RUN_SECONDS && c->iterations >= MIN_CYCLES &&
	       c->checks[K_UNMAPPED] >= 400 && c->checks[K_RO] >= 100;
}

/*
 * Publish stable phase @k and keep it until the readers checked it
 * HOLD_CHECKS times (or HOLD_SECONDS passed): every phase is observed, so
 * a translation that outlives its phase is met, not just possible.  (With
 * one sched_yield() per phase a loaded host could leave a whole run with
 * almost no unmapped checks, and a run without member flushes went
 * undetected once in 20.)
 */
static void hold(struct ctl *c, unsigned long g, int k)
{
	long seen = atomic_load(&c->checks[k]);
	double t0 = now();

	atomic_store(&c->phase, g * 4 + k);
	while (atomic_load(&c->checks[k]) - seen < HOLD_CHECKS &&
	       now() - t0 < HOLD_SECONDS)
		sched_yield();
}

static void mapper(struct ctl *c, char *region)
{
	double t0 = now();

	pin_cpu(0);
	for (unsigned long g = 1; !enough(c, t0); g++) {
		atomic_store(&c->phase, g * 4 + K_TRANSITION);
		if (hp_mmap(region, REGION_PAGES * PAGE, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED) != region)
			_exit(30);
		memset(region, (char)g, REGION_PAGES * PAGE);
		hold(c, g, K_RW);
		if (g % 2) {
			atomic_store(&c->phase, g * 4 + K_TRANSITION);
			if (mprotect(region, REGION_PAGES * PAGE, PROT_READ))
				_exit(31);
			hold(c, g, K_RO);
		}
		atomic_store(&c->phase, g * 4 + K_TRANSITION);
		if (munmap(region, REGION_PAGES * PAGE))
			_exit(32);
		hold(c, g, K_UNMAPPED);
		atomic_fetch_add(&c->iterations, 1);
	}
	atomic_store(&c->stop, 1);
}

/* One member that joins, walks the region and leaves; one set of its own. */
static int churn_once(char *region)
{
	pid_t m = hp_spawn(), s;
	int rm, rs;

	if (m == 0) {
		char v;

		for (int i = 0; i < REGION_PAGES; i++)
			probe_read(region + i * PAGE, &v);
		_exit(0);
	}
	s = fork();
	if (s == 0) {
		char *p = hp_anon(REGION_PAGES * PAGE);
		pid_t q;

		if (p == MAP_FAILED)
			_exit(1);
		memset(p, 1, REGION_PAGES * PAGE);
		q = hp_spawn();
		if (q == 0)
			_exit(p[REGION_PAGES * PAGE - 1] == 1 ? 0 : 2);
		_exit(wait_status(q));
	}
	rm = m < 0 ? -3 : wait_status(m);
	rs = s < 0 ? -3 : wait_status(s);
	return rm || rs;
}

static void churner(struct ctl *c, char *region)
{
	pin_cpu(1);
	while (!atomic_load(&c->stop)) {
		if (churn_once(region))
			atomic_fetch_add(&c->churn_errors, 1);
		else
			atomic_fetch_add(&c->churned, 1);
	}
}

static void detect(struct __test_metadata *_metadata, int churn)
{
	char *region = (char *)(HALFPROC_RANGE_START + (7ULL << 40));
	struct ctl *c;
	pid_t readers[3], ch = 0;

	if (!hp_supported())
		SKIP(return, "halfproc module not loaded");
	c = hp_anon(PAGE);
	ASSERT_NE(MAP_FAILED, c);
	atomic_store(&c->phase, K_UNMAPPED);
	for (int i = 0; i < 3; i++) {
		readers[i] = hp_spawn();
		ASSERT_GE(readers[i], 0);
		if (readers[i] == 0) {
			reader(c, region, i + 1, 77 + i);
			_exit(0);
		}
	}
	if (churn) {
		ch = hp_spawn();
		ASSERT_GE(ch, 0);
		if (ch == 0) {
			churner(c, region);
			_exit(0);
		}
	}
	mapper(c, region);
	for (int i = 0; i < 3; i++)
		ASSERT_EQ(0, wait_status(readers[i]));
	if (churn) {
		ASSERT_EQ(0, wait_status(ch));
		TH_LOG("churn: %ld members joined and left and as many sets were torn down, %ld errors",
		       c->churned, c->churn_errors);
	}
	TH_LOG("%ld remap cycles; checks rw=%ld unmapped=%ld ro=%ld; violations rw=%ld unmapped=%ld ro=%ld",
	       c->iterations, c->checks[K_RW], c->checks[K_UNMAPPED], c->checks[K_RO],
	       c->violations[K_RW], c->violations[K_UNMAPPED], c->violations[K_RO]);
	if (c->violations[K_RW] + c->violations[K_UNMAPPED] + c->violations[K_RO])
		printf("# STALE TRANSLATIONS: violations rw=%ld unmapped=%ld ro=%ld\n",
		       c->violations[K_RW], c->violations[K_UNMAPPED], c->violations[K_RO]);
	ASSERT_EQ(0, c->violations[K_RW]);
	ASSERT_EQ(0, c->violations[K_UNMAPPED]);
	ASSERT_EQ(0, c->violations[K_RO]);
	/* The test must have exercised every phase to mean anything. */
	ASSERT_GE(c->iterations, MIN_CYCLES);
	ASSERT_GT(c->checks[K_RW], 20);
	ASSERT_GE(c->checks[K_UNMAPPED], 400);
	ASSERT_GE(c->checks[K_RO], 100);
	if (churn) {
		ASSERT_GT(c->churned, 0);
		ASSERT_EQ(0, c->churn_errors);
	}
}

TEST(stale_translations_never_survive)
{
	detect(_metadata, 0);
}

TEST(stale_translations_never_survive_member_churn)
{
	detect(_metadata, 1);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	return test_harness_run(argc, argv);
}
