// SPDX-License-Identifier: GPL-2.0
/*
 * The set's memory cgroup when the kernel itself moves the range's pages
 * (docs/design-mm.md, "Memory cgroup"): a THP collapse requested by a
 * member in another cgroup, and a swap-in by such a member, charge the set's
 * cgroup (its creator's at set creation), never the member's.  Runs with
 * the guest's zram swap (init.sh's with_reclaim); SKIPs without the cgroup
 * v2 memory controller, THP or swap.
 */
#include "../lib/halfproc_test.h"
#include "../lib/hp_cgroup.h"
#include "kselftest_harness.h"
#include "../lib/hp_smaps.h"


#define MB (1UL << 20)
/* Per-CPU charge stocks make memory.current run ahead by up to 64 pages. */
#define SLACK (1 * MB)

static unsigned char pat(size_t i)
{
	return (unsigned char)(i / PAGE * 7 + 3);
}

static void fill(char *p, size_t len)
{
	for (size_t i = 0; i < len; i += PAGE)
		p[i] = pat(i);
}

/* The test process joins @cg, so a set it creates now is charged there. */
static int enter(const char *cg)
{
	return cg_write(cg, "cgroup.procs", "0");
}

/*
 * A member in cgroup @b that runs @fn(@p, @len); its exit status, 100+ if
 * it could not join @b.
 */
static int member_in(const char *b, int (*fn)(char *, size_t), char *p, size_t len)
{
	pid_t m = hp_spawn();

	if (m == 0)
		_exit(enter(b) ? 100 : fn(p, len));
	return m < 0 ? -1 : wait_status(m);
}

static int collapse(char *p, size_t len)
{
	if (madvise(p, len, MADV_HUGEPAGE))
		return 1;
	return madvise(p, len, MADV_COLLAPSE) ? 2 : 0;
}

/* Reads every page back: 0, or 3 if one is wrong. */
static int read_back(char *p, size_t len)
{
	for (size_t i = 0; i < len; i += PAGE)
		if ((unsigned char)p[i] != pat(i))
			return 3;
	return 0;
}

FIXTURE(cgs)
{
	char a[128], b[128];
};

FIXTURE_SETUP(cgs)
{
	self->a[0] = 0;
	if (!hp_supported())
		SKIP(return, "no half-process support");
	if (!memcg_available())
		SKIP(return, "no cgroup v2 memory controller");
	ASSERT_EQ(0, cg_make_in(self->a, sizeof(self->a), CG, "hp_mcr", "a"));
	ASSERT_EQ(0, cg_make_in(self->b, sizeof(self->b), CG, "hp_mcr", "b"));
	/* The set is made after this: its cgroup is A. */
	ASSERT_EQ(0, enter(self->a));
}

FIXTURE_TEARDOWN(cgs)
{
	if (!self->a[0])
		return;
	enter(CG);
	cg_remove(self->b);
	cg_remove(self->a);
}

/*
 * The creator (in A) faults 512 base pages of the range; a member in B
 * collapses them into one THP.  The new huge page is charged to A, which
 * is uncharged the base pages: A stays level, B gains nothing.
 */
TEST_F(cgs, thp_collapse_charges_the_set_cgroup)
{
	long a0, b0, a1, b1;
	char *p;

	if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK))
		SKIP(return, "no THP");
	p = hp_aligned(HPAGE);
	ASSERT_NE(MAP_FAILED, p);
	ASSERT_EQ(0, madvise(p, HPAGE, MADV_NOHUGEPAGE));
	fill(p, HPAGE);
	ASSERT_EQ(0, smaps_kb(p, "AnonHugePages"));
	a0 = cg_read(self->a, "memory.current", NULL);
	b0 = cg_read(self->b, "memory.current", NULL);
	ASSERT_EQ(0, member_in(self->b, collapse, p, HPAGE));
	a1 = cg_read(self->a, "memory.current", NULL);
	b1 = cg_read(self->b, "memory.current", NULL);
	TH_LOG("collapse by a member in B: A %ld -> %ld, B %ld -> %ld, AnonHugePages %ld kB",
	       a0, a1, b0, b1, smaps_kb(p, "AnonHugePages"));
	ASSERT_EQ(2048, smaps_kb(p, "AnonHugePages"));
	EXPECT_EQ(0, read_back(p, HPAGE));
	EXPECT_GT(a1 - a0, -(long)SLACK);
	EXPECT_LT(b1 - b0, (long)SLACK);
}

/*
 * The creator (in A) pages 8 MiB of the range out to swap; a member in B
 * faults every page back in.  The pages come back charged to A (its
 * memory.current grows by about 8 MiB), not to B.
 */
TEST_F(cgs, swap_in_charges_the_set_cgroup)
{
	const size_t len = 8 * MB;
	long a0, b0, a1, b1, s0, s1;
	char *p;

	if (meminfo("SwapTotal") <= 0)
		SKIP(return, "no swap device");
	p = hp_anon(len);
	ASSERT_NE(MAP_FAILED, p);
	ASSERT_EQ(0, madvise(p, len, MADV_NOHUGEPAGE));
	fill(p, len);
	s0 = cg_read(self->a, "memory.swap.current", NULL);
	ASSERT_EQ(0, madvise(p, len, MADV_PAGEOUT));
	s1 = cg_read(self->a, "memory.swap.current", NULL);
	a0 = cg_read(self->a, "memory.current", NULL);
	b0 = cg_read(self->b, "memory.current", NULL);
	ASSERT_EQ(0, member_in(self->b, read_back, p, len));
	a1 = cg_read(self->a, "memory.current", NULL);
	b1 = cg_read(self->b, "memory.current", NULL);
	TH_LOG("pageout: A's swap %ld -> %ld; swap-in by a member in B: A %ld -> %ld, B %ld -> %ld",
	       s0, s1, a0, a1, b0, b1);
	/* Reclaim may skip a page it finds busy, never most of them. */
	ASSERT_GE(s1 - s0, (long)len * 3 / 4);
	EXPECT_GE(a1 - a0, (long)len * 3 / 4 - (long)SLACK);
	EXPECT_LT(b1 - b0, (long)SLACK);
}

TEST_HARNESS_MAIN
