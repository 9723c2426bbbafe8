// SPDX-License-Identifier: GPL-2.0
/*
 * Allocation failures on the set's paths (fail-nth, as syzkaller injects
 * them), in two variants: failslab (slab allocations) and fail_page_alloc
 * (page allocations that are not highmem: page tables - the set mm's PGD
 * and the P4D/PUD/PMD/PTE tables of the range - and other kernel pages;
 * user data pages are highmem-capable and left alone).  Each operation that
 * allocates is run in a fresh process with its Nth injection point failing,
 * for N = 1, 2, ... until the operation passes fewer than N: making a set
 * (the first MAP_HALFPROC), making a member (clone3(CLONE_HALFPROC)), a
 * mapping in the range, an mprotect that splits a range VMA, populating
 * range pages (MADV_POPULATE_WRITE), a first-touch fault in the range,
 * dmread, and exec in a member.  Every run must either succeed with the
 * effect visible to another member, or fail with ENOMEM and leave the set
 * as it was (a fault whose page table could not be allocated is retried);
 * exec may also fail with E2BIG (copying its arguments) or kill the
 * process after its point of no return, but a failed atomic allocation may
 * not kill it more often in a member than outside a set.  No set may
 * outlive its members, and the kernel must report nothing (the harness
 * scans the console).
 *
 * GFP_KERNEL allocations only fail with ignore-gfp-wait off, and
 * fail_page_alloc only fails order-0 pages with min-order 0: this test sets
 * both (and restores them).  Skips without CONFIG_FAILSLAB or
 * CONFIG_FAIL_PAGE_ALLOC (that variant), CONFIG_FAULT_INJECTION_DEBUG_FS
 * or the module.
 */
#include "../lib/halfproc_test.h"
#include <limits.h>
#include "kselftest_harness.h"

#define MAX_NTH 3000 /* more allocations than any of these operations makes */

/* What one run reports through its exit status. */
enum outcome {
	RAN_OUT = 10,  /* fewer than N allocations: nothing was injected */
	SUCCEEDED,     /* the injected failure was absorbed; the effect is there */
	FAILED_ENOMEM, /* the call failed cleanly */
	/* anything else: a wrong errno or a broken set (see the log) */
};

static const char *self_exe;
static int nth_fd = -1;

static int write_file(const char *path, const char *v)
{
	int fd = open(path, O_WRONLY), r;

	if (fd < 0)
		return -1;
	r = write(fd, v, strlen(v)) == (ssize_t)strlen(v) ? 0 : -1;
	close(fd);
	return r;
}

static int read_file(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = 0;
	return 0;
}

/* Make the Nth fault-injection point this thread passes fail (once). */
static void arm(int n)
{
	char v[16];
	int len = snprintf(v, sizeof(v), "%d", n);

	if (nth_fd < 0)
		nth_fd = open("/proc/thread-self/fail-nth", O_RDWR);
	if (nth_fd < 0 || pwrite(nth_fd, v, len, 0) != len)
		_exit(80);
}

/* Stop injecting; whether the failure was injected (the count ran out). */
static int disarm(void)
{
	char v[16] = "";
	int saved = errno, injected;

	if (pread(nth_fd, v, sizeof(v) - 1, 0) <= 0)
		_exit(81);
	injected = atoi(v) == 0;
	if (pwrite(nth_fd, "0", 1, 0) != 1)
		_exit(82);
	errno = saved;
	return injected;
}

/* The outcome of a call that returned @failed, just after disarm(). */
static int judge_call(int injected, int failed, int err, const char *what)
{
	if (!failed)
		return injected ? SUCCEEDED : RAN_OUT;
	if (err == ENOMEM)
		return FAILED_ENOMEM;
	fprintf(stderr, "# %s: %s (errno %d), want success or ENOMEM\n", what,
		strerror(err), err);
	return 1;
}

/*
 * Run @op(n) in a fresh (non-member) process for n = 1.. until it runs out
 * of allocations to fail; counts of each outcome in @counts[0..2]
 * (succeeded, ENOMEM, killed).  Returns 0, or -n for the first bad run.
 */
static int for_each_nth(int (*op)(int n), int counts[3], int allow_kill)
{
	for (int n = 1; n <= MAX_NTH; n++) {
		pid_t pid = fork();
		int st;

		if (pid < 0)
			return -n;
		if (pid == 0)
			_exit(op(n));
		if (waitpid(pid, &st, 0) != pid)
			return -n;
		/*
		 * After exec's point of no return: killed, or the new image's
		 * own start-up failed (static-pie relocation: status 127).
		 */
		if (allow_kill && (WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) == 127))) {
			counts[2]++;
			continue;
		}
		if (!WIFEXITED(st)) {
			fprintf(stderr, "# nth %d: killed by signal %d\n", n, WTERMSIG(st));
			return -n;
		}
		switch (WEXITSTATUS(st)) {
		case RAN_OUT:
			fprintf(stderr, "# %d allocation points: %d absorbed, %d ENOMEM, %d killed\n",
				n - 1, counts[0], counts[1], counts[2]);
			return 0;
		case SUCCEEDED:
			counts[0]++;
			break;
		case FAILED_ENOMEM:
			counts[1]++;
			break;
		default:
			fprintf(stderr, "# nth %d: exit status %d\n", n, WEXITSTATUS(st));
			return -n;
		}
	}
	fprintf(stderr, "# still injecting after %d allocations\n", MAX_NTH);
	return -MAX_NTH;
}

/* A new member (made with nothing injected) checks @p holds @v; its status. */
static int member_sees(const char *p, char v)
{
	pid_t pid = hp_spawn();
	char got;

	if (pid < 0)
		return 70;
	if (pid == 0)
		_exit(probe_read(p, &got) == 0 && got == v ? 0 : 1);
	return wait_status(pid) == 0 ? 0 : 71;
}

static int op_make_set(int n)
{
	char *p;
	int injected, r;

	arm(n);
	p = hp_anon(PAGE);
	injected = disarm();
	r = judge_call(injected, p == MAP_FAILED, errno, "first MAP_HALFPROC");
	if (p == MAP_FAILED) {
		/* Nothing half made: the next attempt makes a working set. */
		p = hp_anon(PAGE);
		if (p == MAP_FAILED)
			return 72;
	}
	*p = 'm';
	return member_sees(p, 'm') ?: r;
}

static int op_make_member(int n)
{
	char *p = hp_anon(PAGE);
	pid_t pid;
	int injected, r;

	if (p == MAP_FAILED)
		return 73;
	*p = 'c';
	arm(n);
	pid = hp_spawn();
	if (pid == 0) {
		char got;

		_exit(probe_read(p, &got) == 0 && got == 'c' ? 0 : 1);
	}
	injected = disarm();
	r = judge_call(injected, pid < 0, errno, "clone3(CLONE_HALFPROC)");
	if (pid > 0 && wait_status(pid) != 0)
		return 74;
	/* The set still takes members. */
	return member_sees(p, 'c') ?: r;
}

static int op_range_mmap(int n)
{
	/* Read-only, so the new mapping cannot merge with it (a new VMA). */
	char *first = hp_mmap(NULL, PAGE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS), *p;
	int injected, r;

	if (first == MAP_FAILED)
		return 75;
	arm(n);
	p = hp_anon(16 * PAGE);
	injected = disarm();
	r = judge_call(injected, p == MAP_FAILED, errno, "mmap(MAP_HALFPROC)");
	if (p == MAP_FAILED)
		return member_sees(first, 0) ?: r;
	p[15 * PAGE] = 'r';
	return member_sees(p + 15 * PAGE, 'r') ?: r;
}

static int op_range_mprotect(int n)
{
	char *p = hp_anon(4 * PAGE), got;
	int injected, r, rc;

	if (p == MAP_FAILED)
		return 76;
	memset(p, 'w', 4 * PAGE);
	/* Read-only in the middle: splits the set's VMA in three. */
	arm(n);
	rc = mprotect(p + PAGE, PAGE, PROT_READ);
	injected = disarm();
	r = judge_call(injected, rc != 0, errno, "mprotect() of range pages");
	/* Either way the pages around it stay writable ... */
	if (probe_write(p, 'x') || probe_write(p + 3 * PAGE, 'x'))
		return 77;
	/* ... and the middle one is read-only exactly when it succeeded. */
	if (probe_read(p + PAGE, &got) || got != 'w')
		return 78;
	if ((probe_write(p + PAGE, 'y') == 0) != (rc != 0))
		return 88;
	return member_sees(p, 'x') ?: r;
}

/* Populating range pages: the set's page tables for them, if nothing else. */
static int op_range_populate(int n)
{
	char *p = hp_anon(16 * PAGE);
	int injected, r, rc;

	if (p == MAP_FAILED)
		return 89;
	arm(n);
	rc = madvise(p, 16 * PAGE, MADV_POPULATE_WRITE);
	injected = disarm();
	r = judge_call(injected, rc != 0, errno, "madvise(MADV_POPULATE_WRITE) of range pages");
	/* Populated or not, the pages work and another member sees them. */
	p[15 * PAGE] = 'p';
	return member_sees(p + 15 * PAGE, 'p') ?: r;
}

/*
 * The first touch of a fresh set's range: the fault allocates the set's
 * page tables down to the PTE.  A failed one makes the fault VM_FAULT_OOM,
 * which the kernel retries (no OOM kill outside a memcg): the write lands.
 */
static int op_range_fault(int n)
{
	volatile char *p = hp_anon(16 * PAGE);
	int injected;

	if (p == MAP_FAILED)
		return 90;
	arm(n);
	p[8 * PAGE] = 'f';
	injected = disarm();
	return member_sees((char *)p + 8 * PAGE, 'f') ?: (injected ? SUCCEEDED : RAN_OUT);
}

static int op_dmread(int n)
{
	static char secret[64 * PAGE], buf[64 * PAGE];
	struct chan c;
	pid_t pid;
	ssize_t got;
	int injected, r;

	memset(secret, 's', sizeof(secret));
	if (hp_anon(PAGE) == MAP_FAILED || chan_open(&c))
		return 79;
	pid = hp_spawn();
	if (pid < 0)
		return 83;
	if (pid == 0) {
		tell_parent(&c, 'r');
		from_parent(&c);
		_exit(0);
	}
	from_child(&c);
	memset(secret, 0, sizeof(secret)); /* the member kept its own copy */
	arm(n);
	got = dmread(pid, secret, sizeof(buf), buf);
	injected = disarm();
	r = judge_call(injected, got < 0, errno, "dmread()");
	tell_child(&c, 'q');
	if (wait_status(pid) != 0)
		return 84;
	/* A short read (a later page could not be pinned) is still correct. */
	for (ssize_t i = 0; i < got; i++)
		if (buf[i] != 's')
			return 85;
	return r;
}

/*
 * exec: after its point of no return a failed exec kills the process
 * (SIGSEGV), for a member or not.  @member: exec from a member.  The new
 * image (this program, --probe ADDR FD) reads fail-nth through the
 * inherited FD before anything else, and checks it still sees the range;
 * an injection it survived (in exec or in its own start-up) counts as
 * absorbed.
 */
static int exec_nth(int n, int member)
{
	char addr[32], fd[16];
	char *p = NULL;
	int injected;

	if (member) {
		p = hp_anon(PAGE);
		if (p == MAP_FAILED)
			return 87;
		strcpy(p, "exec");
	}
	arm(0); /* opens nth_fd, inherited by the new image */
	snprintf(addr, sizeof(addr), "%p", (void *)p);
	snprintf(fd, sizeof(fd), "%d", nth_fd);
	arm(n);
	execl(self_exe, self_exe, "--probe", addr, fd, (char *)NULL);
	injected = disarm();
	/*
	 * Before its point of no return exec reports a failed allocation as
	 * ENOMEM, or as E2BIG where it copies the arguments (get_arg_page(),
	 * for a member or not): either way the caller goes on unchanged.
	 */
	if (!injected)
		fprintf(stderr, "# execve() failed without an injection: %s\n", strerror(errno));
	return injected ? FAILED_ENOMEM : 1;
}

static int op_exec_member(int n) { return exec_nth(n, 1); }
static int op_exec_plain(int n) { return exec_nth(n, 0); }

/* Attribute @name of the variant's injection directory. */
static void attr_path(char *buf, size_t len, const char *dir, const char *name)
{
	snprintf(buf, len, "/sys/kernel/debug/%s/%s", dir, name);
}

/* The attributes set for the test (and restored after it), and their values. */
static const char *const attrs[] = { "ignore-gfp-wait", "verbose", "min-order" };
static const char *const attr_values[] = { "N", "0", "0" };

/*
 * Fail sleeping allocations too, with no stack dump per injection (and
 * order-0 pages: fail_page_alloc only has min-order); @saved gets the old
 * values.  0 if the variant's injection is not configured.
 */
static int inject_on(struct __test_metadata *_metadata, const char *dir,
		     char saved[][8])
{
	char path[128];

	if (access("/proc/thread-self/fail-nth", F_OK))
		return 0;
	for (int i = 0; i < 3; i++) {
		attr_path(path, sizeof(path), dir, attrs[i]);
		saved[i][0] = 0;
		if (read_file(path, saved[i], 8) && i < 2)
			return 0;
	}
	for (int i = 0; i < 3; i++) {
		attr_path(path, sizeof(path), dir, attrs[i]);
		if (saved[i][0])
			EXPECT_EQ(0, write_file(path, attr_values[i]));
	}
	return 1;
}

FIXTURE(failslab) {
	char saved[3][8];
	int refs;
};

/* Which allocations fail, and the operations that must reach one. */
FIXTURE_VARIANT(failslab) {
	const char *dir;
	int page_alloc;
};

FIXTURE_VARIANT_ADD(failslab, slab) {
	.dir = "failslab",
	.page_alloc = 0,
};

FIXTURE_VARIANT_ADD(failslab, page_alloc) {
	.dir = "fail_page_alloc",
	.page_alloc = 1,
};

FIXTURE_SETUP(failslab)
{
	if (!hp_supported())
		SKIP(return, "halfproc module not loaded");
	if (!inject_on(_metadata, variant->dir, self->saved))
		SKIP(return, "no %s or fail-nth (CONFIG_%s, FAULT_INJECTION_DEBUG_FS)",
		     variant->dir, variant->page_alloc ? "FAIL_PAGE_ALLOC" : "FAILSLAB");
	self->refs = hp_module_refs();
}

FIXTURE_TEARDOWN(failslab)
{
	char path[128];
	int i;

	if (!self->saved[0][0])
		return;
	for (i = 0; i < 3; i++) {
		attr_path(path, sizeof(path), variant->dir, attrs[i]);
		if (self->saved[i][0])
			write_file(path, self->saved[i]);
	}
	/*
	 * Every set made here is gone once its members are (each holds a
	 * module reference); sets of earlier tests may still be going.
	 */
	for (i = 0; i < 50 && hp_module_refs() > self->refs; i++)
		usleep(100000);
	EXPECT_GE(self->refs, hp_module_refs());
}

/* Each test forks a process per allocation point: minutes on a loaded host. */
#define RUN_NTH(op, allow_kill) ({					\
	int counts_[3] = { 0, 0, 0 };					\
	ASSERT_EQ(0, for_each_nth(op, counts_, allow_kill));		\
	counts_[1];							\
})

TEST_F_TIMEOUT(failslab, making_a_set, 300)
{
	/* Some allocation of the set's own must be reachable and fail cleanly. */
	ASSERT_LT(0, RUN_NTH(op_make_set, 0));
}

TEST_F_TIMEOUT(failslab, making_a_member, 300)
{
	ASSERT_LT(0, RUN_NTH(op_make_member, 0));
}

/*
 * A mapping and an mprotect allocate VMAs, not page tables: in the page
 * variant the sweep only checks that what they do allocate fails cleanly.
 */
TEST_F_TIMEOUT(failslab, mapping_in_the_range, 300)
{
	int enomem = RUN_NTH(op_range_mmap, 0);

	if (!variant->page_alloc)
		ASSERT_LT(0, enomem);
}

TEST_F_TIMEOUT(failslab, mprotect_splitting_a_range_vma, 300)
{
	int enomem = RUN_NTH(op_range_mprotect, 0);

	if (!variant->page_alloc)
		ASSERT_LT(0, enomem);
}

/* The set's page tables for 16 range pages: a failed one is ENOMEM. */
TEST_F_TIMEOUT(failslab, populating_range_pages, 300)
{
	int enomem = RUN_NTH(op_range_populate, 0);

	if (variant->page_alloc)
		ASSERT_LT(0, enomem);
}

/* A fault whose page table could not be allocated is retried, and lands. */
TEST_F_TIMEOUT(failslab, first_touch_in_the_range, 300)
{
	int counts[3] = { 0, 0, 0 };

	ASSERT_EQ(0, for_each_nth(op_range_fault, counts, 0));
	if (variant->page_alloc)
		ASSERT_LT(0, counts[0]);
}

TEST_F_TIMEOUT(failslab, dmread, 300)
{
	/* 64 pages: what dmread allocates, if anything, fails cleanly. */
	RUN_NTH(op_dmread, 0);
}

TEST_F_TIMEOUT(failslab, exec_in_a_member_dies_of_atomic_allocations_no_more_than_outside_a_set, 300)
{
	int plain[3] = { 0, 0, 0 }, member[3] = { 0, 0, 0 };
	char path[128];

	/*
	 * Only allocations that cannot sleep: after the point of no return
	 * exec's own sleeping allocations are too small to fail (the page
	 * allocator retries them), so failing them would only count exec's
	 * deaths, which vary by one or two between runs; an atomic one can
	 * fail under memory pressure and kill the process for nothing.
	 */
	attr_path(path, sizeof(path), variant->dir, "ignore-gfp-wait");
	ASSERT_EQ(0, write_file(path, "Y"));
	ASSERT_EQ(0, for_each_nth(op_exec_plain, plain, 1));
	ASSERT_EQ(0, for_each_nth(op_exec_member, member, 1));
	TH_LOG("exec died past its point of no return: %d times outside a set, %d in a member",
	       plain[2], member[2]);
	ASSERT_LE(member[2], plain[2]);
}

int main(int argc, char **argv)
{
	static char exe[PATH_MAX];
	ssize_t len;

	if (argc == 4 && !strcmp(argv[1], "--probe")) {
		/* The new image of exec_nth(): fail-nth first, nothing before it. */
		char *p = (char *)strtoull(argv[2], NULL, 0), got;
		int injected;

		nth_fd = atoi(argv[3]);
		injected = disarm();
		/* A member still sees the range ("exec"). */
		if (p && (probe_read(p, &got) || got != 'e'))
			_exit(2);
		_exit(injected ? SUCCEEDED : RAN_OUT);
	}
	/*
	 * exec by the real path: a failed allocation in a procfs lookup of
	 * /proc/self/exe would be ENOENT, which says nothing about sets.
	 */
	len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (len <= 0)
		return 1;
	exe[len] = 0;
	self_exe = exe;
	return test_harness_run(argc, argv);
}
