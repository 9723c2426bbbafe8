// SPDX-License-Identifier: GPL-2.0
/*
 * /proc views of the shared range beyond maps and smaps (issue 10, defect
 * 6; docs/design-mm.md "/proc"): the PROCMAP_QUERY ioctl on a member's
 * maps finds the set's VMAs as maps lists them, pagemap shows the set's
 * pages as present (with the PFN the other members see), and
 * smaps_rollup sums the set's mappings with the member's own, and the
 * PAGEMAP_SCAN ioctl finds the set's present pages in runs.  Each is
 * read by a non-member and by a second member of the set.  A reader of
 * each, blocked on the set mm's lock behind a long meta-operation of
 * another member, dies of SIGKILL at once (patch 0030's rule for maps).
 */
#include "../lib/halfproc_test.h"
#include <sys/prctl.h>
#include <time.h>
#include "kselftest_harness.h"
#include "../lib/hp_blocked.h"
#include "../lib/hp_pagemap.h"

#define NPAGES		8	/* the read-write mapping; pages 0, 2, 5 touched */
#define NRO		2	/* the read-only mapping after it */
#define TOP		(1UL << 47)	/* the gate VMA above is not in the tree */

struct line {
	unsigned long start, end;
	char perm[5];
};

/* The VMAs of /proc/<pid>/maps below TOP; their number, or -1. */
static int read_maps(pid_t pid, struct line *l, int max)
{
	char path[64], buf[512];
	int n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (n < max && fgets(buf, sizeof(buf), f)) {
		if (sscanf(buf, "%lx-%lx %4s", &l[n].start, &l[n].end,
			   l[n].perm) == 3 && l[n].start < TOP)
			n++;
	}
	fclose(f);
	return n;
}

static __u64 perm_flags(const char *perm)
{
	return (perm[0] == 'r' ? PROCMAP_QUERY_VMA_READABLE : 0) |
	       (perm[1] == 'w' ? PROCMAP_QUERY_VMA_WRITABLE : 0) |
	       (perm[2] == 'x' ? PROCMAP_QUERY_VMA_EXECUTABLE : 0) |
	       (perm[3] == 's' ? PROCMAP_QUERY_VMA_SHARED : 0);
}

/* What PROCMAP_QUERY should answer per maps: the line's index or -1. */
static int expect(const struct line *l, int n, unsigned long addr,
		  __u64 flags)
{
	__u64 need = flags & (PROCMAP_QUERY_VMA_READABLE |
			      PROCMAP_QUERY_VMA_WRITABLE |
			      PROCMAP_QUERY_VMA_EXECUTABLE |
			      PROCMAP_QUERY_VMA_SHARED);
	int i;

	for (i = 0; i < n; i++) {
		if (l[i].end <= addr)
			continue;
		if ((perm_flags(l[i].perm) & need) == need &&
		    (l[i].start <= addr ||
		     (flags & PROCMAP_QUERY_COVERING_OR_NEXT_VMA)))
			return i;
		if (!(flags & PROCMAP_QUERY_COVERING_OR_NEXT_VMA))
			return -1;
	}
	return -1;
}

/*
 * PROCMAP_QUERY on /proc/<pid>/maps agrees with what maps lists, at
 * addresses below, in and above the range's VMAs (@rw: the read-write
 * mapping, the read-only one follows it).  0, or the failing step.
 */
static int query_agrees(pid_t pid, unsigned long rw)
{
	const __u64 how[] = { 0, PROCMAP_QUERY_COVERING_OR_NEXT_VMA,
		PROCMAP_QUERY_COVERING_OR_NEXT_VMA | PROCMAP_QUERY_VMA_WRITABLE };
	unsigned long at[] = { HALFPROC_RANGE_START - PAGE,
		HALFPROC_RANGE_START, rw, rw + 3 * PAGE, rw + NPAGES * PAGE,
		rw + (NPAGES + NRO) * PAGE, HALFPROC_RANGE_END - PAGE };
	struct procmap_query q;
	static struct line l[512];
	unsigned int a, h;
	char path[64];
	int n, fd, i;

	n = read_maps(pid, l, 512);
	if (n < 0)
		return 1;
	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return 2;
	for (a = 0; a < sizeof(at) / sizeof(at[0]); a++) {
		for (h = 0; h < sizeof(how) / sizeof(how[0]); h++) {
			memset(&q, 0, sizeof(q));
			q.size = sizeof(q);
			q.query_addr = at[a];
			q.query_flags = how[h];
			i = expect(l, n, at[a], how[h]);
			if (ioctl(fd, PROCMAP_QUERY, &q)) {
				if (errno == ENOTTY) {
					close(fd);
					return -1;
				}
				if (i < 0 && errno == ENOENT)
					continue;
				printf("# query %#lx flags %#llx: %s; maps: %lx-%lx %s\n",
				       at[a], (unsigned long long)how[h],
				       strerror(errno), i < 0 ? 0 : l[i].start,
				       i < 0 ? 0 : l[i].end, i < 0 ? "none" : l[i].perm);
				close(fd);
				return 3;
			}
			if (i < 0 || q.vma_start != l[i].start ||
			    q.vma_end != l[i].end ||
			    q.vma_flags != perm_flags(l[i].perm)) {
				printf("# query %#lx flags %#llx: %llx-%llx flags %#llx; maps: %lx-%lx %s\n",
				       at[a], (unsigned long long)how[h],
				       (unsigned long long)q.vma_start,
				       (unsigned long long)q.vma_end,
				       (unsigned long long)q.vma_flags,
				       i < 0 ? 0 : l[i].start,
				       i < 0 ? 0 : l[i].end, i < 0 ? "none" : l[i].perm);
				close(fd);
				return 4;
			}
		}
	}
	close(fd);
	return 0;
}

static int touched(int i)
{
	return i == 0 || i == 2 || i == 5;
}

/*
 * pagemap of @pid: the touched pages of @rw present, the others not, with
 * the PFNs in @pfn (for root; 0 where not present), and across the range's
 * lower boundary as one read.  0, or the failing step.
 */
static int pagemap_agrees(pid_t pid, unsigned long rw, __u64 *pfn)
{
	__u64 pm[NPAGES];
	int i;

	if (pagemap(pid, rw, pm, NPAGES))
		return 1;
	for (i = 0; i < NPAGES; i++) {
		if (!!(pm[i] & PM_PRESENT) != touched(i)) {
			printf("# pid %d page %d (%s): pagemap %#llx\n", pid, i,
			       touched(i) ? "touched" : "untouched",
			       (unsigned long long)pm[i]);
			return 2;
		}
		pfn[i] = pm[i] & PM_PRESENT ? pm[i] & PM_PFN_MASK : 0;
		if (touched(i) && !geteuid() && !pfn[i])
			return 3;
	}
	return 0;
}

/* Rss of /proc/<pid>/smaps_rollup, and the sum of smaps' Rss lines, kB. */
static int rss_kb(pid_t pid, long *rollup, long *sum)
{
	char path[64], buf[512];
	FILE *f;

	*rollup = -1;
	*sum = 0;
	snprintf(path, sizeof(path), "/proc/%d/smaps", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(buf, sizeof(buf), f))
		if (!strncmp(buf, "Rss:", 4))
			*sum += strtol(buf + 4, NULL, 10);
	fclose(f);
	snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(buf, sizeof(buf), f))
		if (!strncmp(buf, "Rss:", 4))
			*rollup = strtol(buf + 4, NULL, 10);
	fclose(f);
	return *rollup < 0 ? -1 : 0;
}

/*
 * A set of two members: the creator @a with a read-write mapping of
 * NPAGES (pages 0, 2 and 5 written) and a read-only one of NRO after it in
 * the range (@addr: the read-write one), waiting; and @b, which runs the
 * checks it is sent as a member of the set (through @cb).
 */
struct set2 {
	pid_t a, b;
	unsigned long addr;
	struct chan c, cb;
};

static int check(struct set2 *s, char cmd);

static void member_serves(struct set2 *s)
{
	char cmd;

	s->a = getppid();
	s->b = getpid();
	while ((cmd = from_parent(&s->cb)))
		tell_parent(&s->cb, check(s, cmd));
	_exit(0);
}

static int set2_start(struct set2 *s)
{
	char *p;

	if (chan_open(&s->c) || chan_open(&s->cb))
		return -1;
	s->a = fork();
	if (s->a == 0) {
		p = hp_anon((NPAGES + NRO) * PAGE);
		if (p == MAP_FAILED ||
		    mprotect(p + NPAGES * PAGE, NRO * PAGE, PROT_READ))
			_exit(1);
		p[0] = p[2 * PAGE] = p[5 * PAGE] = 1;
		s->addr = (unsigned long)p;
		s->b = hp_spawn();
		if (s->b == 0)
			member_serves(s);
		if (write(s->c.up[1], &s->addr, sizeof(s->addr)) != sizeof(s->addr) ||
		    write(s->c.up[1], &s->b, sizeof(s->b)) != sizeof(s->b))
			_exit(2);
		from_parent(&s->c);
		_exit(wait_status(s->b));
	}
	if (s->a < 0 ||
	    read(s->c.up[0], &s->addr, sizeof(s->addr)) != sizeof(s->addr) ||
	    read(s->c.up[0], &s->b, sizeof(s->b)) != sizeof(s->b))
		return -1;
	return 0;
}

/* check() @cmd, run by member b. */
static int in_member(struct set2 *s, char cmd)
{
	tell_child(&s->cb, cmd);
	return from_child(&s->cb);
}

static int set2_stop(struct set2 *s)
{
	tell_child(&s->cb, 0);
	tell_child(&s->c, 0);
	return wait_status(s->a);
}

static int query_both(struct set2 *s)
{
	int r = query_agrees(s->a, s->addr);

	return r ? r : query_agrees(s->b, s->addr) * 10;
}

static int pagemap_both(struct set2 *s)
{
	__u64 pa[NPAGES], pb[NPAGES], priv = 1;
	int r, i;

	r = pagemap_agrees(s->a, s->addr, pa);
	if (r)
		return r;
	r = pagemap_agrees(s->b, s->addr, pb);
	if (r)
		return r + 10;
	for (i = 0; i < NPAGES; i++)
		if (pa[i] != pb[i])
			return 20 + i;
	/* One read across 2^45: nothing mapped below it, nor at it. */
	if (pagemap(s->a, HALFPROC_RANGE_START - PAGE, pa, 2))
		return 30;
	if ((pa[0] | pa[1]) & PM_PRESENT)
		return 31;
	/* A private page of the reader's, the reference. */
	if (pagemap(getpid(), (unsigned long)&priv, pa, 1) ||
	    !(pa[0] & PM_PRESENT))
		return 32;
	return 0;
}

/* Whether @r holds the touched pages of @rw, one region each (0, 2, 5). */
static int touched_regions(const struct page_region *r, int n, unsigned long rw)
{
	static const int pg[] = { 0, 2, 5 };
	int i;

	if (n != 3)
		return 0;
	for (i = 0; i < 3; i++)
		if (r[i].start != rw + pg[i] * PAGE ||
		    r[i].end != rw + (pg[i] + 1) * PAGE)
			return 0;
	return 1;
}

/*
 * PAGEMAP_SCAN of @pid: the touched pages of @rw, also from below 2^45
 * (one scan crossing it), and with room for one region at a time (it
 * stops at the next one and goes on from there).  0, -1 (no ioctl), or
 * the failing step.
 */
static int scan_agrees(pid_t pid, unsigned long rw)
{
	unsigned long end = rw + NPAGES * PAGE;
	struct page_region r[8];
	__u64 we;
	int n;

	n = pagemap_scan(pid, rw, end, r, 8, &we);
	if (n < 0)
		return n == -1 ? -1 : 1;
	if (!touched_regions(r, n, rw) || we != end) {
		printf("# pid %d: %d regions, walk_end %#llx\n", pid, n,
		       (unsigned long long)we);
		return 2;
	}
	n = pagemap_scan(pid, HALFPROC_RANGE_START - PAGE, end, r, 8, &we);
	if (!touched_regions(r, n, rw) || we != end) {
		printf("# pid %d across 2^45: %d regions, walk_end %#llx\n",
		       pid, n, (unsigned long long)we);
		return 3;
	}
	n = pagemap_scan(pid, HALFPROC_RANGE_START - PAGE, end, r, 1, &we);
	if (n != 1 || r[0].start != rw || we != rw + 2 * PAGE)
		return 4;
	n = pagemap_scan(pid, we, end, r, 1, &we);
	if (n != 1 || r[0].start != rw + 2 * PAGE || we != rw + 5 * PAGE)
		return 5;
	return 0;
}

static int scan_both(struct set2 *s)
{
	int r = scan_agrees(s->a, s->addr);

	return r ? r : scan_agrees(s->b, s->addr) * 10;
}

static int rollup_one(pid_t pid)
{
	long roll, sum;

	if (rss_kb(pid, &roll, &sum))
		return 1;
	if (roll != sum) {
		printf("# pid %d: smaps_rollup Rss %ld kB, smaps' Rss lines %ld kB\n",
		       pid, roll, sum);
		return 2;
	}
	return 0;
}

static int rollup_both(struct set2 *s)
{
	int r = rollup_one(s->a);

	return r ? r : rollup_one(s->b) * 10;
}

/* Check @cmd: 1 PROCMAP_QUERY, 2 pagemap, 3 smaps_rollup, 4 PAGEMAP_SCAN. */
static int check(struct set2 *s, char cmd)
{
	switch (cmd) {
	case 1:
		return query_both(s);
	case 2:
		return pagemap_both(s);
	case 3:
		return rollup_both(s);
	default:
		return scan_both(s);
	}
}

/* @cmd run by a non-member (this process), then by member b. */
static int run_check(struct __test_metadata *_metadata, char cmd)
{
	struct set2 s;
	int r, rb;

	if (set2_start(&s))
		return -2;
	r = check(&s, cmd);
	if (r)
		printf("# read by a non-member: step %d\n", r);
	rb = r == -1 ? 0 : in_member(&s, cmd);
	if (rb)
		printf("# read by the second member: step %d\n", rb);
	if (set2_stop(&s))
		return -3;
	return r ? r : rb;
}

/* PROCMAP_QUERY at addresses below, in and above the range's VMAs. */
TEST(procmap_query_finds_the_sets_vmas)
{
	int r;

	REQUIRE_HALFPROC();
	r = run_check(_metadata, 1);
	if (r == -1)
		SKIP(return, "no PROCMAP_QUERY (before 6.11)");
	EXPECT_EQ(0, r);
}

/* Touched range pages present with one PFN for both members. */
TEST(pagemap_shows_the_sets_pages)
{
	REQUIRE_HALFPROC();
	EXPECT_EQ(0, run_check(_metadata, 2));
}

/* smaps_rollup's Rss is the sum of the Rss of smaps' entries. */
TEST(smaps_rollup_sums_the_sets_mappings)
{
	REQUIRE_HALFPROC();
	EXPECT_EQ(0, run_check(_metadata, 3));
}

/* The touched range pages in runs, also across 2^45 and a page at a time. */
TEST(pagemap_scan_finds_the_sets_pages)
{
	int r;

	REQUIRE_HALFPROC();
	r = run_check(_metadata, 4);
	if (r == -1)
		SKIP(return, "no PAGEMAP_SCAN (before 6.7)");
	EXPECT_EQ(0, r);
}

enum reader { QUERY, PAGEMAP, ROLLUP };

struct reading {
	enum reader how;
	char *p;
};

/* A reader of the test process's @how view of @p, for ever. */
static pid_t view_reader(void *arg)
{
	const char *file[] = { "maps", "pagemap", "smaps_rollup" };
	struct reading *rd = arg;
	struct procmap_query q;
	char path[64], buf[4096];
	pid_t pid = fork();
	int fd;

	if (pid != 0)
		return pid;
	snprintf(path, sizeof(path), "/proc/%d/%s", getppid(), file[rd->how]);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		_exit(1);
	for (;;) {
		if (rd->how == QUERY) {
			memset(&q, 0, sizeof(q));
			q.size = sizeof(q);
			q.query_addr = (unsigned long)rd->p;
			ioctl(fd, PROCMAP_QUERY, &q);
		} else if (rd->how == PAGEMAP) {
			pread(fd, buf, 8, (unsigned long)rd->p / PAGE * 8);
		} else {
			pread(fd, buf, sizeof(buf), 0);
		}
	}
}

/* Up to 3 x BLOCKED_TRIES long mprotect()s: more than the default 30 s. */
FIXTURE(slow) {};
FIXTURE_SETUP(slow) {}
FIXTURE_TEARDOWN(slow) {}

/*
 * As hp_mmstate's proc_maps_reader_is_killable_behind_a_long_meta_operation
 * for maps (tests/lib/hp_blocked.h): a reader of each view of a member,
 * blocked on the set mm's lock behind another member's long mprotect(),
 * must die of SIGKILL while that mprotect() still runs.
 */
TEST_F_TIMEOUT(slow, proc_views_are_killable_behind_a_long_meta_operation, 300)
{
	const char *name[] = { "PROCMAP_QUERY", "pagemap", "smaps_rollup" };
	int r, counted, late, tries;
	struct blocked b;

	REQUIRE_HALFPROC();
	r = blocked_start(&b);
	ASSERT_LE(0, r);
	if (r > 0)
		SKIP(return, "mprotect() of %lu MiB takes %.1f ms: too short to tell",
		     BLOCKED_BIG >> 20, b.hold_ms);
	for (enum reader how = QUERY; how <= ROLLUP; how++) {
		struct reading rd = { how, b.p };

		tries = blocked_rounds(&b, view_reader, &rd, &counted, &late);
		TH_LOG("%s: mprotect() of %lu MiB holds the set mm's lock %.1f ms; %d of %d kills hit a blocked reader, %d of those were seen only after the mprotect() ended",
		       name[how], BLOCKED_BIG >> 20, b.hold_ms, counted, tries, late);
		EXPECT_EQ(BLOCKED_ROUNDS, counted);
		EXPECT_EQ(0, late);
	}
	ASSERT_EQ(0, blocked_stop(&b));
}

TEST_HARNESS_MAIN
