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

/* What one set size and placement of idle members measured (below). */
struct idle_counts {
	long flushes, member_flushes, flush_cpus, ipis;
	int err;
};

static void pin(int cpu)
{
	cpu_set_t cs;

	CPU_ZERO(&cs);
	CPU_SET(cpu, &cs);
	if (sched_setaffinity(0, sizeof(cs), &cs))
		_exit(2);
}

/* Wait until @pid sleeps (state S), up to 5 s. */
static int asleep(pid_t pid)
{
	char path[64], st[512], *rp;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	for (int i = 0; i < 5000; i++) {
		int fd = open(path, O_RDONLY);
		ssize_t n = fd < 0 ? -1 : read(fd, st, sizeof(st) - 1);

		if (fd >= 0)
			close(fd);
		if (n <= 0)
			return 0;
		st[n] = 0;
		rp = strrchr(st, ')');
		if (rp && rp[1] == ' ' && rp[2] == 'S')
			return 1;
		usleep(1000);
	}
	return 0;
}

/*
 * Run in a process that has only ever run on CPU 0: make a set, add @idle
 * members that touch the range on @cpu and then sleep in read(), and count
 * what @n munmaps of a touched range page cost.
 */
static void idle_members_run(int idle, int cpu, int n, struct idle_counts *out)
{
	pid_t members[8];
	int ready[2], go[2];
	char set[32], c;
	long f0, m0, c0, i0;
	char *p;

	out->err = 1;
	p = hp_anon(PAGE);
	if (p == MAP_FAILED || pipe(ready) || pipe(go))
		return;
	p[0] = 1;
	snprintf(set, sizeof(set), "%ld", newest_set());
	for (int i = 0; i < idle; i++) {
		members[i] = hp_spawn();
		if (members[i] < 0)
			return;
		if (members[i] == 0) {
			volatile char x;

			close(go[1]);
			pin(cpu);
			x = p[0];
			(void)x;
			if (write(ready[1], "r", 1) != 1)
				_exit(3);
			/* Sleeps until the measuring process closes its end. */
			_exit(read(go[0], &c, 1) == 0 ? 0 : 4);
		}
	}
	close(go[0]);
	out->err = 2;
	for (int i = 0; i < idle; i++)
		if (read(ready[0], &c, 1) != 1 || !asleep(members[i]))
			return;
	f0 = counter(set, "flushes");
	m0 = counter(set, "member_flushes");
	c0 = counter(set, "flush_cpus");
	i0 = counter(set, "ipis");
	out->err = 3;
	for (int i = 0; i < n; i++) {
		char *q = hp_anon(PAGE);

		if (q == MAP_FAILED)
			return;
		q[0] = 1;
		if (munmap(q, PAGE))
			return;
	}
	out->flushes = counter(set, "flushes") - f0;
	out->member_flushes = counter(set, "member_flushes") - m0;
	out->flush_cpus = counter(set, "flush_cpus") - c0;
	out->ipis = counter(set, "ipis") - i0;
	close(go[1]);
	out->err = 4;
	for (int i = 0; i < idle; i++)
		if (wait_status(members[i]))
			return;
	out->err = 0;
}

/*
 * Issue 10, counts: IPIs go only to CPUs that loaded a member's mm, and do
 * not grow with the number of idle members.  For sets of 1, 2, 4 and 8
 * members (one measuring, the others asleep in read()), 50 munmaps of a
 * touched range page from CPU 0:
 * - every munmap flushes every member (member flushes = members x flushes);
 * - idle members that only ever ran on CPU 0, where the measuring member
 *   runs: no CPU to flush, no IPI (a flush of all CPUs, or of CPUs that
 *   never loaded a member, fails this);
 * - idle members that ran on CPU 1 before they slept: CPU 1 holds at most
 *   one of their mms (lazily, x86 drops a CPU from the previous mm's mask
 *   at each switch), so at most one IPI per flush however many sleep.
 * The measuring process is forked after this one is bound to CPU 0, so its
 * own mm was never loaded on CPU 1.
 */
TEST(idle_members_cost_no_ipis)
{
	static const int sizes[] = { 1, 2, 4, 8 };
	const int n = 50, runs = 2 * ARRAY_SIZE(sizes);
	struct idle_counts *r;

	REQUIRE_COUNTERS();
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		SKIP(return, "one CPU");
	r = mmap(NULL, runs * sizeof(*r), PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, r);
	{
		cpu_set_t cs;

		CPU_ZERO(&cs);
		CPU_SET(0, &cs);
		ASSERT_EQ(0, sched_setaffinity(0, sizeof(cs), &cs));
	}
	for (int i = 0; i < runs; i++) {
		int members = sizes[i / 2], cpu = i % 2;
		pid_t w = fork();

		ASSERT_LE(0, w);
		if (w == 0) {
			idle_members_run(members - 1, cpu, n, &r[i]);
			_exit(r[i].err);
		}
		ASSERT_EQ(0, wait_status(w)) TH_LOG("%d members, idle on CPU %d: step %d",
						   members, cpu, r[i].err);
		TH_LOG("%d members, idle ones on CPU %d, %d touched munmaps: flushes %ld, "
		       "member flushes %ld, flushed CPUs %ld, IPIs %ld", members, cpu, n,
		       r[i].flushes, r[i].member_flushes, r[i].flush_cpus, r[i].ipis);
		EXPECT_GE(r[i].flushes, n);
		EXPECT_EQ(members * r[i].flushes, r[i].member_flushes);
		if (cpu == 0) {
			EXPECT_EQ(0, r[i].flush_cpus);
			EXPECT_EQ(0, r[i].ipis);
		} else {
			EXPECT_LE(r[i].ipis, r[i].flushes);
		}
	}
	munmap(r, runs * sizeof(*r));
}

TEST_HARNESS_MAIN
