// SPDX-License-Identifier: GPL-2.0
/*
 * Reclaim and page movement on the shared range: swap-out and back, page
 * migration between NUMA nodes, THP collapse and split, KSM merging,
 * userfaultfd and hugetlb.  The set's pages live in the set mm, so these
 * are the kernel's own reclaim, migration, khugepaged and KSM walks running
 * over a VMA that several members' page tables point at; every case has a
 * second member read the data back through its own page tables after the
 * page moved.  docs/design-mm.md ("Reclaim and page movement") says what is
 * supported and what is refused with which errno.
 *
 * The guest's /init sets up the environment: a zram swap device, two NUMA
 * nodes (qemu/harness), hugetlb pages; a case SKIPs where its piece is
 * missing.
 */
#include "../lib/hp_stats.h"
#include <poll.h>
#include <sys/ioctl.h>
#include <linux/mempolicy.h>
#include <linux/userfaultfd.h>
#include "kselftest_harness.h"
#include "../lib/hp_smaps.h"

#define MB (1UL << 20)


/* What a checking member compares; in a MAP_SHARED page outside the set. */
struct ctl {
	char *addr;
	size_t len;
	unsigned long seed;	/* 0: every byte 0x5a (KSM's identical pages) */
	char *hole;		/* a page that must read zero, or NULL */
	long bad;		/* first bad page, -1 if none */
	long on[2];		/* numa_maps: pages of addr's VMA on node 0, 1 */
};

static unsigned long word(unsigned long seed, size_t i)
{
	return seed * 1000003UL + i;
}

static void fill(char *p, size_t len, unsigned long seed)
{
	for (size_t i = 0; i < len / PAGE; i++) {
		if (!seed) {
			memset(p + i * PAGE, 0x5a, PAGE);
			continue;
		}
		*(unsigned long *)(p + i * PAGE) = word(seed, i);
		*(unsigned long *)(p + i * PAGE + PAGE / 2) = ~word(seed, i);
	}
}

/* The first page that does not hold fill()'s pattern, or -1. */
static long check(const struct ctl *c)
{
	for (size_t i = 0; i < c->len / PAGE; i++) {
		const char *pg = c->addr + i * PAGE;
		const unsigned long *w = (const unsigned long *)pg;

		if (pg == c->hole) {
			if (w[0] || w[PAGE / 2 / sizeof(*w)])
				return i;
		} else if (!c->seed) {
			for (size_t b = 0; b < PAGE; b++)
				if (pg[b] != 0x5a)
					return i;
		} else if (w[0] != word(c->seed, i) ||
			   w[PAGE / 2 / sizeof(*w)] != ~word(c->seed, i)) {
			return i;
		}
	}
	return -1;
}

/*
 * Pages on nodes 0 and 1 of the VMA that holds @addr, from
 * /proc/self/numa_maps (which lists a member's shared-range VMAs in place).
 */
static int numa_pages(const void *addr, long on[2])
{
	unsigned long a = (unsigned long)addr, s, best = 0;
	char line[1024], *t;
	FILE *f = fopen("/proc/self/numa_maps", "r");

	on[0] = on[1] = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx ", &s) != 1 || s > a || s < best)
			continue;
		best = s;
		on[0] = on[1] = 0;
		for (t = strtok(line, " \n"); t; t = strtok(NULL, " \n"))
			if (t[0] == 'N' && (t[1] == '0' || t[1] == '1') && t[2] == '=')
				on[t[1] - '0'] = strtol(t + 3, NULL, 10);
	}
	fclose(f);
	return best ? 0 : -1;
}

/*
 * A second member: on 'v' it checks ctl against its own view of the range
 * (and asks move_pages() where the first pages are), answers 'y'/'n'; on
 * 'w' it writes word 7 into page 3; on 'q' it exits.
 */
static pid_t checker(struct chan *ch, struct ctl *c)
{
	pid_t pid;

	if (chan_open(ch))
		return -1;
	pid = hp_spawn();
	if (pid)
		return pid;
	for (;;) {
		char cmd = from_parent(ch);

		if (cmd == 'q')
			_exit(0);
		if (cmd == 'w') {
			*(unsigned long *)(c->addr + 3 * PAGE + 8) = 7;
			tell_parent(ch, 'y');
			continue;
		}
		c->bad = check(c);
		numa_pages(c->addr, c->on);
		tell_parent(ch, c->bad < 0 ? 'y' : 'n');
	}
}

static struct ctl *ctl_map(void)
{
	struct ctl *c = mmap(NULL, sizeof(*c), PROT_READ | PROT_WRITE,
			     MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	return c == MAP_FAILED ? NULL : c;
}

static int sysfs_write(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY), ok;

	if (fd < 0)
		return -1;
	ok = write(fd, val, strlen(val)) == (ssize_t)strlen(val);
	close(fd);
	return ok ? 0 : -1;
}

/*
 * MADV_PAGEOUT on the range reclaims the set's pages to swap (pswpout
 * grows, swap fills); a second member faults them back in (pswpin grows)
 * and sees every page's data.
 */
TEST(swap_out_and_back)
{
	const size_t len = 8 * MB;
	long used0, used1, used2;
	struct ctl *c;
	struct chan ch;
	pid_t m;
	char *p;

	REQUIRE_HALFPROC();
	if (meminfo("SwapTotal") <= 0)
		SKIP(return, "no swap device");
	ASSERT_NE(NULL, c = ctl_map());
	p = hp_anon(len);
	ASSERT_NE(MAP_FAILED, p);
	/* Base pages: a THP would be split or swapped whole, counted apart. */
	ASSERT_EQ(0, madvise(p, len, MADV_NOHUGEPAGE));
	fill(p, len, 11);
	*c = (struct ctl){ .addr = p, .len = len, .seed = 11, .bad = -1 };
	m = checker(&ch, c);
	ASSERT_GE(m, 0);
	tell_child(&ch, 'v');
	ASSERT_EQ('y', from_child(&ch));

	ASSERT_EQ(0, smaps_kb(p, "Swap"));
	used0 = meminfo("SwapTotal") - meminfo("SwapFree");
	ASSERT_EQ(0, madvise(p, len, MADV_PAGEOUT));
	used1 = meminfo("SwapTotal") - meminfo("SwapFree");
	TH_LOG("MADV_PAGEOUT of %zu kB: swap used +%ld kB, the range's smaps: "
	       "Swap %ld kB, Rss %ld kB", len / 1024, used1 - used0,
	       smaps_kb(p, "Swap"), smaps_kb(p, "Rss"));
	/* Reclaim may skip a page it finds busy, never most of them. */
	ASSERT_GE(used1 - used0, (long)(len / 1024) * 3 / 4);
	ASSERT_GE(smaps_kb(p, "Swap"), (long)(len / 1024) * 3 / 4);

	/* The member faults every page back in through its own tables. */
	tell_child(&ch, 'v');
	EXPECT_EQ('y', from_child(&ch)) TH_LOG("page %ld wrong after swap-in", c->bad);
	used2 = meminfo("SwapTotal") - meminfo("SwapFree");
	TH_LOG("after the member's read-back: swap used %+ld kB, Swap %ld kB, "
	       "Rss %ld kB", used2 - used1, smaps_kb(p, "Swap"), smaps_kb(p, "Rss"));
	ASSERT_EQ((long)(len / 1024), smaps_kb(p, "Rss"));
	EXPECT_EQ(-1, check(c));
	tell_child(&ch, 'q');
	EXPECT_EQ(0, wait_status(m));
	munmap(p, len);
}

/* TLB shootdown IPIs CPU @cpu has received (/proc/interrupts "TLB"), or -1. */
static long tlb_ipis(int cpu)
{
	char line[4096], *t;
	long v = -1;
	FILE *f = fopen("/proc/interrupts", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		t = line + strspn(line, " ");
		if (strncmp(t, "TLB:", 4))
			continue;
		t += 4;
		for (int i = 0; i <= cpu; i++)
			v = strtol(t, &t, 10);
		break;
	}
	fclose(f);
	return v;
}

/* Pages in swap now. */
static long swap_pages(void)
{
	return (meminfo("SwapTotal") - meminfo("SwapFree")) / (PAGE / 1024);
}

static void pin(int cpu)
{
	cpu_set_t cs;

	CPU_ZERO(&cs);
	CPU_SET(cpu, &cs);
	sched_setaffinity(0, sizeof(cs), &cs);
}

/* What one MADV_PAGEOUT of the range cost. */
struct pageout {
	long unmapped;		/* pages the range's Rss fell by */
	long swapped;		/* pages swap use grew by */
	long flushes;		/* synchronous flushes of the members ... */
	long member_flushes;	/* ... and the member mms they flushed */
	long batched;		/* notifier calls that added the members ... */
	long batched_members;	/* ... to a deferred flush, and how many */
	long ipis;		/* TLB shootdowns received by CPU 1 */
};

static struct pageout pageout(const char *set, char *p, size_t len)
{
	struct pageout a = {
		smaps_kb(p, "Rss") / (PAGE / 1024), swap_pages(),
		counter(set, "flushes"), counter(set, "member_flushes"),
		counter(set, "batched"), counter(set, "batched_members"),
		tlb_ipis(1),
	}, b;

	if (madvise(p, len, MADV_PAGEOUT))
		a.swapped = -1;
	b = (struct pageout){
		smaps_kb(p, "Rss") / (PAGE / 1024), swap_pages(),
		counter(set, "flushes"), counter(set, "member_flushes"),
		counter(set, "batched"), counter(set, "batched_members"),
		tlb_ipis(1),
	};
	return (struct pageout){ a.unmapped - b.unmapped,
		b.swapped - a.swapped, b.flushes - a.flushes,
		b.member_flushes - a.member_flushes, b.batched - a.batched,
		b.batched_members - a.batched_members, b.ipis - a.ipis };
}

/*
 * Issue 10, 5f: reclaim of the set's pages flushes the members once per
 * reclaim batch, not once per page.  Four members, three of them spinning
 * on CPU 1 (one always has its tables loaded there), the fourth pages out
 * 256 touched pages from CPU 0, twice: right after writing them (dirty
 * entries: the kernel flushes before writing each page to swap, so a batch
 * holds one page) and after reading them back (clean entries: one batch
 * per 31 pages freed).  No member may be flushed synchronously per page
 * (before: 4 per page), and with clean entries CPU 1 gets one flush IPI
 * per batch, not per page (before: about one per page).  Every member then
 * reads the data back.
 */
TEST(reclaim_flushes_members_once_per_batch)
{
	const int n = 256, members = 4;
	const size_t len = n * PAGE;
	struct pageout dirty, clean;
	pid_t m[3];
	struct ctl *c;
	struct chan ch;
	char set[32];
	volatile long *stop;
	char *p;
	int i;

	REQUIRE_COUNTERS();
	if (meminfo("SwapTotal") <= 0)
		SKIP(return, "no swap device");
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		SKIP(return, "one CPU");
	ASSERT_NE(NULL, c = ctl_map());
	/* One page table: MADV_PAGEOUT reclaims it as one list. */
	p = hp_aligned(len);
	ASSERT_NE(MAP_FAILED, p);
	ASSERT_EQ(0, madvise(p, len, MADV_NOHUGEPAGE));
	stop = hp_anon(PAGE);
	ASSERT_NE(MAP_FAILED, stop);
	fill(p, len, 31);
	*c = (struct ctl){ .addr = p, .len = len, .seed = 31, .bad = -1 };
	snprintf(set, sizeof(set), "%ld", newest_set());
	ASSERT_EQ(0, chan_open(&ch));
	for (i = 0; i < members - 1; i++) {
		m[i] = hp_spawn();
		ASSERT_GE(m[i], 0);
		if (m[i] == 0) {
			pin(1);
			tell_parent(&ch, 'r');
			while (!*stop)
				;
			_exit(check(c) < 0 ? 0 : 1);
		}
	}
	pin(0);
	for (i = 0; i < members - 1; i++)
		ASSERT_EQ('r', from_child(&ch));

	dirty = pageout(set, p, len);
	/* Read back here, on CPU 0: the entries come back clean. */
	EXPECT_EQ(-1, check(c));
	clean = pageout(set, p, len);
	EXPECT_EQ(-1, check(c));
	*stop = 1;
	for (i = 0; i < members - 1; i++)
		EXPECT_EQ(0, wait_status(m[i])) TH_LOG("member %d read wrong data", i);

	TH_LOG("%d members, MADV_PAGEOUT of %d dirty pages: %ld unmapped, %ld "
	       "swapped, %ld flushes of %ld members, %ld batched adds of %ld "
	       "members, %ld TLB IPIs to CPU 1", members, n, dirty.unmapped,
	       dirty.swapped, dirty.flushes, dirty.member_flushes, dirty.batched,
	       dirty.batched_members, dirty.ipis);
	TH_LOG("the same read back (clean): %ld unmapped, %ld swapped, %ld "
	       "flushes of %ld members, %ld batched adds of %ld members, %ld "
	       "TLB IPIs to CPU 1", clean.unmapped, clean.swapped, clean.flushes,
	       clean.member_flushes, clean.batched, clean.batched_members,
	       clean.ipis);
	/* Reclaim may skip a page it finds busy, never most of them. */
	ASSERT_GE(dirty.unmapped, n * 3 / 4);
	ASSERT_GE(clean.unmapped, n * 3 / 4);
	/*
	 * A flush of the set mm pending from an earlier batch may be done
	 * synchronously once per call (flush_tlb_batched_pending()).
	 */
	EXPECT_LE(dirty.member_flushes, members);
	EXPECT_LE(clean.member_flushes, members);
	/*
	 * One add per page unmapped from the set's tables: every such entry
	 * was present, so a CPU may cache it (pte_accessible()).  Counted by
	 * the range's Rss, not by swap use, which other tasks change too.
	 */
	EXPECT_EQ(dirty.unmapped, dirty.batched);
	EXPECT_EQ(clean.unmapped, clean.batched);
	EXPECT_EQ(members * dirty.batched, dirty.batched_members);
	EXPECT_EQ(members * clean.batched, clean.batched_members);
	/* One IPI per batch: 31 pages freed at a time. */
	EXPECT_LE(clean.ipis, n / 8);
	munmap(p, len);
}

static int node_count(void)
{
	return access("/sys/devices/system/node/node1", F_OK) == 0 ? 2 : 1;
}

/*
 * mbind(MPOL_MF_MOVE) moves the set's pages between the two nodes
 * (numa_maps of either member says where they are) and the other member
 * reads the same data after each move.  move_pages() resolves addresses in
 * the target's own mm only: for shared-range addresses every status is
 * -EFAULT and nothing moves (docs/design-mm.md, "Reclaim and page movement").
 */
TEST(migrate_between_numa_nodes)
{
	const int n = 64;
	const size_t len = n * PAGE;
	unsigned long mask = 1UL << 1;
	int status[64], nodes[64];
	void *pages[64];
	long on[2];
	struct ctl *c;
	struct chan ch;
	pid_t m;
	char *p;

	REQUIRE_HALFPROC();
	if (node_count() < 2)
		SKIP(return, "one NUMA node");
	ASSERT_NE(NULL, c = ctl_map());
	p = hp_anon(len);
	ASSERT_NE(MAP_FAILED, p);
	ASSERT_EQ(0, madvise(p, len, MADV_NOHUGEPAGE));
	fill(p, len, 23);
	*c = (struct ctl){ .addr = p, .len = len, .seed = 23, .bad = -1 };
	m = checker(&ch, c);
	ASSERT_GE(m, 0);

	/* All to node 1. */
	ASSERT_EQ(0, syscall(__NR_mbind, p, len, MPOL_BIND, &mask,
			     sizeof(mask) * 8, MPOL_MF_MOVE | MPOL_MF_STRICT));
	ASSERT_EQ(0, numa_pages(p, on));
	TH_LOG("after mbind to node 1: N0=%ld N1=%ld", on[0], on[1]);
	ASSERT_EQ(0, on[0]);
	ASSERT_EQ(n, on[1]);
	tell_child(&ch, 'v');
	ASSERT_EQ('y', from_child(&ch)) TH_LOG("page %ld wrong on node 1", c->bad);
	ASSERT_EQ(0, c->on[0]);
	ASSERT_EQ(n, c->on[1]);

	/* move_pages() does not reach the range: -EFAULT, nothing moves. */
	for (int i = 0; i < n; i++) {
		pages[i] = p + i * PAGE;
		nodes[i] = 0;
	}
	ASSERT_EQ(0, syscall(__NR_move_pages, 0, n, pages, NULL, status, 0));
	for (int i = 0; i < n; i++) {
		ASSERT_EQ(-EFAULT, status[i]) TH_LOG("page %d: query status", i);
	}
	ASSERT_EQ(0, syscall(__NR_move_pages, 0, n, pages, nodes, status,
			     MPOL_MF_MOVE));
	for (int i = 0; i < n; i++) {
		ASSERT_EQ(-EFAULT, status[i]) TH_LOG("page %d: move status", i);
	}
	ASSERT_EQ(0, numa_pages(p, on));
	ASSERT_EQ(n, on[1]);

	/* Back to node 0. */
	mask = 1UL << 0;
	ASSERT_EQ(0, syscall(__NR_mbind, p, len, MPOL_BIND, &mask,
			     sizeof(mask) * 8, MPOL_MF_MOVE | MPOL_MF_STRICT));
	ASSERT_EQ(0, numa_pages(p, on));
	ASSERT_EQ(n, on[0]);
	ASSERT_EQ(0, on[1]);
	tell_child(&ch, 'v');
	ASSERT_EQ('y', from_child(&ch)) TH_LOG("page %ld wrong on node 0", c->bad);
	ASSERT_EQ(n, c->on[0]);
	tell_child(&ch, 'q');
	EXPECT_EQ(0, wait_status(m));
	munmap(p, len);
}

/*
 * MADV_COLLAPSE turns the set's base pages into one PMD-mapped THP (smaps
 * of the range shows AnonHugePages); a second member reads it through its
 * own page tables; MADV_DONTNEED of one page splits the PMD again, and the
 * member sees the hole and every other page.
 */
TEST(thp_collapse_and_split)
{
	struct ctl *c;
	struct chan ch;
	pid_t m;
	char *p;
	int r;

	REQUIRE_HALFPROC();
	if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK))
		SKIP(return, "no THP");
	ASSERT_NE(NULL, c = ctl_map());
	p = hp_aligned(HPAGE);
	ASSERT_NE(MAP_FAILED, p);
	ASSERT_EQ(0, madvise(p, HPAGE, MADV_NOHUGEPAGE));
	fill(p, HPAGE, 31);
	ASSERT_EQ(0, smaps_kb(p, "AnonHugePages"));
	ASSERT_EQ(0, madvise(p, HPAGE, MADV_HUGEPAGE));
	r = madvise(p, HPAGE, MADV_COLLAPSE);
	ASSERT_EQ(0, r) TH_LOG("MADV_COLLAPSE: %s", strerror(errno));
	ASSERT_EQ(2048, smaps_kb(p, "AnonHugePages"));
	*c = (struct ctl){ .addr = p, .len = HPAGE, .seed = 31, .bad = -1 };
	m = checker(&ch, c);
	ASSERT_GE(m, 0);
	tell_child(&ch, 'v');
	ASSERT_EQ('y', from_child(&ch)) TH_LOG("page %ld wrong in the THP", c->bad);

	/* Split: drop page 1 of the huge page. */
	ASSERT_EQ(0, madvise(p + PAGE, PAGE, MADV_DONTNEED));
	ASSERT_EQ(0, smaps_kb(p, "AnonHugePages"));
	c->hole = p + PAGE;
	tell_child(&ch, 'v');
	ASSERT_EQ('y', from_child(&ch)) TH_LOG("page %ld wrong after split", c->bad);
	/* A member's write after the split is everyone's. */
	tell_child(&ch, 'w');
	ASSERT_EQ('y', from_child(&ch));
	ASSERT_EQ(7, *(unsigned long *)(p + 3 * PAGE + 8));
	tell_child(&ch, 'q');
	EXPECT_EQ(0, wait_status(m));
	munmap(p, HPAGE);
}

#define KHUGEPAGED "/sys/kernel/mm/transparent_hugepage/khugepaged/"

/*
 * khugepaged, not only MADV_COLLAPSE, collapses the range: MADV_HUGEPAGE
 * on the range (a meta-operation) registers the set mm with khugepaged,
 * whose scan finds the 512 base pages and makes one THP of them; a second
 * member reads every page through it.
 */
TEST(khugepaged_collapses_the_range)
{
	static const char *const knob[] = {
		KHUGEPAGED "scan_sleep_millisecs",
		KHUGEPAGED "alloc_sleep_millisecs",
		KHUGEPAGED "pages_to_scan",
	};
	long scans0, kb = 0, saved[3];
	char val[32];
	struct ctl *c;
	struct chan ch;
	pid_t m;
	char *p;
	int i;

	REQUIRE_HALFPROC();
	scans0 = file_long(KHUGEPAGED "full_scans");
	if (scans0 < 0)
		SKIP(return, "no khugepaged");
	for (i = 0; i < 3; i++)
		ASSERT_LE(0, saved[i] = file_long(knob[i]));
	ASSERT_NE(NULL, c = ctl_map());
	p = hp_aligned(HPAGE);
	ASSERT_NE(MAP_FAILED, p);
	ASSERT_EQ(0, madvise(p, HPAGE, MADV_NOHUGEPAGE));
	fill(p, HPAGE, 37);
	ASSERT_EQ(0, smaps_kb(p, "AnonHugePages"));
	ASSERT_EQ(0, sysfs_write(knob[0], "10"));
	ASSERT_EQ(0, sysfs_write(knob[1], "10"));
	ASSERT_EQ(0, madvise(p, HPAGE, MADV_HUGEPAGE));
	for (i = 0; i < 300; i++) {
		kb = smaps_kb(p, "AnonHugePages");
		if (kb == 2048)
			break;
		usleep(100000);
	}
	TH_LOG("khugepaged: AnonHugePages %ld kB after %d.%d s, %ld full scans",
	       kb, i / 10, i % 10, file_long(KHUGEPAGED "full_scans") - scans0);
	for (int k = 0; k < 3; k++) {
		snprintf(val, sizeof(val), "%ld", saved[k]);
		EXPECT_EQ(0, sysfs_write(knob[k], val));
	}
	ASSERT_EQ(2048, kb);
	*c = (struct ctl){ .addr = p, .len = HPAGE, .seed = 37, .bad = -1 };
	m = checker(&ch, c);
	ASSERT_GE(m, 0);
	tell_child(&ch, 'v');
	EXPECT_EQ('y', from_child(&ch)) TH_LOG("page %ld wrong in the THP", c->bad);
	tell_child(&ch, 'q');
	EXPECT_EQ(0, wait_status(m));
	munmap(p, HPAGE);
}

#define KSM "/sys/kernel/mm/ksm/"

/*
 * MADV_MERGEABLE on the range puts the set mm under KSM: its identical
 * pages are merged (pages_sharing grows), a second member reads them, and a
 * member's write breaks the merge for that page only (copy on write in the
 * set mm, seen by every member).
 */
TEST(ksm_merges_the_range)
{
	const int n = 64;
	const size_t len = n * PAGE;
	long sharing0, sharing = 0;
	struct ctl *c;
	struct chan ch;
	pid_t m;
	char *p;

	REQUIRE_HALFPROC();
	sharing0 = file_long(KSM "pages_sharing");
	if (sharing0 < 0)
		SKIP(return, "no KSM");
	ASSERT_NE(NULL, c = ctl_map());
	p = hp_anon(len);
	ASSERT_NE(MAP_FAILED, p);
	ASSERT_EQ(0, madvise(p, len, MADV_NOHUGEPAGE));
	fill(p, len, 0);
	ASSERT_EQ(0, madvise(p, len, MADV_MERGEABLE));
	ASSERT_EQ(0, sysfs_write(KSM "pages_to_scan", "1000"));
	ASSERT_EQ(0, sysfs_write(KSM "sleep_millisecs", "10"));
	ASSERT_EQ(0, sysfs_write(KSM "run", "1"));
	for (int i = 0; i < 300; i++) {
		sharing = file_long(KSM "pages_sharing") - sharing0;
		if (sharing >= n - 1)
			break;
		usleep(100000);
	}
	TH_LOG("KSM: %ld of %d identical range pages merged", sharing, n);
	EXPECT_GE(sharing, n / 2);
	*c = (struct ctl){ .addr = p, .len = len, .seed = 0, .bad = -1 };
	m = checker(&ch, c);
	ASSERT_GE(m, 0);
	tell_child(&ch, 'v');
	EXPECT_EQ('y', from_child(&ch)) TH_LOG("page %ld wrong merged", c->bad);
	/* Copy on write of a merged page, by the member. */
	tell_child(&ch, 'w');
	ASSERT_EQ('y', from_child(&ch));
	EXPECT_EQ(7, *(unsigned long *)(p + 3 * PAGE + 8));
	EXPECT_EQ(0x5a, p[4 * PAGE + 8]);
	EXPECT_EQ(0x5a, p[2 * PAGE + 8]);
	tell_child(&ch, 'q');
	EXPECT_EQ(0, wait_status(m));
	/* Unmerge everything and stop, as the guest started. */
	EXPECT_EQ(0, sysfs_write(KSM "run", "2"));
	munmap(p, len);
}

/*
 * userfaultfd: registering a shared-range region is refused with EINVAL
 * (design-mm.md: a userfaultfd context belongs to its creator's own mm; the
 * set's VMAs are not in it).  The refusal must come before anything is
 * registered: the region keeps working, for both members, without a handler.
 */
TEST(userfaultfd_on_the_range_is_refused)
{
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_register reg;
	const size_t len = 16 * PAGE;
	struct ctl *c;
	struct chan ch;
	pid_t m;
	char *p, *q;
	int fd;

	REQUIRE_HALFPROC();
	fd = syscall(__NR_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
	if (fd < 0 && errno == ENOSYS)
		SKIP(return, "no userfaultfd");
	ASSERT_GE(fd, 0);
	ASSERT_EQ(0, ioctl(fd, UFFDIO_API, &api));
	ASSERT_NE(NULL, c = ctl_map());
	p = hp_anon(len);
	ASSERT_NE(MAP_FAILED, p);
	reg = (struct uffdio_register){
		.range = { .start = (uintptr_t)p, .len = len },
		.mode = UFFDIO_REGISTER_MODE_MISSING,
	};
	errno = 0;
	ASSERT_EQ(-1, ioctl(fd, UFFDIO_REGISTER, &reg));
	ASSERT_EQ(EINVAL, errno);
	/* A private region in the same process registers fine. */
	q = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		 -1, 0);
	ASSERT_NE(MAP_FAILED, q);
	reg.range.start = (uintptr_t)q;
	ASSERT_EQ(0, ioctl(fd, UFFDIO_REGISTER, &reg));
	/* The range is untouched by the refusal. */
	fill(p, len, 41);
	*c = (struct ctl){ .addr = p, .len = len, .seed = 41, .bad = -1 };
	m = checker(&ch, c);
	ASSERT_GE(m, 0);
	tell_child(&ch, 'v');
	EXPECT_EQ('y', from_child(&ch)) TH_LOG("page %ld wrong", c->bad);
	tell_child(&ch, 'q');
	EXPECT_EQ(0, wait_status(m));
	close(fd);
	munmap(q, len);
	munmap(p, len);
}

/*
 * MAP_HUGETLB | MAP_HALFPROC: a hugetlb page in the range, from the pool
 * /init reserved; a second member reads and writes it.
 */
TEST(hugetlb_in_the_range)
{
	long free0, free1;
	struct ctl *c;
	struct chan ch;
	pid_t m;
	char *p;

	REQUIRE_HALFPROC();
	free0 = meminfo("HugePages_Free");
	if (free0 < 1)
		SKIP(return, "no free hugetlb pages");
	ASSERT_NE(NULL, c = ctl_map());
	p = hp_mmap(NULL, HPAGE, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB);
	ASSERT_NE(MAP_FAILED, p) TH_LOG("MAP_HUGETLB|MAP_HALFPROC: %s", strerror(errno));
	ASSERT_TRUE(in_range(p, HPAGE));
	fill(p, HPAGE, 53);
	free1 = meminfo("HugePages_Free");
	EXPECT_EQ(free0 - 1, free1);
	*c = (struct ctl){ .addr = p, .len = HPAGE, .seed = 53, .bad = -1 };
	m = checker(&ch, c);
	ASSERT_GE(m, 0);
	tell_child(&ch, 'v');
	EXPECT_EQ('y', from_child(&ch)) TH_LOG("page %ld wrong", c->bad);
	tell_child(&ch, 'w');
	ASSERT_EQ('y', from_child(&ch));
	EXPECT_EQ(7, *(unsigned long *)(p + 3 * PAGE + 8));
	tell_child(&ch, 'q');
	EXPECT_EQ(0, wait_status(m));
	ASSERT_EQ(0, munmap(p, HPAGE));
	EXPECT_EQ(free0, meminfo("HugePages_Free"));
}

TEST_HARNESS_MAIN
