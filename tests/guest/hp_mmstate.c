// SPDX-License-Identifier: GPL-2.0
/*
 * Per-mm state of the set mm (issue 10, defect 5d).  The set mm was made by
 * mm_alloc() in the creator's context and kept the creator's MDWE,
 * THP-disable and KSM flags of that moment for ever, while every mapping
 * and fault in the range consults the set mm.  Patches 0026-0028: a
 * member's prctl() applies to the range as a thread's applies to its
 * process (MDWE sticky for the whole set; THP-disable and KSM merge-any
 * taken by the set, the last member wins); the set mm allocates no pkey,
 * so only key 0 tags the range; a member cannot enable LAM (EBUSY).
 * Defect 6 (b), patch 0030: a reader of a member's /proc/<pid>/maps waits
 * for the set mm's lock killably.
 *
 * Each test is one process that creates its own set (the harness forks a
 * non-member per test), and most add a member with clone3(CLONE_HALFPROC).
 */
#include "../lib/halfproc_test.h"
#include "kselftest_harness.h"
#include "../lib/hp_blocked.h"
#include "../lib/hp_smaps.h"
#include <sys/prctl.h>
#include <time.h>

#ifndef PR_SET_MDWE
#define PR_SET_MDWE			65
#define PR_MDWE_REFUSE_EXEC_GAIN	(1UL << 0)
#define PR_MDWE_NO_INHERIT		(1UL << 1)
#define PR_GET_MDWE			66
#endif
#ifndef PR_SET_MEMORY_MERGE
#define PR_SET_MEMORY_MERGE		67
#define PR_GET_MEMORY_MERGE		68
#endif
#define ARCH_GET_MAX_TAG_BITS		0x4003
#define ARCH_ENABLE_TAGGED_ADDR		0x4002

#define RWX (PROT_READ | PROT_WRITE | PROT_EXEC)

/* Whether /proc/cpuinfo's flags list @flag. */
static int cpu_flag(const char *flag)
{
	char line[4096], pat[32], *s;
	int found = 0;
	FILE *f = fopen("/proc/cpuinfo", "r");

	if (!f)
		return 0;
	snprintf(pat, sizeof(pat), " %s", flag);
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "flags", 5))
			continue;
		s = strstr(line, pat);
		found = s && (s[strlen(pat)] == ' ' || s[strlen(pat)] == '\n');
		break;
	}
	fclose(f);
	return found;
}

/* A member child that runs @fn, reports its result, and exits on 'x'. */
static pid_t member_doing(struct chan *c, long (*fn)(void), long *result)
{
	pid_t child;

	if (chan_open(c))
		return -1;
	child = hp_spawn();
	if (child == 0) {
		long r = fn();

		if (write(c->up[1], &r, sizeof(r)) != sizeof(r))
			_exit(2);
		from_parent(c);
		_exit(0);
	}
	if (child > 0 && read(c->up[0], result, sizeof(*result)) != sizeof(*result))
		*result = -1000;
	return child;
}

static long set_mdwe(void)
{
	return prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) ? -errno : 0;
}

static long thp_off(void)
{
	return prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) ? -errno : 0;
}

static long thp_on(void)
{
	return prctl(PR_SET_THP_DISABLE, 0, 0, 0, 0) ? -errno : 0;
}

static long merge_on(void)
{
	return prctl(PR_SET_MEMORY_MERGE, 1, 0, 0, 0) ? -errno : 0;
}

static long merge_off(void)
{
	return prctl(PR_SET_MEMORY_MERGE, 0, 0, 0, 0) ? -errno : 0;
}

/* Whether MDWE works here at all, checked in a throw-away child. */
static int mdwe_supported(void)
{
	pid_t child = fork();

	if (child == 0)
		_exit(set_mdwe() ? 1 : 0);
	return child > 0 && wait_status(child) == 0;
}

/* W+X in the range, by mmap() and by mprotect(): 0, or the errno. */
static int range_wx(int *mprotect_errno)
{
	void *p = hp_mmap(NULL, PAGE, RWX, MAP_PRIVATE | MAP_ANONYMOUS);
	int err = p == MAP_FAILED ? errno : 0;
	void *q = hp_anon(PAGE);

	if (p != MAP_FAILED)
		munmap(p, PAGE);
	*mprotect_errno = -1;
	if (q != MAP_FAILED) {
		*mprotect_errno = mprotect(q, PAGE, RWX) ? errno : 0;
		munmap(q, PAGE);
	}
	return err;
}

/* The scenario of the defect: a member sets MDWE, then maps W+X in the range. */
TEST(mdwe_of_a_member_binds_its_own_range_operations)
{
	int mp, mm;
	void *priv;

	REQUIRE_HALFPROC();
	if (!mdwe_supported())
		SKIP(return, "PR_SET_MDWE not supported");
	ASSERT_NE(MAP_FAILED, hp_anon(PAGE));		/* the set */
	ASSERT_EQ(0, set_mdwe());
	/* MDWE itself works on private memory. */
	priv = mmap(NULL, PAGE, RWX, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_EQ(MAP_FAILED, priv);
	mm = range_wx(&mp);
	EXPECT_EQ(EACCES, mm) TH_LOG("mmap(PROT_WRITE|PROT_EXEC, MAP_HALFPROC) after PR_SET_MDWE: errno %d (0: it succeeded)", mm);
	EXPECT_EQ(EACCES, mp) TH_LOG("mprotect(RWX) of a range page after PR_SET_MDWE: errno %d (0: it succeeded)", mp);
}

/* One member's MDWE binds every member's operations on the range. */
TEST(mdwe_of_one_member_binds_the_others)
{
	struct chan c;
	long r = -1;
	int mp, mm;
	void *priv;
	pid_t child;

	REQUIRE_HALFPROC();
	if (!mdwe_supported())
		SKIP(return, "PR_SET_MDWE not supported");
	ASSERT_NE(MAP_FAILED, hp_anon(PAGE));
	child = member_doing(&c, set_mdwe, &r);
	ASSERT_LE(0, child);
	ASSERT_EQ(0, r);
	/* This member has no MDWE of its own: its private memory may be W+X. */
	EXPECT_EQ(0, prctl(PR_GET_MDWE, 0, 0, 0, 0));
	priv = mmap(NULL, PAGE, RWX, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	EXPECT_NE(MAP_FAILED, priv);
	mm = range_wx(&mp);
	tell_child(&c, 'x');
	ASSERT_EQ(0, wait_status(child));
	EXPECT_EQ(EACCES, mm) TH_LOG("another member's mmap(W+X) in the range after one set MDWE: errno %d", mm);
	EXPECT_EQ(EACCES, mp) TH_LOG("another member's mprotect(RWX) in the range: errno %d", mp);
	/* Sticky: it outlives the member that set it. */
	mm = range_wx(&mp);
	EXPECT_EQ(EACCES, mm);
	EXPECT_EQ(EACCES, mp);
}

/* MDWE with NO_INHERIT, set before the set exists, still binds the range. */
TEST(mdwe_no_inherit_creator_binds_its_set)
{
	int mp, mm;

	REQUIRE_HALFPROC();
	if (!mdwe_supported())
		SKIP(return, "PR_SET_MDWE not supported");
	ASSERT_EQ(0, prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN |
			   PR_MDWE_NO_INHERIT, 0, 0, 0));
	mm = range_wx(&mp);
	EXPECT_EQ(EACCES, mm) TH_LOG("mmap(W+X, MAP_HALFPROC) creating the set after MDWE|NO_INHERIT: errno %d", mm);
	EXPECT_EQ(EACCES, mp) TH_LOG("mprotect(RWX) in that set: errno %d", mp);
}

/* kB of huge pages in a fresh 2 MiB-aligned range mapping touched by us. */
static long range_thp_kb(void)
{
	char *p = hp_anon(2 * HPAGE), *a;
	long kb;

	if (p == MAP_FAILED)
		return -1;
	a = (char *)(((unsigned long)p + HPAGE - 1) & ~(HPAGE - 1));
	madvise(a, HPAGE, MADV_HUGEPAGE);
	memset(a, 1, HPAGE);
	kb = smaps_field(a, "AnonHugePages:", NULL);
	munmap(p, 2 * HPAGE);
	return kb;
}

/* THP-disable: the caller's and another member's apply to the range. */
TEST(thp_disable_of_a_member_applies_to_the_range)
{
	struct chan c;
	long r = -1, on, own, other, again;
	pid_t child;

	REQUIRE_HALFPROC();
	on = range_thp_kb();		/* creates the set */
	ASSERT_LE(0, on);
	if (on == 0)
		SKIP(return, "no huge page in the range with THP enabled (THP off or no memory)");
	ASSERT_EQ(0, thp_off());
	own = range_thp_kb();
	ASSERT_EQ(0, thp_on());
	child = member_doing(&c, thp_off, &r);
	ASSERT_LE(0, child);
	ASSERT_EQ(0, r);
	EXPECT_EQ(0, prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0));	/* ours */
	other = range_thp_kb();
	tell_child(&c, 'x');
	ASSERT_EQ(0, wait_status(child));
	child = member_doing(&c, thp_on, &r);
	ASSERT_LE(0, child);
	ASSERT_EQ(0, r);
	again = range_thp_kb();
	tell_child(&c, 'x');
	ASSERT_EQ(0, wait_status(child));
	TH_LOG("AnonHugePages of a 2 MiB range region: enabled %ld kB, after our PR_SET_THP_DISABLE %ld kB, after another member's %ld kB, re-enabled by a member %ld kB",
	       on, own, other, again);
	EXPECT_EQ(0, own);
	EXPECT_EQ(0, other);
	EXPECT_LT(0, again);
}

/* PR_SET_MEMORY_MERGE of a member makes the range's mappings mergeable. */
TEST(memory_merge_of_a_member_applies_to_the_range)
{
	struct chan c;
	long r = -1, old_mg, new_mg, off_mg;
	void *p, *q;
	pid_t child;

	REQUIRE_HALFPROC();
	if (prctl(PR_GET_MEMORY_MERGE, 0, 0, 0, 0) < 0)
		SKIP(return, "no KSM (PR_GET_MEMORY_MERGE: %s)", strerror(errno));
	p = hp_anon(PAGE);
	ASSERT_NE(MAP_FAILED, p);
	ASSERT_EQ(0, smaps_field(p, "VmFlags:", "mg"));
	child = member_doing(&c, merge_on, &r);
	ASSERT_LE(0, child);
	ASSERT_EQ(0, r);
	old_mg = smaps_field(p, "VmFlags:", "mg");
	q = hp_anon(PAGE);
	ASSERT_NE(MAP_FAILED, q);
	new_mg = smaps_field(q, "VmFlags:", "mg");
	tell_child(&c, 'x');
	ASSERT_EQ(0, wait_status(child));
	EXPECT_EQ(0, prctl(PR_GET_MEMORY_MERGE, 0, 0, 0, 0));	/* ours */
	child = member_doing(&c, merge_off, &r);
	ASSERT_LE(0, child);
	ASSERT_EQ(0, r);
	off_mg = smaps_field(q, "VmFlags:", "mg");
	tell_child(&c, 'x');
	ASSERT_EQ(0, wait_status(child));
	TH_LOG("range VmFlags mg after a member's PR_SET_MEMORY_MERGE 1: existing mapping %ld, new mapping %ld; after 0: %ld",
	       old_mg, new_mg, off_mg);
	EXPECT_EQ(1, old_mg);
	EXPECT_EQ(1, new_mg);
	EXPECT_EQ(0, off_mg);
}

#define REQUIRE_PKEYS(k) do {						\
	k = syscall(SYS_pkey_alloc, 0, 0);				\
	if (k < 0)							\
		SKIP(return, "no protection keys (pkey_alloc: %s; cpu pku %d ospke %d)", \
		     strerror(errno), cpu_flag("pku"), cpu_flag("ospke")); \
	syscall(SYS_pkey_free, k);					\
} while (0)

/*
 * PROT_EXEC alone in the range takes no execute-only key of the set mm (it
 * did: key 1, denied in the caller's PKRU only, while every member's own
 * first pkey_alloc() returns 1 for its own use), and a member's own key
 * cannot tag the range (that half held before too: pkey_mprotect() never
 * accepts the execute-only key); key 0 can.
 */
TEST(pkeys_in_the_range)
{
	long key, k, r, e;
	char *p, *q, *priv, v = 0;
	pid_t child;
	int st;

	REQUIRE_HALFPROC();
	REQUIRE_PKEYS(k);
	p = hp_anon(PAGE);
	q = hp_anon(PAGE);
	ASSERT_NE(MAP_FAILED, p);
	ASSERT_NE(MAP_FAILED, q);
	p[0] = 42;
	ASSERT_EQ(0, mprotect(p, PAGE, PROT_EXEC));
	key = smaps_field(p, "ProtectionKey:", NULL);
	/* Another member (with its own PKRU) reads it. */
	child = hp_spawn();
	ASSERT_LE(0, child);
	if (child == 0)
		_exit(probe_read(p, &v) ? 1 : v == 42 ? 0 : 2);
	st = wait_status(child);
	k = syscall(SYS_pkey_alloc, 0, 0);
	ASSERT_LT(0, k);
	priv = mmap(NULL, PAGE, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, priv);
	ASSERT_EQ(0, syscall(SYS_pkey_mprotect, priv, PAGE,
			     PROT_READ | PROT_WRITE, k));
	r = syscall(SYS_pkey_mprotect, q, PAGE, PROT_READ | PROT_WRITE, k);
	e = r ? errno : 0;
	TH_LOG("PROT_EXEC in the range: ProtectionKey %ld, another member's read %s; pkey_mprotect(range, own key %ld): %ld, errno %ld",
	       key, st == 0 ? "worked" : st == 1 ? "faulted" : "wrong",
	       k, r, e);
	EXPECT_EQ(0, key);
	EXPECT_EQ(0, st);
	EXPECT_EQ(-1, r);
	EXPECT_EQ(EINVAL, e);
	EXPECT_EQ(0, syscall(SYS_pkey_mprotect, q, PAGE,
			     PROT_READ | PROT_WRITE, 0));
}

/* LAM must be enabled before sharing, as before a second thread. */
TEST(lam_cannot_be_enabled_in_a_member)
{
	unsigned long bits = 0;
	long r;

	REQUIRE_HALFPROC();
	if (syscall(SYS_arch_prctl, ARCH_GET_MAX_TAG_BITS, &bits) || !bits)
		SKIP(return, "no LAM on this CPU (cpu lam %d; QEMU TCG has none)",
		     cpu_flag("lam"));
	ASSERT_NE(MAP_FAILED, hp_anon(PAGE));
	r = syscall(SYS_arch_prctl, ARCH_ENABLE_TAGGED_ADDR, 6UL);
	EXPECT_EQ(-1, r);
	EXPECT_EQ(EBUSY, errno);
}

/* A reader of the test process's maps, for ever. */
static pid_t maps_reader(void *unused)
{
	char path[64], buf[4096];
	pid_t pid = fork();
	int fd;

	if (pid != 0)
		return pid;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	snprintf(path, sizeof(path), "/proc/%d/maps", getppid());
	for (;;) {
		fd = open(path, O_RDONLY);
		while (fd >= 0 && read(fd, buf, sizeof(buf)) > 0)
			;
		if (fd >= 0)
			close(fd);
	}
}

/* The verdict is an order, so only the harness's limit depends on speed. */
FIXTURE(killable) {};
FIXTURE_SETUP(killable) {}
FIXTURE_TEARDOWN(killable) {}

/*
 * Defect 6 (b): a reader of a member's /proc/<pid>/maps waits for the set
 * mm's mmap lock; while another member's mprotect() of a large populated
 * region holds it for writing, SIGKILL must end the reader at once, not
 * when the mprotect() is over (tests/lib/hp_blocked.h: judged by order).
 */
TEST_F_TIMEOUT(killable, proc_maps_reader_is_killable_behind_a_long_meta_operation, 600)
{
	struct blocked b;
	int r, counted, late, tries;

	REQUIRE_HALFPROC();
	r = blocked_start(&b);
	ASSERT_LE(0, r);
	if (r > 0)
		SKIP(return, "mprotect() of %lu MiB takes %.1f ms: too short to tell",
		     BLOCKED_BIG >> 20, b.hold_ms);
	tries = blocked_rounds(&b, maps_reader, NULL, &counted, &late);
	ASSERT_EQ(0, blocked_stop(&b));
	TH_LOG("mprotect() of %lu MiB holds the set mm's lock %.1f ms; %d of %d kills hit a blocked maps reader, %d of those were seen only after the mprotect() ended",
	       BLOCKED_BIG >> 20, b.hold_ms, counted, tries, late);
	ASSERT_EQ(BLOCKED_ROUNDS, counted);
	EXPECT_EQ(0, late);
}

TEST_HARNESS_MAIN
