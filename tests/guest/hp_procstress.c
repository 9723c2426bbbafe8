// SPDX-License-Identifier: GPL-2.0
/*
 * /proc readers against a busy set (issue 10, "Concurrency"): while three
 * members loop over meta-operations on the shared range (each takes the
 * set mm's lock for writing), a non-member and a member read every view
 * that takes that lock for a member: maps, smaps, smaps_rollup, pagemap
 * and the PAGEMAP_SCAN ioctl.  Every read must succeed with a sane answer,
 * every member must keep making progress, and the kernel must report
 * nothing (lockdep, KASAN and the harness's console check).
 */
#include "../lib/halfproc_test.h"
#include <time.h>
#include "kselftest_harness.h"
#include "../lib/hp_pagemap.h"

#define LOOPERS 3
#define SECONDS 4

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/*
 * A member that maps, touches, protects, advises and unmaps range pages
 * until killed, counting rounds in @rounds.  It keeps one page of its own
 * mapped (@mine) so readers always find some of the range.
 */
static pid_t start_looper(volatile unsigned long *rounds, volatile unsigned long *mine)
{
	pid_t pid = hp_spawn();
	char *keep;

	if (pid != 0)
		return pid;
	keep = hp_anon(PAGE);
	if (keep == MAP_FAILED)
		_exit(10);
	keep[0] = 1;
	*mine = (unsigned long)keep;
	for (;;) {
		char *p = hp_anon(8 * PAGE);

		if (p == MAP_FAILED)
			_exit(11);
		p[0] = 1;
		p[5 * PAGE] = 2;
		if (mprotect(p, 2 * PAGE, PROT_READ) ||
		    madvise(p + 4 * PAGE, 4 * PAGE, MADV_DONTNEED) ||
		    munmap(p, 8 * PAGE))
			_exit(12);
		(*rounds)++;
	}
}

/* Reads all of /proc/<pid>/<file>; its size, or -1. */
static long read_all(pid_t pid, const char *file)
{
	char path[64], buf[4096];
	long total = 0;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/%s", pid, file);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		total += n;
	close(fd);
	return n < 0 ? -1 : total;
}

/* PAGEMAP_SCAN of @pid's whole range: the regions found, or -1. */
static int scan_range(pid_t pid)
{
	struct page_region r[64];
	__u64 walk_end;

	return pagemap_scan(pid, HALFPROC_RANGE_START, HALFPROC_RANGE_END, r, 64, &walk_end);
}

struct tally {
	unsigned long reads, bad;
	int what;	/* the first view that failed (enum below), 0 if none */
};

enum view { MAPS = 1, SMAPS, ROLLUP, PAGEMAP, SCAN };

/*
 * Reads every view of every looper for SECONDS into @t.  A maps or smaps
 * file must be non-empty, smaps_rollup too, the looper's kept page must be
 * present in pagemap, and the scan must find at least that page.
 */
static void read_views(const pid_t *pids, const unsigned long *mine, struct tally *t)
{
	double end = now() + SECONDS;

	while (now() < end) {
		for (int i = 0; i < LOOPERS; i++) {
			int fail = 0;
			__u64 pm = 0;

			if (read_all(pids[i], "maps") <= 0)
				fail = MAPS;
			else if (read_all(pids[i], "smaps") <= 0)
				fail = SMAPS;
			else if (read_all(pids[i], "smaps_rollup") <= 0)
				fail = ROLLUP;
			else if (pagemap(pids[i], mine[i], &pm, 1) || !(pm & PM_PRESENT))
				fail = PAGEMAP;
			else if (scan_range(pids[i]) < 1)
				fail = SCAN;
			t->reads++;
			if (fail) {
				t->bad++;
				if (!t->what)
					t->what = fail;
			}
		}
	}
}

TEST(proc_views_while_members_hammer_the_set)
{
	volatile unsigned long *rounds = hp_anon(PAGE);
	volatile unsigned long *mine = rounds + 64;
	unsigned long before[LOOPERS], kept[LOOPERS];
	struct tally *t = mmap(NULL, PAGE, PROT_READ | PROT_WRITE,
			       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t pids[LOOPERS], outsider, member;

	REQUIRE_HALFPROC();
	ASSERT_NE(MAP_FAILED, (void *)rounds);
	ASSERT_NE(MAP_FAILED, t);
	for (int i = 0; i < LOOPERS; i++) {
		pids[i] = start_looper(rounds + i, mine + i);
		ASSERT_GT(pids[i], 0);
	}
	for (int i = 0; i < LOOPERS; i++) {
		while (rounds[i] < 10 || !mine[i]) {
			ASSERT_NE(pids[i], waitpid(pids[i], NULL, WNOHANG));
			usleep(1000);
		}
		before[i] = rounds[i];
		kept[i] = mine[i];
	}
	/*
	 * A plain process and a member of the set read at the same time (the
	 * plain one has no range: it gets the kept pages' addresses copied).
	 */
	outsider = fork();
	if (outsider == 0) {
		read_views(pids, kept, &t[0]);
		_exit(0);
	}
	member = hp_spawn();
	if (member == 0) {
		read_views(pids, kept, &t[1]);
		_exit(0);
	}
	ASSERT_GT(outsider, 0);
	ASSERT_GT(member, 0);
	EXPECT_EQ(0, wait_status(outsider));
	EXPECT_EQ(0, wait_status(member));
	for (int i = 0; i < LOOPERS; i++) {
		int st;

		TH_LOG("member %d: %lu meta-operation rounds while read", i, rounds[i] - before[i]);
		EXPECT_GT(rounds[i] - before[i], 0);
		kill(pids[i], SIGKILL);
		ASSERT_EQ(pids[i], waitpid(pids[i], &st, 0));
		/* Killed by us, not exited on an error of its own. */
		EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)
			TH_LOG("member %d exited with %d", i, WEXITSTATUS(st));
	}
	for (int r = 0; r < 2; r++) {
		TH_LOG("%s: %lu rounds of the 5 views of %d members, %lu bad (first: view %d)",
		       r ? "member" : "non-member", t[r].reads, LOOPERS, t[r].bad, t[r].what);
		EXPECT_GT(t[r].reads, 0);
		EXPECT_EQ(0, t[r].bad);
	}
}

TEST_HARNESS_MAIN
