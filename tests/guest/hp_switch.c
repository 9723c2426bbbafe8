// SPDX-License-Identifier: GPL-2.0
/*
 * While a member runs a meta-operation on the shared range (mmap, munmap,
 * mprotect, madvise, ...), the kernel runs the call on the set mm.  Other
 * tasks looking at the member in that window must still see the member's
 * own mm: ptrace's dumpable check, /proc/<pid>/mem, pidfd_getfd(),
 * /proc/<pid>/{maps,status}, dmread() of its private memory, and
 * process_mrelease() of a dying member, which must never reap the set's
 * memory under the other members.
 *
 * Each test keeps a member looping over meta-operations on the range and
 * looks at it from outside as often as it can for a few seconds.
 */
#include "../lib/halfproc_test.h"
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <time.h>
#include "kselftest_harness.h"

#ifndef __NR_pidfd_open
#define __NR_pidfd_open		434
#endif
#ifndef __NR_pidfd_getfd
#define __NR_pidfd_getfd	438
#endif
#ifndef __NR_process_mrelease
#define __NR_process_mrelease	448
#endif

#define SECONDS 3
#define UNPRIV 1000

#define REQUIRE_ROOT() do {						\
	if (getuid() != 0)						\
		SKIP(return, "needs root to drop privileges");		\
} while (0)

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int drop_privileges(void)
{
	return setresgid(UNPRIV, UNPRIV, UNPRIV) || setresuid(UNPRIV, UNPRIV, UNPRIV);
}

/* Distinct per process, so a value read says whose memory it came from. */
static volatile unsigned long private_word;

static unsigned long word_of(pid_t pid)
{
	return 0x5ec7e70000000000UL | (unsigned long)pid;
}

/*
 * A member that loops over meta-operations on the shared range until
 * killed, counting rounds in @rounds (shared range).  @drop: as uid 1000,
 * which makes it non-dumpable.
 */
static pid_t start_looper(volatile unsigned long *rounds, int drop)
{
	pid_t pid = hp_spawn();

	if (pid != 0)
		return pid;
	private_word = word_of(getpid());
	if (drop && drop_privileges())
		_exit(10);
	if (drop && prctl(PR_GET_DUMPABLE) != 0)
		_exit(11);
	for (;;) {
		char *p = hp_anon(4 * PAGE);

		if (p == MAP_FAILED)
			_exit(12);
		p[0] = 1;
		if (mprotect(p, PAGE, PROT_READ) || madvise(p, 4 * PAGE, MADV_DONTNEED) ||
		    munmap(p, 4 * PAGE))
			_exit(13);
		(*rounds)++;
	}
}

/* Wait until the looper made @n rounds; 0, or -1 if it died. */
static int looper_running(pid_t pid, volatile unsigned long *rounds, unsigned long n)
{
	while (*rounds < n) {
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return -1;
		usleep(1000);
	}
	return 0;
}

static int stop_looper(pid_t pid)
{
	int st;

	kill(pid, SIGKILL);
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	/* Killed by us, not exited on an error of its own. */
	return WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL ? 0 : WEXITSTATUS(st);
}

/* Yama's ptrace_scope, set to 0 for the test (1 = only descendants). */
static int yama_scope(int set)
{
	FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", set >= 0 ? "w" : "r");
	int v = 0;

	if (!f)
		return set >= 0 ? 0 : -2;	/* no Yama: nothing to set */
	if (set >= 0)
		v = fprintf(f, "%d\n", set) > 0 ? 0 : -1;
	else if (fscanf(f, "%d", &v) != 1)
		v = -1;
	return fclose(f) ? -1 : v;
}

struct tally {
	unsigned long tries, granted, denied, other;
	int last_errno;
};

enum attack { ATTACH, PROC_MEM, GETFD };

static const char *const attack_name[] = {
	[ATTACH] = "PTRACE_SEIZE",
	[PROC_MEM] = "open /proc/<pid>/mem",
	[GETFD] = "pidfd_getfd(fd 0)",
};

/*
 * pidfd_getfd() of @pid's fd 0 (every process here inherited one): 1 if
 * granted, else 0 with errno set.
 */
static int try_getfd(pid_t pid)
{
	int pidfd = syscall(__NR_pidfd_open, pid, 0), fd, err;

	if (pidfd < 0)
		return 0;
	fd = syscall(__NR_pidfd_getfd, pidfd, 0, 0);
	err = errno;
	close(pidfd);
	if (fd < 0) {
		errno = err;
		return 0;
	}
	close(fd);
	return 1;
}

/* One try of @how against @pid as the current (uid 1000) task. */
static int try_access(enum attack how, pid_t pid)
{
	char path[64];
	int fd;

	if (how == ATTACH)
		return ptrace(PTRACE_SEIZE, pid, 0, 0) == 0 ? 1 : 0;
	if (how == GETFD)
		return try_getfd(pid);
	snprintf(path, sizeof(path), "/proc/%d/mem", pid);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return 0;
	close(fd);
	return 1;
}

/*
 * From a plain (non-member) child at uid 1000: first @how against @control,
 * a dumpable uid-1000 process, which must work (else the test would prove
 * nothing); then against @target for SECONDS, counting into @t.
 */
static void attacker(enum attack how, pid_t control, pid_t target, struct tally *t)
{
	double end;

	if (drop_privileges())
		_exit(20);
	if (try_access(how, control) != 1)
		_exit(21);
	end = now() + SECONDS;
	while (now() < end) {
		t->tries++;
		if (try_access(how, target)) {
			t->granted++;
			/* Exiting detaches a seized tracee. */
			if (how == ATTACH)
				_exit(0);
		} else if (errno == EPERM || errno == EACCES) {
			t->denied++;
		} else {
			t->other++;
			t->last_errno = errno;
		}
	}
	_exit(0);
}

static void foreign_access(struct __test_metadata *_metadata, enum attack how)
{
	volatile unsigned long *rounds = hp_anon(PAGE);
	struct tally *t = mmap(NULL, PAGE, PROT_READ | PROT_WRITE,
			       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int scope = yama_scope(-1);
	unsigned long before;
	pid_t looper, control, a;

	ASSERT_NE(MAP_FAILED, (void *)rounds);
	ASSERT_NE(MAP_FAILED, t);
	if (scope > 0)
		ASSERT_EQ(0, yama_scope(0));
	looper = start_looper(rounds, 1);
	ASSERT_GT(looper, 0);
	control = fork();
	if (control == 0) {
		if (drop_privileges() || prctl(PR_SET_DUMPABLE, 1))
			_exit(1);
		for (;;)
			pause();
	}
	ASSERT_GT(control, 0);
	ASSERT_EQ(0, looper_running(looper, rounds, 10));
	before = *rounds;
	a = fork();
	if (a == 0)
		attacker(how, control, looper, t);
	ASSERT_GT(a, 0);
	EXPECT_EQ(0, wait_status(a)) TH_LOG("attacker failed (21: control refused)");
	TH_LOG("%s: %lu tries against a uid-%d member in %lu meta-operation rounds: %lu granted, %lu denied, %lu other (errno %d)",
	       attack_name[how], t->tries,
	       UNPRIV, *rounds - before, t->granted, t->denied, t->other, t->last_errno);
	kill(control, SIGKILL);
	wait_status(control);
	EXPECT_EQ(0, stop_looper(looper));
	if (scope > 0)
		EXPECT_EQ(0, yama_scope(scope));
	EXPECT_GT(*rounds - before, 0);
	EXPECT_GT(t->tries, 0);
	EXPECT_EQ(0, t->granted);
	EXPECT_EQ(0, t->other);
}

/*
 * A root member that dropped to uid 1000 is not dumpable: a uid-1000
 * process may not attach to it, also while it is inside mmap() on the range.
 */
TEST(ptrace_attach_to_dropped_member_in_meta_operations)
{
	REQUIRE_HALFPROC();
	REQUIRE_ROOT();
	foreign_access(_metadata, ATTACH);
}

TEST(proc_mem_of_dropped_member_in_meta_operations)
{
	REQUIRE_HALFPROC();
	REQUIRE_ROOT();
	foreign_access(_metadata, PROC_MEM);
}

/* pidfd_getfd() takes ptrace's attach check too. */
TEST(pidfd_getfd_of_dropped_member_in_meta_operations)
{
	REQUIRE_HALFPROC();
	REQUIRE_ROOT();
	if (syscall(__NR_pidfd_getfd, -1, 0, 0) < 0 && errno == ENOSYS)
		SKIP(return, "no pidfd_getfd");
	foreign_access(_metadata, GETFD);
}

/*
 * Whether @pid's maps show its own mm: a [stack] line (the set mm has no
 * stack) and a line of the range (the member's view joins the set's).
 * 1 yes, 0 no, -1 unreadable.
 */
static int maps_are_members(pid_t pid)
{
	char path[64], line[512];
	int stack = 0, range = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned long start;

		if (strstr(line, "[stack]"))
			stack = 1;
		if (sscanf(line, "%lx-", &start) == 1 && start >= HALFPROC_RANGE_START &&
		    start < HALFPROC_RANGE_END)
			range = 1;
	}
	fclose(f);
	return stack && range;
}

/*
 * /proc/<pid>/maps and status of a member looping over meta-operations:
 * every read shows the member's own mm (its stack, VmStk), never the set mm
 * alone, which has neither.
 */
TEST(proc_maps_and_status_of_member_in_meta_operations)
{
	volatile unsigned long *rounds = hp_anon(PAGE);
	unsigned long maps_ok = 0, maps_bad = 0, stk_ok = 0, stk_bad = 0, before;
	char status[64];
	double end;
	pid_t looper;

	REQUIRE_HALFPROC();
	ASSERT_NE(MAP_FAILED, (void *)rounds);
	looper = start_looper(rounds, 0);
	ASSERT_GT(looper, 0);
	ASSERT_EQ(0, looper_running(looper, rounds, 10));
	snprintf(status, sizeof(status), "/proc/%d/status", looper);
	before = *rounds;
	end = now() + SECONDS;
	while (now() < end) {
		if (maps_are_members(looper) == 1)
			maps_ok++;
		else
			maps_bad++;
		if (proc_field(status, "VmStk") > 0)
			stk_ok++;
		else
			stk_bad++;
	}
	TH_LOG("%lu maps and %lu status reads in %lu meta-operation rounds: maps %lu own, %lu not; VmStk %lu > 0, %lu not",
	       maps_ok + maps_bad, stk_ok + stk_bad, *rounds - before, maps_ok, maps_bad,
	       stk_ok, stk_bad);
	EXPECT_EQ(0, stop_looper(looper));
	EXPECT_GT(*rounds - before, 0);
	EXPECT_GT(maps_ok, 0);
	EXPECT_EQ(0, maps_bad);
	EXPECT_GT(stk_ok, 0);
	EXPECT_EQ(0, stk_bad);
}

/*
 * dmread() of a member's private global while the member loops over
 * meta-operations on the range: every read must find the member's memory.
 */
TEST(dmread_of_member_in_meta_operations)
{
	volatile unsigned long *rounds = hp_anon(PAGE);
	unsigned long ok = 0, efault = 0, wrong = 0, other = 0, before;
	int last = 0;
	double end;
	pid_t looper;

	REQUIRE_HALFPROC();
	ASSERT_NE(MAP_FAILED, (void *)rounds);
	looper = start_looper(rounds, 0);
	ASSERT_GT(looper, 0);
	ASSERT_EQ(0, looper_running(looper, rounds, 10));
	before = *rounds;
	end = now() + SECONDS;
	while (now() < end) {
		unsigned long v = 0;
		ssize_t r = dmread(looper, (void *)&private_word, sizeof(v), &v);

		if (r == sizeof(v) && v == word_of(looper)) {
			ok++;
		} else if (r == sizeof(v)) {
			wrong++;
		} else if (errno == EFAULT) {
			efault++;
		} else {
			other++;
			last = errno;
		}
	}
	TH_LOG("%lu dmreads in %lu meta-operation rounds: %lu right, %lu EFAULT, %lu wrong value, %lu other (errno %d)",
	       ok + efault + wrong + other, *rounds - before, ok, efault, wrong, other, last);
	EXPECT_EQ(0, stop_looper(looper));
	EXPECT_GT(*rounds - before, 0);
	EXPECT_GT(ok, 0);
	EXPECT_EQ(0, efault);
	EXPECT_EQ(0, wrong);
	EXPECT_EQ(0, other);
}

static unsigned char pat(size_t i)
{
	return (unsigned char)(i * 13 + 7);
}

/*
 * process_mrelease() of a member killed while it loops over meta-operations
 * may reap that member's own memory, never the set's: the other members'
 * shared data stays readable and intact.
 */
TEST(mrelease_of_dying_member_spares_the_set)
{
	const size_t len = 16 * PAGE;
	volatile unsigned long *rounds = hp_anon(PAGE);
	unsigned char *shared = hp_anon(len);
	int reaped = 0, refused = 0, damaged = -1, round;

	REQUIRE_HALFPROC();
	ASSERT_NE(MAP_FAILED, (void *)rounds);
	ASSERT_NE(MAP_FAILED, shared);
	for (size_t i = 0; i < len; i++)
		shared[i] = pat(i);
	for (round = 0; round < 40 && damaged < 0; round++) {
		pid_t looper;
		int pidfd;
		long r;

		*rounds = 0;
		looper = start_looper(rounds, 0);
		ASSERT_GT(looper, 0);
		pidfd = syscall(__NR_pidfd_open, looper, 0);
		if (pidfd < 0 && errno == ENOSYS) {
			stop_looper(looper);
			SKIP(return, "no pidfd_open");
		}
		ASSERT_GE(pidfd, 0);
		ASSERT_EQ(0, looper_running(looper, rounds, 3 + round % 5));
		ASSERT_EQ(0, kill(looper, SIGKILL));
		r = syscall(__NR_process_mrelease, pidfd, 0);
		if (r < 0 && errno == ENOSYS) {
			wait_status(looper);
			SKIP(return, "no process_mrelease");
		}
		if (r == 0)
			reaped++;
		else
			refused++;
		ASSERT_TRUE(r == 0 || errno == ESRCH || errno == EINVAL)
			TH_LOG("process_mrelease: errno %d", errno);
		EXPECT_EQ(0, stop_looper(looper));
		close(pidfd);
		for (size_t i = 0; i < len && damaged < 0; i++) {
			char c;

			if (probe_read((char *)shared + i, &c) || (unsigned char)c != pat(i))
				damaged = i;
		}
	}
	TH_LOG("%d rounds: process_mrelease reaped %d, refused %d; shared data %s",
	       round, reaped, refused, damaged < 0 ? "intact" : "DAMAGED");
	EXPECT_EQ(-1, damaged) TH_LOG("shared byte %d lost after round %d", damaged, round);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	return test_harness_run(argc, argv);
}
