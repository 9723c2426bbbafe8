// SPDX-License-Identifier: GPL-2.0
/*
 * The module's counters (debugfs /sys/kernel/debug/halfproc/<set>/ and
 * total/, kmod/stats.rs) count what they say: one address-space switch per
 * meta-operation on the range, one member flush per member for every unmap
 * in the set mm, an IPI for a member whose CPU has its tables loaded, and
 * the pages dmread() pins.  The suite runs one program at a time, so a set's
 * counts move only by what the test does.
 */
#include "../lib/hp_stats.h"
#include <stdatomic.h>
#include "kselftest_harness.h"

/*
 * Each range mmap and each munmap switches once to the set mm, no more;
 * a private mmap does not switch.  The set's first mmap (which creates it)
 * counts too.
 */
TEST(one_switch_per_meta_operation)
{
	const int n = 50;
	char set[32];
	long s0, t0;
	char *p;

	REQUIRE_COUNTERS();
	p = hp_anon(PAGE);
	ASSERT_NE(MAP_FAILED, p);
	snprintf(set, sizeof(set), "%ld", newest_set());
	s0 = counter(set, "switches");
	t0 = counter("total", "switches");
	EXPECT_EQ(1, s0) TH_LOG("the creating mmap of set %s", set);
	for (int i = 0; i < n; i++) {
		char *q = hp_anon(PAGE);

		ASSERT_NE(MAP_FAILED, q);
		ASSERT_EQ(0, munmap(q, PAGE));
		q = mmap(NULL, PAGE, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		ASSERT_NE(MAP_FAILED, q);
		ASSERT_EQ(0, munmap(q, PAGE));
	}
	ASSERT_EQ(0, mprotect(p, PAGE, PROT_READ));
	EXPECT_EQ(s0 + 2 * n + 1, counter(set, "switches"));
	EXPECT_EQ(t0 + 2 * n + 1, counter("total", "switches"));
	ASSERT_EQ(0, munmap(p, PAGE));
}

/*
 * Unmapping a touched page flushes every member once: with a second
 * member spinning on the other CPU over the range (its tables loaded
 * there), each flush reaches that CPU by IPI.
 */
TEST(member_flushes_and_ipis)
{
	const int n = 20;
	long f0, m0, c0, i0, f1, m1, c1, i1;
	_Atomic int *stop;
	struct chan ch;
	char set[32];
	char *p;
	pid_t m;

	REQUIRE_COUNTERS();
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		SKIP(return, "one CPU");
	stop = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, stop);
	p = hp_anon(PAGE);
	ASSERT_NE(MAP_FAILED, p);
	p[0] = 1;
	snprintf(set, sizeof(set), "%ld", newest_set());
	ASSERT_EQ(0, chan_open(&ch));
	m = hp_spawn();
	ASSERT_GE(m, 0);
	if (m == 0) {
		cpu_set_t cs;
		volatile char x;

		CPU_ZERO(&cs);
		CPU_SET(1, &cs);
		sched_setaffinity(0, sizeof(cs), &cs);
		x = p[0];
		tell_parent(&ch, 'r');
		while (!atomic_load(stop))
			x = p[0];
		(void)x;
		_exit(0);
	}
	{
		cpu_set_t cs;

		CPU_ZERO(&cs);
		CPU_SET(0, &cs);
		ASSERT_EQ(0, sched_setaffinity(0, sizeof(cs), &cs));
	}
	ASSERT_EQ('r', from_child(&ch));
	f0 = counter(set, "flushes");
	m0 = counter(set, "member_flushes");
	c0 = counter(set, "flush_cpus");
	i0 = counter(set, "ipis");
	for (int i = 0; i < n; i++) {
		char *q = hp_anon(PAGE);

		ASSERT_NE(MAP_FAILED, q);
		q[0] = 1;
		ASSERT_EQ(0, munmap(q, PAGE));
	}
	f1 = counter(set, "flushes");
	m1 = counter(set, "member_flushes");
	c1 = counter(set, "flush_cpus");
	i1 = counter(set, "ipis");
	atomic_store(stop, 1);
	EXPECT_EQ(0, wait_status(m));
	TH_LOG("%d munmaps of a touched page, 2 members: flushes %ld, member "
	       "flushes %ld, flushed CPUs %ld, IPIs %ld", n, f1 - f0, m1 - m0,
	       c1 - c0, i1 - i0);
	EXPECT_GE(f1 - f0, n);
	EXPECT_EQ(2 * (f1 - f0), m1 - m0);
	/* The spinning member's CPU is remote for every flush. */
	EXPECT_GE(i1 - i0, f1 - f0);
	EXPECT_GE(c1 - c0, i1 - i0);
	ASSERT_EQ(0, munmap(p, PAGE));
}

/* dmread() of 3 pages of a member pins 3 pages. */
TEST(dmread_pins_are_counted)
{
	char *buf, *p, set[32];
	struct chan ch;
	long p0;
	pid_t m;

	REQUIRE_COUNTERS();
	p = hp_anon(PAGE);
	ASSERT_NE(MAP_FAILED, p);
	snprintf(set, sizeof(set), "%ld", newest_set());
	buf = malloc(3 * PAGE);
	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, chan_open(&ch));
	m = hp_spawn();
	ASSERT_GE(m, 0);
	if (m == 0) {
		char *priv = aligned_alloc(PAGE, 3 * PAGE);

		memset(priv, 7, 3 * PAGE);
		if (write(ch.up[1], &priv, sizeof(priv)) != sizeof(priv))
			_exit(1);
		from_parent(&ch);
		_exit(0);
	}
	char *remote;

	ASSERT_EQ(sizeof(remote), read(ch.up[0], &remote, sizeof(remote)));
	p0 = counter(set, "pinned");
	ASSERT_EQ(3 * PAGE, dmread(m, remote, 3 * PAGE, buf));
	EXPECT_EQ(7, buf[2 * PAGE + 5]);
	EXPECT_EQ(p0 + 3, counter(set, "pinned"));
	tell_child(&ch, 'q');
	EXPECT_EQ(0, wait_status(m));
	munmap(p, PAGE);
}

/*
 * Issue 10, 5f: a member's meta-operations and dmread take no module
 * reference of their own (its set holds one).  A member runs range
 * mprotect()s and dmreads without pause while this process samples the
 * module's reference count: with a reference per call, most samples see
 * one more than the sets' own; without, none does.
 */
TEST(meta_operations_take_no_module_reference)
{
	volatile char *stop;
	int i, base, above = 0, samples = 3000;
	pid_t member;
	char *p;

	REQUIRE_HALFPROC();
	p = hp_anon(2 * PAGE);
	ASSERT_NE(MAP_FAILED, p);
	stop = p + PAGE;
	member = hp_spawn();
	ASSERT_LE(0, member);
	if (member == 0) {
		static char mine[64];
		char buf[64];

		for (i = 0; !*stop; i++) {
			if (mprotect(p, PAGE, i & 1 ? PROT_READ : PROT_READ | PROT_WRITE) ||
			    dmread(getppid(), mine, sizeof(buf), buf) != sizeof(buf))
				_exit(1);
		}
		_exit(0);
	}
	/*
	 * The set's own reference, once earlier tests' sets are gone: one
	 * (between the member's calls, with a reference per call).
	 */
	base = 1;
	for (i = 0; i < 5000 && hp_module_refs() != base; i++)
		usleep(1000);
	ASSERT_EQ(base, hp_module_refs());
	for (i = 0; i < samples; i++) {
		int r = hp_module_refs();

		ASSERT_LE(base, r);
		above += r > base;
	}
	*stop = 1;
	ASSERT_EQ(0, wait_status(member));
	TH_LOG("%d of %d samples of the module's reference count above the set's own", above,
	       samples);
	EXPECT_EQ(0, above);
}

TEST_HARNESS_MAIN
