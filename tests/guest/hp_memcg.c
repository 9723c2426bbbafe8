// SPDX-License-Identifier: GPL-2.0
/*
 * The set's memory cgroup.  The shared range's pages are charged to the
 * memcg its creator was in when the set was created (docs/design-mm.md,
 * "Memory cgroup"), whoever faults them and whether or not the creator still
 * lives.  A set mm has no owner task: before, it kept the creator as owner
 * after the creator was reaped, and the next fault in the range charged
 * through the freed task_struct (a general protection fault in task_css()).
 *
 * A member's own mm keeps an owner too: when its owner thread exits while
 * another thread is switched to the set mm, the hand-off must still find
 * that thread (it looks at the thread's own mm, not the set mm it runs on).
 *
 * creator_reaped_then_member_faults runs without cgroups too (any MEMCG
 * kernel charges every fault); the cgroup checks SKIP where the cgroup v2
 * memory controller is absent.
 */
#include "../lib/halfproc_test.h"
#include "../lib/hp_cgroup.h"
#include <poll.h>
#include <pthread.h>
#include <sys/prctl.h>
#include "kselftest_harness.h"

#define MB (1UL << 20)
/* Per-CPU charge stocks make memory.current run ahead by up to 64 pages. */
#define SLACK (1 * MB)

/* A fresh cgroup under the root; its path goes to @cg. */
static int cg_make(char *cg, size_t len, const char *tag)
{
	return cg_make_in(cg, len, CG, "hp_memcg", tag);
}

/* Touch @len bytes at @p, one write per page; 0 if the pattern reads back. */
static int touch(char *p, size_t len, char v)
{
	for (size_t i = 0; i < len; i += PAGE)
		p[i] = v;
	for (size_t i = 0; i < len; i += PAGE)
		if (p[i] != v)
			return -1;
	return 0;
}

/*
 * The creator makes the set and a member, then exits and is reaped; only
 * then does the member fault fresh pages in the range.  With a cgroup, the
 * creator was in it, and the pages are still charged there.
 */
TEST(creator_reaped_then_member_faults)
{
	char cg[128] = "";
	struct chan c;
	pid_t creator, member;
	long before = 0, after;
	int pidp[2];
	char r;

	REQUIRE_HALFPROC();
	if (memcg_available())
		ASSERT_EQ(0, cg_make(cg, sizeof(cg), "reaped"));
	/* The member is reparented to us when the creator exits. */
	ASSERT_EQ(0, prctl(PR_SET_CHILD_SUBREAPER, 1));
	ASSERT_EQ(0, chan_open(&c));
	/* The creator says who the member is on a pipe of its own. */
	ASSERT_EQ(0, pipe(pidp));
	creator = hp_clone(0);
	ASSERT_GE(creator, 0);
	if (creator == 0) {
		char *p;
		pid_t m;

		if (cg[0] && cg_write(cg, "cgroup.procs", "0"))
			_exit(10);
		/* This process starts the set and touches none of it. */
		p = hp_anon(16 * MB);
		if (p == MAP_FAILED)
			_exit(11);
		m = hp_spawn();
		if (m == 0) {
			char *q;

			/* Go only when the creator is reaped and freed. */
			if (from_parent(&c) != 'g')
				_exit(20);
			usleep(300000);	/* past an RCU grace period */
			if (touch(p, 16 * MB, 'm'))
				_exit(21);
			q = hp_anon(4 * MB);
			if (q == MAP_FAILED || touch(q, 4 * MB, 'n'))
				_exit(22);
			tell_parent(&c, 'd');
			if (from_parent(&c) != 'q')
				_exit(23);
			_exit(0);
		}
		if (m < 0)
			_exit(12);
		if (write(pidp[1], &m, sizeof(m)) != sizeof(m))
			_exit(13);
		_exit(0);
	}
	ASSERT_EQ(sizeof(member), read(pidp[0], &member, sizeof(member)));
	ASSERT_EQ(0, wait_status(creator));
	if (cg[0])
		before = cg_read(cg, "memory.current", NULL);
	tell_child(&c, 'g');
	r = from_child(&c);
	ASSERT_EQ('d', r);
	if (cg[0]) {
		after = cg_read(cg, "memory.current", NULL);
		TH_LOG("creator's cgroup, creator gone: memory.current %ld -> %ld",
		       before, after);
		/* 16 + 4 MiB of shared pages, charged to the creator's cgroup. */
		EXPECT_GE(after - before, (long)(20 * MB - SLACK));
	}
	tell_child(&c, 'q');
	ASSERT_EQ(0, wait_status(member));
	if (cg[0])
		cg_remove(cg);
}

/*
 * The creator in cgroup A, a member in cgroup B.  The member's faults in the
 * range are charged to A, not B.  Beyond A's memory.max the memcg OOM killer
 * runs in A and kills the creator, the only task there; the member's fault
 * cannot be charged (nothing left to kill in A) and is retried until the
 * member is killed: it never gets memory beyond A's limit.
 */
TEST(shared_pages_charge_the_set_cgroup)
{
	const size_t first = 4 * MB, total = 64 * MB, max = 16 * MB;
	char a[128], b[128], v[32], sw[192];
	long a0, b0, a1, b1, oom0;
	struct chan c;
	pid_t creator, member;
	int pidp[2], st;

	REQUIRE_HALFPROC();
	if (!memcg_available())
		SKIP(return, "no cgroup v2 memory controller");
	ASSERT_EQ(0, cg_make(a, sizeof(a), "a"));
	ASSERT_EQ(0, cg_make(b, sizeof(b), "b"));
	snprintf(v, sizeof(v), "%zu", max);
	ASSERT_EQ(0, cg_write(a, "memory.max", v));
	/*
	 * No swap for A: with a swap device (the guest's zram, which
	 * halfproc.only runs set up) A would swap past its limit instead of
	 * reaching the OOM killer, slowly enough under TCG to time out.
	 */
	snprintf(sw, sizeof(sw), "%s/memory.swap.max", a);
	if (!access(sw, F_OK))
		ASSERT_EQ(0, cg_write(a, "memory.swap.max", "0"));
	ASSERT_EQ(0, prctl(PR_SET_CHILD_SUBREAPER, 1));
	ASSERT_EQ(0, chan_open(&c));
	/* The creator says who the member is on a pipe of its own. */
	ASSERT_EQ(0, pipe(pidp));
	creator = hp_clone(0);
	ASSERT_GE(creator, 0);
	if (creator == 0) {
		char *p;
		pid_t m;

		if (cg_write(a, "cgroup.procs", "0"))
			_exit(10);
		p = hp_anon(total);
		if (p == MAP_FAILED)
			_exit(11);
		m = hp_spawn();
		if (m == 0) {
			if (cg_write(b, "cgroup.procs", "0"))
				_exit(20);
			tell_parent(&c, 'r');
			if (from_parent(&c) != '1' || touch(p, first, 'x'))
				_exit(21);
			tell_parent(&c, 'a');
			if (from_parent(&c) != '2')
				_exit(22);
			/* Over A's limit: must not complete. */
			touch(p, total, 'y');
			tell_parent(&c, 'd');
			_exit(0);
		}
		if (m < 0 || write(pidp[1], &m, sizeof(m)) != sizeof(m))
			_exit(12);
		pause();	/* until the OOM killer or we kill it */
		_exit(0);
	}
	ASSERT_EQ(sizeof(member), read(pidp[0], &member, sizeof(member)));
	ASSERT_EQ('r', from_child(&c));
	a0 = cg_read(a, "memory.current", NULL);
	b0 = cg_read(b, "memory.current", NULL);
	oom0 = cg_read(a, "memory.events", "oom_kill");
	tell_child(&c, '1');
	ASSERT_EQ('a', from_child(&c));
	a1 = cg_read(a, "memory.current", NULL);
	b1 = cg_read(b, "memory.current", NULL);
	TH_LOG("member faulted %zu MiB: A (creator) %ld -> %ld, B (member) %ld -> %ld",
	       first / MB, a0, a1, b0, b1);
	EXPECT_GE(a1 - a0, (long)(first - SLACK));
	EXPECT_LT(b1 - b0, (long)SLACK);

	/* Over the limit of the set's cgroup. */
	tell_child(&c, '2');
	ASSERT_EQ(creator, waitpid(creator, &st, 0));
	EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	EXPECT_GE(cg_read(a, "memory.events", "oom_kill"), oom0 + 1);
	EXPECT_LE(cg_read(a, "memory.current", NULL), (long)max);
	EXPECT_LT(cg_read(b, "memory.current", NULL) - b0, (long)SLACK);
	{
		struct pollfd pfd = { .fd = c.up[0], .events = POLLIN };

		/*
		 * The member is still retrying its fault, not done (each retry
		 * prints an OOM report: keep the wait short).
		 */
		EXPECT_EQ(0, poll(&pfd, 1, 1000));
	}
	ASSERT_EQ(0, kill(member, SIGKILL));
	ASSERT_EQ(member, waitpid(member, &st, 0));
	EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	cg_remove(a);
	cg_remove(b);
}

/*
 * Whether this process's leader thread has exited: a zombie leader stays
 * counted in Threads until the whole group ends, so read its own state.
 */
static int leader_gone(void)
{
	char path[64], line[128];
	int gone = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/status", getpid());
	f = fopen(path, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "State:", 6)) {
			gone = strchr(line, 'Z') != NULL || strchr(line, 'X') != NULL;
			break;
		}
	fclose(f);
	return gone;
}

struct owner_run {
	struct chan *c;
};

/*
 * The second thread: meta-operations on the range (switched to the set mm
 * for each) until the leader is gone, then 16 MiB of private memory,
 * charged through the mm's owner.
 */
static void *switch_then_fault(void *arg)
{
	struct owner_run *r = arg;
	char *priv;

	while (!leader_gone()) {
		char *q = hp_anon(PAGE);

		if (q == MAP_FAILED || mprotect(q, PAGE, PROT_READ) || munmap(q, PAGE))
			_exit(30);
	}
	tell_parent(r->c, 'x');
	if (from_parent(r->c) != 'g')
		_exit(31);
	priv = mmap(NULL, 16 * MB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (priv == MAP_FAILED || touch(priv, 16 * MB, 'o'))
		_exit(32);
	tell_parent(r->c, 'd');
	_exit(from_parent(r->c) == 'q' ? 0 : 33);
}

/*
 * A member in cgroup A: its leader exits while the other thread loops over
 * meta-operations on the range, so the hand-off of the mm's owner often
 * runs while that thread is switched.  The thread's private faults after
 * that must still be charged to A (with no owner found they would go to
 * the root cgroup).  Several rounds, for the window.
 */
TEST(owner_hand_off_while_a_thread_is_switched)
{
	char a[128];
	int round;

	REQUIRE_HALFPROC();
	if (!memcg_available())
		SKIP(return, "no cgroup v2 memory controller");
	ASSERT_EQ(0, cg_make(a, sizeof(a), "owner"));
	for (round = 0; round < 6; round++) {
		/* Static: the thread outlives the leader's stack frame. */
		static struct owner_run r;
		static struct chan c;
		long a0, a1;
		pid_t m;

		ASSERT_EQ(0, chan_open(&c));
		r.c = &c;
		m = hp_spawn();
		ASSERT_GE(m, 0);
		if (m == 0) {
			pthread_t t;

			if (cg_write(a, "cgroup.procs", "0"))
				_exit(20);
			if (pthread_create(&t, NULL, switch_then_fault, &r))
				_exit(21);
			usleep(1000 * (round % 3));
			pthread_exit(NULL);
		}
		ASSERT_EQ('x', from_child(&c)) TH_LOG("round %d", round);
		a0 = cg_read(a, "memory.current", NULL);
		tell_child(&c, 'g');
		ASSERT_EQ('d', from_child(&c));
		a1 = cg_read(a, "memory.current", NULL);
		TH_LOG("round %d: 16 MiB faulted after the leader left: A %ld -> %ld",
		       round, a0, a1);
		EXPECT_GE(a1 - a0, (long)(16 * MB - SLACK));
		tell_child(&c, 'q');
		ASSERT_EQ(0, wait_status(m));
		close(c.up[0]);
		close(c.up[1]);
		close(c.down[0]);
		close(c.down[1]);
	}
	cg_remove(a);
}

TEST_HARNESS_MAIN
