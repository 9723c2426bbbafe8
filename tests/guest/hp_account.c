// SPDX-License-Identifier: GPL-2.0
/*
 * Accounting of the shared range (issue 10, defect 5b; docs/design-mm.md
 * "Accounting"): a member's RLIMIT_AS, RLIMIT_DATA and RLIMIT_MEMLOCK cover its own
 * memory plus the set's, as a thread's cover its whole process; its OOM
 * badness counts the set's memory; VmRSS and VmSize in /proc/<pid>/status
 * stay its own mm's.
 */
#include "../lib/halfproc_test.h"
#include "kselftest_harness.h"

#define MiB (1UL << 20)

/* A "Key:   N kB" line of /proc/<pid>/status (0: self), in kB, or -1. */
static long status_kb(pid_t pid, const char *key)
{
	char path[64];

	if (pid)
		snprintf(path, sizeof(path), "/proc/%d/status", pid);
	else
		snprintf(path, sizeof(path), "/proc/self/status");
	return proc_field(path, key);
}

static long oom_score(pid_t pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/oom_score", pid);
	return file_long(path);
}

static void *priv_map(size_t len)
{
	return mmap(NULL, len, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

/* Run @fn in a fresh process (so in a fresh set); its exit status. */
static int in_child(int (*fn)(void))
{
	pid_t pid = fork();

	if (pid == 0)
		_exit(fn());
	return wait_status(pid);
}

/*
 * @res (RLIMIT_AS or RLIMIT_DATA) of the /proc/self/status @key (VmSize or
 * VmData) + 64 MiB: 40 MiB shared fit, then 40 MiB private do not
 * (ENOMEM); once the shared 40 MiB are unmapped they do, and then 40 MiB
 * more shared do not.  For RLIMIT_DATA, a read-only private mapping (not
 * data) still maps.  Returns 0, or the failing step.
 */
static int limit_private_and_shared(int res, const char *key)
{
	long own = status_kb(0, key);
	struct rlimit rl;
	void *s, *p, *ro;

	if (own < 0)
		return 1;
	rl.rlim_cur = own * 1024 + 64 * MiB;
	rl.rlim_max = RLIM_INFINITY;
	if (setrlimit(res, &rl))
		return 2;
	s = hp_anon(40 * MiB);
	if (s == MAP_FAILED)
		return 3;
	p = priv_map(40 * MiB);
	if (p != MAP_FAILED) {
		printf("# %s: private 40 MiB beside shared 40 MiB under own + 64 MiB: mapped\n", key);
		return 4;
	}
	if (errno != ENOMEM)
		return 5;
	if (res == RLIMIT_DATA) {
		ro = mmap(NULL, 40 * MiB, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (ro == MAP_FAILED || munmap(ro, 40 * MiB))
			return 10;
	}
	if (munmap(s, 40 * MiB))
		return 6;
	p = priv_map(40 * MiB);
	if (p == MAP_FAILED)
		return 7;
	s = hp_anon(40 * MiB);
	if (s != MAP_FAILED) {
		printf("# %s: shared 40 MiB beside private 40 MiB under own + 64 MiB: mapped\n", key);
		return 8;
	}
	return errno == ENOMEM ? 0 : 9;
}

static int as_private_and_shared(void)
{
	return limit_private_and_shared(RLIMIT_AS, "VmSize");
}

static int data_private_and_shared(void)
{
	return limit_private_and_shared(RLIMIT_DATA, "VmData");
}

TEST(rlimit_as_counts_private_and_shared)
{
	REQUIRE_HALFPROC();
	ASSERT_EQ(0, in_child(as_private_and_shared));
}

/* Another member's shared mapping counts against our RLIMIT_AS too. */
static int as_other_members_mapping(void)
{
	long own = status_kb(0, "VmSize");
	volatile uint64_t *ret = hp_anon(PAGE);
	struct rlimit rl;
	pid_t m;

	if (own < 0 || ret == MAP_FAILED)
		return 1;
	m = hp_spawn();
	if (m == 0)
		_exit(hp_anon(40 * MiB) == MAP_FAILED);
	if (wait_status(m) != 0)
		return 2;
	rl.rlim_cur = own * 1024 + 64 * MiB;
	rl.rlim_max = RLIM_INFINITY;
	if (setrlimit(RLIMIT_AS, &rl))
		return 3;
	if (priv_map(40 * MiB) != MAP_FAILED) {
		printf("# private 40 MiB beside another member's 40 MiB: mapped\n");
		return 4;
	}
	return priv_map(8 * MiB) == MAP_FAILED ? 5 : 0;
}

TEST(rlimit_as_counts_other_members_shared_mappings)
{
	REQUIRE_HALFPROC();
	ASSERT_EQ(0, in_child(as_other_members_mapping));
}

TEST(rlimit_data_counts_private_and_shared)
{
	REQUIRE_HALFPROC();
	ASSERT_EQ(0, in_child(data_private_and_shared));
}

/*
 * Without CAP_IPC_LOCK, under RLIMIT_MEMLOCK of 16 pages: 10 shared pages
 * lock, then 10 private pages do not (ENOMEM); after munlock() of the
 * shared ones they do, and then the shared ones do not.
 */
static int memlock_private_and_shared(void)
{
	struct rlimit rl = { 16 * PAGE, 16 * PAGE };
	char *s = hp_anon(10 * PAGE), *p = priv_map(10 * PAGE);

	if (s == MAP_FAILED || p == MAP_FAILED)
		return 1;
	if (setrlimit(RLIMIT_MEMLOCK, &rl))
		return 2;
	/* Drops every capability, CAP_IPC_LOCK included. */
	if (setresuid(1000, 1000, 1000))
		return 3;
	if (mlock(s, 10 * PAGE))
		return 4;
	if (!mlock(p, 10 * PAGE)) {
		printf("# 10 private pages locked beside 10 shared under 16\n");
		return 5;
	}
	if (errno != ENOMEM)
		return 6;
	if (munlock(s, 10 * PAGE) || mlock(p, 10 * PAGE))
		return 7;
	if (!mlock(s, 10 * PAGE)) {
		printf("# 10 shared pages locked beside 10 private under 16\n");
		return 8;
	}
	return errno == ENOMEM ? 0 : 9;
}

TEST(rlimit_memlock_counts_private_and_shared)
{
	REQUIRE_HALFPROC();
	if (getuid() != 0)
		SKIP(return, "needs root to drop to uid 1000");
	ASSERT_EQ(0, in_child(memlock_private_and_shared));
}

/*
 * A member that never touched the range: its oom_score grows when another
 * member faults 256 MiB in.  oom_score is (1000 + badness per thousand of
 * RAM + swap) * 2 / 3: 666 for an idle process, and 256 MiB more badness
 * adds 1000 * 256 MiB / (4 GiB + 256 MiB of zram swap) * 2 / 3, about 39,
 * on the suite's guest.
 */
TEST(oom_badness_counts_the_set)
{
	char *s;
	long before, after, freed;
	struct chan c;
	pid_t m;

	REQUIRE_HALFPROC();
	ASSERT_EQ(0, chan_open(&c));
	s = hp_anon(256 * MiB);
	ASSERT_NE(MAP_FAILED, s);
	m = hp_spawn();
	ASSERT_GE(m, 0);
	if (m == 0) {
		from_parent(&c);
		_exit(0);
	}
	before = oom_score(m);
	memset(s, 1, 256 * MiB);
	after = oom_score(m);
	ASSERT_EQ(0, munmap(s, 256 * MiB));
	freed = oom_score(m);
	tell_child(&c, 'x');
	ASSERT_EQ(0, wait_status(m));
	TH_LOG("idle member's oom_score: %ld, after 256 MiB faulted in the range %ld, unmapped %ld",
	       before, after, freed);
	ASSERT_GE(after, before + 20);
	ASSERT_LE(freed, before + 5);
}

/*
 * VmRSS and VmSize are the member's own mm's: faulting 64 MiB in the range
 * leaves them (nearly) unchanged, for the member that faulted and for
 * another, while the range's mapping shows the 64 MiB in smaps.
 */
TEST(vmrss_and_vmsize_are_the_members_own)
{
	long rss0, size0, rss1, size1, orss0, orss1;
	char *s;
	struct chan c;
	pid_t m;

	REQUIRE_HALFPROC();
	ASSERT_EQ(0, chan_open(&c));
	s = hp_anon(PAGE);
	ASSERT_NE(MAP_FAILED, s);
	m = hp_spawn();
	ASSERT_GE(m, 0);
	if (m == 0) {
		from_parent(&c);
		_exit(0);
	}
	rss0 = status_kb(0, "VmRSS");
	size0 = status_kb(0, "VmSize");
	orss0 = status_kb(m, "VmRSS");
	s = hp_anon(64 * MiB);
	ASSERT_NE(MAP_FAILED, s);
	memset(s, 1, 64 * MiB);
	rss1 = status_kb(0, "VmRSS");
	size1 = status_kb(0, "VmSize");
	orss1 = status_kb(m, "VmRSS");
	tell_child(&c, 'x');
	ASSERT_EQ(0, wait_status(m));
	TH_LOG("VmRSS %ld -> %ld kB, VmSize %ld -> %ld kB, other member's VmRSS %ld -> %ld kB",
	       rss0, rss1, size0, size1, orss0, orss1);
	ASSERT_LT(rss1 - rss0, 8 * 1024);
	ASSERT_LT(size1 - size0, 8 * 1024);
	ASSERT_LT(orss1 - orss0, 8 * 1024);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	return test_harness_run(argc, argv);
}
