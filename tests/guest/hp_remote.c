// SPDX-License-Identifier: GPL-2.0
/*
 * Remote access to a member's shared range: process_vm_readv/writev,
 * /proc/<pid>/mem, PTRACE_PEEKDATA/POKEDATA (what gdb uses to read and
 * write a tracee) and dmread() must see the range as the member sees it,
 * from a tracer inside or outside the set, with ptrace's permission rules
 * on the member.  An access that crosses a boundary of the range continues
 * in the other mm.  A member's own slow GUP (vmsplice() of a page nobody
 * touched yet) reaches the range too.  Core dumps, gdb and uprobes:
 * hp_debug.c.
 *
 * Each test creates a set (the test process is its first member) with a
 * region in the range, a member target that waits on a channel, and, for
 * the non-member cases, a plain fork() of the test process, which is not a
 * member (checked: the range faults there).
 */
#include "hp_remote.h"
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <time.h>
#include "kselftest_harness.h"

/* process_vm_readv() of @len bytes at @remote in @pid into @buf. */
static ssize_t pvm_read(pid_t pid, void *buf, const void *remote, size_t len)
{
	struct iovec l = { .iov_base = buf, .iov_len = len };
	struct iovec r = { .iov_base = (void *)remote, .iov_len = len };

	return process_vm_readv(pid, &l, 1, &r, 1, 0);
}

static ssize_t pvm_write(pid_t pid, const void *buf, void *remote, size_t len)
{
	struct iovec l = { .iov_base = (void *)buf, .iov_len = len };
	struct iovec r = { .iov_base = remote, .iov_len = len };

	return process_vm_writev(pid, &l, 1, &r, 1, 0);
}

/*
 * process_vm_readv()/writev() of a member's shared range by a non-member
 * (root) and by a member: what they read is the range's content, what
 * they write every member sees.
 */
TEST(process_vm_rw_of_shared_range)
{
	unsigned char *shared = hp_anon(8 * PAGE);
	struct chan c;
	pid_t target, s;

	REQUIRE_HALFPROC();
	ASSERT_NE(MAP_FAILED, shared);
	fill(shared, 8 * PAGE, 1);
	target = start_target(&c, NULL);
	ASSERT_GT(target, 0);

	s = start_stranger(shared);
	ASSERT_GE(s, 0);
	if (s == 0) {
		unsigned char *buf = malloc(8 * PAGE);
		ssize_t r;

		memset(buf, 0, 8 * PAGE);
		errno = 0;
		r = pvm_read(target, buf, shared, 8 * PAGE);
		printf("# non-member process_vm_readv of 8 pages: %zd (errno %d)\n", r, errno);
		if (r != (ssize_t)(8 * PAGE) || mismatch(buf, 8 * PAGE, 1) >= 0)
			_exit(1);
		fill(buf, 3 * PAGE, 2);
		errno = 0;
		r = pvm_write(target, buf, shared + PAGE + 100, 3 * PAGE);
		printf("# non-member process_vm_writev of 3 pages: %zd (errno %d)\n", r, errno);
		_exit(r == (ssize_t)(3 * PAGE) ? 0 : 2);
	}
	ASSERT_EQ(0, wait_status(s));
	/* The test process, a member, sees what the stranger wrote. */
	ASSERT_EQ(-1, mismatch(shared + PAGE + 100, 3 * PAGE, 2));
	ASSERT_EQ(-1, mismatch(shared, PAGE + 100, 1));

	/* A member reading another member's range reads the same memory. */
	{
		unsigned char buf[PAGE];
		ssize_t r;

		errno = 0;
		r = pvm_read(target, buf, shared + PAGE + 100, PAGE);
		TH_LOG("member process_vm_readv of 1 page: %zd (errno %d)", r, errno);
		ASSERT_EQ((ssize_t)PAGE, r);
		ASSERT_EQ(-1, mismatch(buf, PAGE, 2));
	}
	ASSERT_EQ(0, stop_target(&c, target));
}

/*
 * One process_vm_readv() iovec and one /proc/<pid>/mem read across 2^45:
 * the member's private page below the range, then the set's page above it.
 */
TEST(remote_access_across_range_start)
{
	unsigned char *below = (unsigned char *)(uintptr_t)(HALFPROC_RANGE_START - PAGE);
	unsigned char *above = (unsigned char *)(uintptr_t)HALFPROC_RANGE_START;
	unsigned char *shared = hp_anon(PAGE);
	struct chan c;
	pid_t target, s;

	REQUIRE_HALFPROC();
	ASSERT_NE(MAP_FAILED, shared);
	ASSERT_EQ(above, hp_mmap(above, PAGE, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE));
	fill(above, PAGE, 4);
	/* The target maps its own private page just below the range. */
	ASSERT_EQ(0, chan_open(&c));
	target = hp_spawn();
	ASSERT_GE(target, 0);
	if (target == 0) {
		if (mmap(below, PAGE, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) != below)
			_exit(20);
		fill(below, PAGE, 3);
		tell_parent(&c, 'r');
		from_parent(&c);
		_exit(0);
	}
	ASSERT_EQ('r', from_child(&c));

	s = start_stranger(shared);
	ASSERT_GE(s, 0);
	if (s == 0) {
		unsigned char buf[2 * PAGE];
		char path[64];
		ssize_t r;
		int fd;

		memset(buf, 0, sizeof(buf));
		errno = 0;
		r = pvm_read(target, buf, below, 2 * PAGE);
		printf("# process_vm_readv across 2^45: %zd of %lu (errno %d)\n",
		       r, 2 * PAGE, errno);
		if (r != (ssize_t)(2 * PAGE) || mismatch(buf, PAGE, 3) >= 0 ||
		    mismatch(buf + PAGE, PAGE, 4) >= 0)
			_exit(1);
		snprintf(path, sizeof(path), "/proc/%d/mem", target);
		fd = open(path, O_RDONLY);
		if (fd < 0)
			_exit(2);
		/* One page from the middle of one to the middle of the other. */
		memset(buf, 0, sizeof(buf));
		errno = 0;
		r = pread(fd, buf, PAGE, (off_t)(uintptr_t)(below + PAGE / 2));
		printf("# /proc/pid/mem read across 2^45: %zd of %lu (errno %d)\n",
		       r, PAGE, errno);
		if (r != (ssize_t)PAGE)
			_exit(3);
		for (size_t i = 0; i < PAGE / 2; i++)
			if (buf[i] != pat(i + PAGE / 2, 3))
				_exit(4);
		if (mismatch(buf + PAGE / 2, PAGE / 2, 4) >= 0)
			_exit(5);
		_exit(0);
	}
	ASSERT_EQ(0, wait_status(s));
	tell_child(&c, 'q');
	ASSERT_EQ(0, wait_status(target));
}

/* /proc/<pid>/mem read and write of a member's shared range by a non-member. */
TEST(proc_pid_mem_of_shared_range)
{
	unsigned char *shared = hp_anon(4 * PAGE);
	struct chan c;
	pid_t target, s;

	REQUIRE_HALFPROC();
	ASSERT_NE(MAP_FAILED, shared);
	fill(shared, 4 * PAGE, 5);
	target = start_target(&c, NULL);
	ASSERT_GT(target, 0);
	s = start_stranger(shared);
	ASSERT_GE(s, 0);
	if (s == 0) {
		unsigned char buf[3 * PAGE];
		char path[64];
		ssize_t r;
		int fd;

		snprintf(path, sizeof(path), "/proc/%d/mem", target);
		fd = open(path, O_RDWR);
		if (fd < 0)
			_exit(1);
		errno = 0;
		r = pread(fd, buf, 3 * PAGE, (off_t)(uintptr_t)shared);
		printf("# /proc/pid/mem read of 3 pages: %zd (errno %d)\n", r, errno);
		if (r != (ssize_t)(3 * PAGE) || mismatch(buf, 3 * PAGE, 5) >= 0)
			_exit(2);
		fill(buf, 2 * PAGE, 6);
		errno = 0;
		r = pwrite(fd, buf, 2 * PAGE, (off_t)(uintptr_t)(shared + 2 * PAGE));
		printf("# /proc/pid/mem write of 2 pages: %zd (errno %d)\n", r, errno);
		_exit(r == (ssize_t)(2 * PAGE) ? 0 : 3);
	}
	ASSERT_EQ(0, wait_status(s));
	ASSERT_EQ(-1, mismatch(shared, 2 * PAGE, 5));
	ASSERT_EQ(-1, mismatch(shared + 2 * PAGE, 2 * PAGE, 6));
	ASSERT_EQ(0, stop_target(&c, target));
}

/*
 * PTRACE_PEEKDATA/POKEDATA of a shared variable, as gdb reads and writes
 * it ("print shared->counter", "set var"): by @tracer_is_member the test
 * process (a member and the target's parent), else a plain non-member child.
 * The target's private word is peeked too, so the tracer is known to work.
 */
static int peek_poke(pid_t target, unsigned long *shared_word,
		     unsigned long *private_word)
{
	unsigned long v;
	int st;

	if (ptrace(PTRACE_ATTACH, target, 0, 0))
		return 10;
	if (waitpid(target, &st, 0) != target || !WIFSTOPPED(st))
		return 11;
	errno = 0;
	v = ptrace(PTRACE_PEEKDATA, target, private_word, 0);
	if (errno || v != 0x0123456789abcdefUL)
		return 12;
	errno = 0;
	v = ptrace(PTRACE_PEEKDATA, target, shared_word, 0);
	printf("# PTRACE_PEEKDATA of a shared variable: %#lx (errno %d)\n", v, errno);
	if (errno || v != 0x5ca1ab1e0ddba11UL)
		return 13;
	errno = 0;
	if (ptrace(PTRACE_POKEDATA, target, shared_word + 1, 0xfeedfacecafebeefUL)) {
		printf("# PTRACE_POKEDATA of a shared variable: errno %d\n", errno);
		return 14;
	}
	if (ptrace(PTRACE_DETACH, target, 0, 0))
		return 15;
	return 0;
}

static unsigned long target_private_word;

static void ptrace_shared_variable(struct __test_metadata *_metadata,
				   int tracer_is_member)
{
	unsigned long *shared = hp_anon(PAGE);
	struct chan c;
	pid_t target, s;

	ASSERT_NE(MAP_FAILED, shared);
	shared[0] = 0x5ca1ab1e0ddba11UL;
	shared[1] = 0;
	target_private_word = 0x0123456789abcdefUL;
	target = start_target(&c, NULL);
	ASSERT_GT(target, 0);
	if (tracer_is_member) {
		ASSERT_EQ(0, peek_poke(target, shared, &target_private_word));
	} else {
		s = start_stranger(shared);
		ASSERT_GE(s, 0);
		if (s == 0)
			_exit(peek_poke(target, shared, &target_private_word));
		ASSERT_EQ(0, wait_status(s));
	}
	ASSERT_EQ(0xfeedfacecafebeefUL, shared[1]);
	/* The target runs on, unharmed. */
	tell_child(&c, 'x');
	ASSERT_EQ('k', from_child(&c));
	ASSERT_EQ(0, stop_target(&c, target));
}

TEST(ptrace_peek_poke_shared_variable_by_member)
{
	REQUIRE_HALFPROC();
	ptrace_shared_variable(_metadata, 1);
}

TEST(ptrace_peek_poke_shared_variable_by_non_member)
{
	REQUIRE_HALFPROC();
	ptrace_shared_variable(_metadata, 0);
}

/*
 * Who may: ptrace's rules on the member, nothing more and nothing less.  A
 * uid-1000 non-member may not reach a root member's range by any of the
 * three ways (EPERM/EACCES, as for its private memory); the same
 * non-member reaches a uid-1000 member's range.  Yama's scope is 0 for the
 * test, so only the credentials decide.
 */
TEST(remote_access_follows_ptrace_rules_on_the_member)
{
	unsigned char *shared = hp_anon(PAGE);
	int scope = yama_scope(-1);
	struct chan c;
	pid_t root_target, user_target, s;

	REQUIRE_HALFPROC();
	if (getuid() != 0)
		SKIP(return, "needs root to drop privileges");
	ASSERT_NE(MAP_FAILED, shared);
	fill(shared, PAGE, 8);
	if (scope > 0)
		ASSERT_EQ(0, yama_scope(0));
	root_target = start_target(&c, NULL);
	ASSERT_GT(root_target, 0);
	user_target = hp_spawn();
	ASSERT_GE(user_target, 0);
	if (user_target == 0) {
		if (drop_privileges() || prctl(PR_SET_DUMPABLE, 1))
			_exit(1);
		for (;;)
			pause();
	}
	usleep(100000);
	s = start_stranger(shared);
	ASSERT_GE(s, 0);
	if (s == 0) {
		unsigned char buf[PAGE];
		char path[64];
		ssize_t r;
		int fd;

		if (drop_privileges())
			_exit(1);
		errno = 0;
		if (pvm_read(root_target, buf, shared, PAGE) != -1 || errno != EPERM)
			_exit(2);
		snprintf(path, sizeof(path), "/proc/%d/mem", root_target);
		errno = 0;
		if (open(path, O_RDONLY) != -1 || errno != EACCES)
			_exit(3);
		errno = 0;
		if (ptrace(PTRACE_ATTACH, root_target, 0, 0) != -1 || errno != EPERM)
			_exit(4);
		/* The uid-1000 member: allowed, and the range is there. */
		errno = 0;
		r = pvm_read(user_target, buf, shared, PAGE);
		printf("# uid 1000 process_vm_readv of a uid-1000 member: %zd (errno %d)\n",
		       r, errno);
		if (r != (ssize_t)PAGE || mismatch(buf, PAGE, 8) >= 0)
			_exit(5);
		snprintf(path, sizeof(path), "/proc/%d/mem", user_target);
		fd = open(path, O_RDONLY);
		if (fd < 0 || pread(fd, buf, PAGE, (off_t)(uintptr_t)shared) != (ssize_t)PAGE ||
		    mismatch(buf, PAGE, 8) >= 0)
			_exit(6);
		_exit(0);
	}
	ASSERT_EQ(0, wait_status(s));
	kill(user_target, SIGKILL);
	wait_status(user_target);
	ASSERT_EQ(0, stop_target(&c, root_target));
	if (scope > 0)
		ASSERT_EQ(0, yama_scope(scope));
}

/* dmread()/dmwrite() of another member's shared range: the same memory. */
TEST(dmread_of_shared_range)
{
	unsigned char *shared = hp_anon(2 * PAGE);
	unsigned char buf[2 * PAGE];
	struct chan c;
	pid_t target;
	ssize_t r;

	REQUIRE_HALFPROC();
	ASSERT_NE(MAP_FAILED, shared);
	fill(shared, 2 * PAGE, 9);
	target = start_target(&c, NULL);
	ASSERT_GT(target, 0);
	errno = 0;
	r = dmread(target, shared + 10, 2 * PAGE - 10, buf);
	TH_LOG("dmread of 2 pages of the range: %zd (errno %d)", r, errno);
	ASSERT_EQ((ssize_t)(2 * PAGE - 10), r);
	for (size_t i = 0; i < 2 * PAGE - 10; i++)
		ASSERT_EQ(pat(i + 10, 9), buf[i]);
	fill(buf, PAGE, 10);
	ASSERT_EQ((ssize_t)PAGE, dmwrite(target, shared + PAGE, PAGE, buf));
	ASSERT_EQ(-1, mismatch(shared + PAGE, PAGE, 10));
	ASSERT_EQ(0, stop_target(&c, target));
}

/*
 * A member's own GUP of a shared page nobody has touched yet: the fast path
 * finds no page and the slow path must fault it in through the set mm.
 */
TEST(vmsplice_of_untouched_shared_page)
{
	unsigned char *shared = hp_anon(2 * PAGE);
	unsigned char buf[PAGE];
	struct iovec iov;
	ssize_t r;
	int p[2];

	REQUIRE_HALFPROC();
	ASSERT_NE(MAP_FAILED, shared);
	ASSERT_EQ(0, pipe(p));
	iov.iov_base = shared + PAGE;
	iov.iov_len = PAGE;
	errno = 0;
	r = vmsplice(p[1], &iov, 1, 0);
	TH_LOG("vmsplice of an untouched shared page: %zd (errno %d)", r, errno);
	ASSERT_EQ((ssize_t)PAGE, r);
	ASSERT_EQ((ssize_t)PAGE, read(p[0], buf, PAGE));
	for (size_t i = 0; i < PAGE; i++)
		ASSERT_EQ(0, buf[i]);
	close(p[0]);
	close(p[1]);
}

/*
 * Remote reads of a stable shared region while another member keeps
 * mapping, write-protecting and unmapping regions of the range (set mm
 * mmap_lock taken for writing, all the time): every read is whole and
 * right, and nothing deadlocks (lockdep watches the nesting of the set
 * mm's lock under the member's).
 */
TEST(remote_access_during_meta_operations)
{
	unsigned char *shared = hp_anon(4 * PAGE);
	volatile unsigned long *rounds = hp_anon(PAGE);
	struct chan c;
	pid_t target, looper, s;
	int st;

	REQUIRE_HALFPROC();
	ASSERT_NE(MAP_FAILED, shared);
	ASSERT_NE(MAP_FAILED, (void *)rounds);
	fill(shared, 4 * PAGE, 13);
	target = start_target(&c, NULL);
	ASSERT_GT(target, 0);
	looper = hp_spawn();
	ASSERT_GE(looper, 0);
	if (looper == 0) {
		for (;;) {
			char *p = hp_anon(8 * PAGE);

			if (p == MAP_FAILED)
				_exit(12);
			p[0] = 1;
			if (mprotect(p, PAGE, PROT_READ) || munmap(p, 8 * PAGE))
				_exit(13);
			(*rounds)++;
		}
	}
	s = start_stranger(shared);
	ASSERT_GE(s, 0);
	if (s == 0) {
		unsigned char buf[4 * PAGE];
		unsigned long n = 0;
		char path[64];
		time_t end = time(NULL) + 3;
		int fd;

		snprintf(path, sizeof(path), "/proc/%d/mem", target);
		fd = open(path, O_RDONLY);
		if (fd < 0)
			_exit(1);
		while (time(NULL) < end) {
			if (pvm_read(target, buf, shared, 4 * PAGE) != (ssize_t)(4 * PAGE) ||
			    mismatch(buf, 4 * PAGE, 13) >= 0)
				_exit(2);
			if (pread(fd, buf, 4 * PAGE, (off_t)(uintptr_t)shared) != (ssize_t)(4 * PAGE) ||
			    mismatch(buf, 4 * PAGE, 13) >= 0)
				_exit(3);
			n++;
		}
		printf("# %lu rounds of process_vm_readv + /proc/pid/mem, all whole and right\n", n);
		_exit(n ? 0 : 4);
	}
	ASSERT_EQ(0, wait_status(s));
	TH_LOG("the looper made %lu rounds of mmap/mprotect/munmap meanwhile", *rounds);
	ASSERT_LT(0, *rounds);
	kill(looper, SIGKILL);
	ASSERT_EQ(looper, waitpid(looper, &st, 0));
	ASSERT_TRUE(WIFSIGNALED(st));
	ASSERT_EQ(0, stop_target(&c, target));
}

TEST_HARNESS_MAIN
