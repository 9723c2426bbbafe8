// SPDX-License-Identifier: GPL-2.0
/*
 * prctl(PR_HALFPROC): a member's own fork() makes a member when it asked
 * for it (the calling thread's next fork, PR_HALFPROC_FORK_MEMBER), or every
 * child of a process does, across exec and down the tree
 * (PR_HALFPROC_INHERIT), so libc's fork(), posix_spawn() and unmodified
 * programs that fork workers keep them in the set.
 */
#include "../lib/halfproc_test.h"
#include <pthread.h>
#include <spawn.h>
#include <sys/prctl.h>
#include "kselftest_harness.h"

#ifndef PR_HALFPROC
#define PR_HALFPROC			0x48504353
#define PR_HALFPROC_FORK_MEMBER		1
#define PR_HALFPROC_INHERIT		2
#define PR_HALFPROC_GET			3
#define PR_HALFPROC_IS_MEMBER		(1UL << 0)
#define PR_HALFPROC_IS_INHERITING	(1UL << 1)
#define PR_HALFPROC_IS_FORK_PENDING	(1UL << 2)
#endif

#define MARK "inherited membership"

extern char **environ;
static const char *self_exe;
static char *marked_page_for_threads;

static long hp_prctl(unsigned long op, unsigned long a3, unsigned long a4)
{
	return prctl(PR_HALFPROC, op, a3, a4, 0);
}

/* prctl(PR_HALFPROC, op, a3, a4) must fail with errno @err. */
#define ASSERT_PRCTL_FAILS(err, op, a3, a4) do {			\
	errno = 0;							\
	ASSERT_EQ(-1, hp_prctl(op, a3, a4));				\
	ASSERT_EQ(err, errno);						\
} while (0)

/* A page in the shared range holding MARK; makes the caller a member. */
static char *marked_page(void)
{
	char *p = hp_anon(PAGE);

	if (p != MAP_FAILED)
		strcpy(p, MARK);
	return p;
}

/* In a child: 0 if it sees @p (a member), 3 if the range is empty there. */
static int member_sees(const char *p)
{
	char c;

	if (probe_read(p, &c))
		return 3;
	return strcmp(p, MARK) ? 4 : 0;
}

/* fork() through libc; the child reports member_sees(p). */
static int libc_fork_sees(const char *p)
{
	pid_t pid = fork();

	if (pid == 0)
		_exit(member_sees(p));
	return pid < 0 ? -1 : wait_status(pid);
}

TEST(prctl_errors)
{
	REQUIRE_HALFPROC();
	/* Outside any set: no bits, and turning things off is a no-op. */
	ASSERT_EQ(0, hp_prctl(PR_HALFPROC_GET, 0, 0));
	ASSERT_EQ(0, hp_prctl(PR_HALFPROC_INHERIT, 0, 0));
	ASSERT_EQ(0, hp_prctl(PR_HALFPROC_FORK_MEMBER, 0, 0));
	ASSERT_EQ(0, hp_prctl(PR_HALFPROC_GET, 0, 0));
	ASSERT_PRCTL_FAILS(EINVAL, 99, 0, 0);
	ASSERT_PRCTL_FAILS(EINVAL, PR_HALFPROC_FORK_MEMBER, 2, 0);
	ASSERT_PRCTL_FAILS(EINVAL, PR_HALFPROC_INHERIT, 1, 1);
	ASSERT_PRCTL_FAILS(EINVAL, PR_HALFPROC_GET, 1, 0);
	/* Still no set: failed calls change nothing. */
	ASSERT_EQ(0, hp_prctl(PR_HALFPROC_GET, 0, 0));
}

TEST(private_mapping_in_range_is_ebusy)
{
	void *p;

	REQUIRE_HALFPROC();
	p = mmap((void *)(HALFPROC_RANGE_START + (3ULL << 40)), PAGE, PROT_READ,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	ASSERT_NE(MAP_FAILED, p);
	ASSERT_PRCTL_FAILS(EBUSY, PR_HALFPROC_FORK_MEMBER, 1, 0);
	ASSERT_EQ(0, hp_prctl(PR_HALFPROC_GET, 0, 0));
}

TEST(fork_member_is_one_shot)
{
	char *p;

	REQUIRE_HALFPROC();
	/* Arming outside a set makes the caller a member first. */
	ASSERT_EQ(0, hp_prctl(PR_HALFPROC_FORK_MEMBER, 1, 0));
	ASSERT_EQ(PR_HALFPROC_IS_MEMBER | PR_HALFPROC_IS_FORK_PENDING,
		  hp_prctl(PR_HALFPROC_GET, 0, 0));
	p = marked_page();
	ASSERT_NE(MAP_FAILED, p);
	ASSERT_EQ(0, libc_fork_sees(p));
	ASSERT_EQ(PR_HALFPROC_IS_MEMBER, hp_prctl(PR_HALFPROC_GET, 0, 0));
	/* Consumed: the next fork is an ordinary child. */
	ASSERT_EQ(3, libc_fork_sees(p));
	/* Cancelled before use: ordinary too. */
	ASSERT_EQ(0, hp_prctl(PR_HALFPROC_FORK_MEMBER, 1, 0));
	ASSERT_EQ(0, hp_prctl(PR_HALFPROC_FORK_MEMBER, 0, 0));
	ASSERT_EQ(3, libc_fork_sees(p));
}

TEST(forked_member_shares_later_mappings)
{
	char *p, **slot;
	pid_t pid;

	REQUIRE_HALFPROC();
	p = marked_page();
	ASSERT_NE(MAP_FAILED, p);
	slot = (char **)(p + 512);
	ASSERT_EQ(0, hp_prctl(PR_HALFPROC_FORK_MEMBER, 1, 0));
	pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		/* Semantics I and II both ways: a new mapping, a pointer to it. */
		char *q = hp_anon(PAGE);

		if (q == MAP_FAILED)
			_exit(1);
		strcpy(q, "from the forked member");
		*slot = q;
		_exit(0);
	}
	ASSERT_EQ(0, wait_status(pid));
	ASSERT_NE(NULL, *slot);
	ASSERT_EQ(0, strcmp(*slot, "from the forked member"));
}

static void *fork_in_thread(void *arg)
{
	return (void *)(long)libc_fork_sees(arg);
}

TEST(fork_member_is_per_thread)
{
	pthread_t t;
	void *ret;
	char *p;

	REQUIRE_HALFPROC();
	p = marked_page();
	ASSERT_NE(MAP_FAILED, p);
	ASSERT_EQ(0, hp_prctl(PR_HALFPROC_FORK_MEMBER, 1, 0));
	/* Another thread's fork does not consume it, nor become a member. */
	ASSERT_EQ(0, pthread_create(&t, NULL, fork_in_thread, p));
	ASSERT_EQ(0, pthread_join(t, &ret));
	ASSERT_EQ(3, (long)ret);
	ASSERT_EQ(0, libc_fork_sees(p));
}

struct armer {
	int armed, go;
	long rc;
};

static void *arm_then_fork(void *arg)
{
	struct armer *a = arg;

	a->rc = hp_prctl(PR_HALFPROC_FORK_MEMBER, 1, 0);
	__atomic_store_n(&a->armed, 1, __ATOMIC_SEQ_CST);
	while (!__atomic_load_n(&a->go, __ATOMIC_SEQ_CST))
		usleep(1000);
	if (a->rc == 0)
		a->rc = libc_fork_sees(marked_page_for_threads);
	return NULL;
}

/*
 * Two threads armed at once: each one's fork is a member.  (The first
 * version kept one armed thread per process, so the second arm stole the
 * first: a member created from a multi-threaded parent died of SIGSEGV.)
 */
TEST(fork_member_armed_by_two_threads)
{
	struct armer a = { 0 };
	pthread_t t;

	REQUIRE_HALFPROC();
	marked_page_for_threads = marked_page();
	ASSERT_NE(MAP_FAILED, marked_page_for_threads);
	ASSERT_EQ(0, hp_prctl(PR_HALFPROC_FORK_MEMBER, 1, 0));
	ASSERT_EQ(0, pthread_create(&t, NULL, arm_then_fork, &a));
	while (!__atomic_load_n(&a.armed, __ATOMIC_SEQ_CST))
		usleep(1000);
	ASSERT_EQ(0, a.rc);
	/* The main thread forks after the other thread armed. */
	ASSERT_EQ(0, libc_fork_sees(marked_page_for_threads));
	__atomic_store_n(&a.go, 1, __ATOMIC_SEQ_CST);
	ASSERT_EQ(0, pthread_join(t, NULL));
	ASSERT_EQ(0, a.rc);
}

TEST(inherit_reaches_grandchildren_and_exec)
{
	char *p, arg[32];
	pid_t pid;

	REQUIRE_HALFPROC();
	p = marked_page();
	ASSERT_NE(MAP_FAILED, p);
	ASSERT_EQ(0, hp_prctl(PR_HALFPROC_INHERIT, 1, 0));
	ASSERT_EQ(PR_HALFPROC_IS_MEMBER | PR_HALFPROC_IS_INHERITING,
		  hp_prctl(PR_HALFPROC_GET, 0, 0));
	snprintf(arg, sizeof(arg), "%p", p);
	pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		/* A member, inheriting, whose own children are members. */
		if (member_sees(p))
			_exit(1);
		if (hp_prctl(PR_HALFPROC_GET, 0, 0) !=
		    (PR_HALFPROC_IS_MEMBER | PR_HALFPROC_IS_INHERITING))
			_exit(2);
		if (libc_fork_sees(p))
			_exit(3);
		/* Exec keeps both the membership and the inheritance. */
		execl(self_exe, self_exe, "--probe", arg, "inheriting", (char *)NULL);
		_exit(99);
	}
	ASSERT_EQ(0, wait_status(pid));
}

TEST(inherit_covers_posix_spawn_and_vfork_exec)
{
	char *p, arg[32];
	char *argv[] = { (char *)self_exe, "--probe", arg, "inheriting", NULL };
	pid_t pid;
	int st;

	REQUIRE_HALFPROC();
	p = marked_page();
	ASSERT_NE(MAP_FAILED, p);
	snprintf(arg, sizeof(arg), "%p", p);
	/* Without inheritance a spawned program is not a member. */
	ASSERT_EQ(0, posix_spawn(&pid, self_exe, NULL, NULL, argv, environ));
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	ASSERT_EQ(3, WEXITSTATUS(st));

	ASSERT_EQ(0, hp_prctl(PR_HALFPROC_INHERIT, 1, 0));
	ASSERT_EQ(0, posix_spawn(&pid, self_exe, NULL, NULL, argv, environ));
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	ASSERT_TRUE(WIFEXITED(st));
	ASSERT_EQ(0, WEXITSTATUS(st));
	pid = vfork();
	if (pid == 0) {
		execv(self_exe, argv);
		_exit(99);
	}
	ASSERT_EQ(0, wait_status(pid));
	/* Turned off: children are ordinary again. */
	ASSERT_EQ(0, hp_prctl(PR_HALFPROC_INHERIT, 0, 0));
	ASSERT_EQ(3, libc_fork_sees(p));
}

/*
 * An unmodified program that forks workers: busybox's shell and its
 * xargs -P 4 start 8 probes, 4 at a time, each a grandchild or deeper;
 * every one must be a member.
 */
TEST(inherit_keeps_a_forking_program_in_the_set)
{
	char *p, cmd[512];

	REQUIRE_HALFPROC();
	if (access("/bin/sh", X_OK))
		SKIP(return, "no /bin/sh");
	p = marked_page();
	ASSERT_NE(MAP_FAILED, p);
	ASSERT_EQ(0, hp_prctl(PR_HALFPROC_INHERIT, 1, 0));
	snprintf(cmd, sizeof(cmd),
		 "for i in 1 2 3 4 5 6 7 8; do echo %p; done | xargs -P 4 -n 1 %s --probe",
		 p, self_exe);
	ASSERT_EQ(0, system(cmd));
	/* And the same pipeline outside the set fails in every probe. */
	ASSERT_EQ(0, hp_prctl(PR_HALFPROC_INHERIT, 0, 0));
	ASSERT_NE(0, system(cmd));
}

/* --probe ADDR [inheriting]: 0 if a member that sees MARK at ADDR. */
static int probe_main(int argc, char **argv)
{
	char *p = (char *)strtoull(argv[2], NULL, 16);
	int r = member_sees(p);

	if (r == 0 && argc > 3 && !strcmp(argv[3], "inheriting") &&
	    hp_prctl(PR_HALFPROC_GET, 0, 0) !=
	    (PR_HALFPROC_IS_MEMBER | PR_HALFPROC_IS_INHERITING))
		return 5;
	return r;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	self_exe = argv[0];
	if (argc >= 3 && !strcmp(argv[1], "--probe"))
		return probe_main(argc, argv);
	return test_harness_run(argc, argv);
}
