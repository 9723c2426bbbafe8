// SPDX-License-Identifier: GPL-2.0
/*
 * The legacy mmap layout (setarch -L, vm.legacy_va_layout=1) searches
 * bottom-up from TASK_SIZE / 3, which on x86-64 lies inside the shared
 * range.  A process there must still be able to start a set, and a member's
 * private mmap() and exec must work: their searches skip the range.
 *
 * The set mm's own search base is randomised within the range as a
 * process's mmap base is, unless the creator asked for no randomisation.
 */
#include "../lib/halfproc_test.h"
#include <sys/personality.h>
#include "kselftest_harness.h"

#define CHILD_ARG "--legacy-layout-child"

/*
 * Runs in a process exec'd with the legacy layout.  Exit status: 0, or the
 * number of the step that failed.
 */
static int legacy_child(void)
{
	char *priv, *shared, *big;
	pid_t m;
	int st;

	/* Not a member yet: its private memory stays out of the range. */
	priv = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	printf("# legacy layout: first private mmap at %p\n", priv);
	if (priv == MAP_FAILED || in_range(priv, PAGE))
		return 2;
	/* It can start a set (no private mapping in the range: not EBUSY). */
	shared = hp_anon(PAGE);
	if (shared == MAP_FAILED) {
		printf("# mmap(MAP_HALFPROC): errno %d\n", errno);
		return 3;
	}
	if (!in_range(shared, PAGE))
		return 4;
	m = hp_spawn();
	if (m < 0)
		return 5;
	if (m == 0) {
		/* A member's private searches skip the range. */
		for (int i = 0; i < 64; i++) {
			char *p = mmap(NULL, (i + 1) * PAGE, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

			if (p == MAP_FAILED) {
				printf("# member's private mmap %d: errno %d\n", i, errno);
				_exit(6);
			}
			if (in_range(p, PAGE))
				_exit(7);
			*p = 1;
		}
		big = malloc(64 << 20);		/* glibc mmaps this */
		if (!big)
			_exit(8);
		big[0] = 1;
		*shared = 'm';
		/* exec in a member maps the vDSO, the stack and more. */
		execl("/bin/busybox", "true", (char *)NULL);
		_exit(9);
	}
	if (waitpid(m, &st, 0) != m || !WIFEXITED(st) || WEXITSTATUS(st)) {
		printf("# member: status %#x\n", st);
		return WIFEXITED(st) ? WEXITSTATUS(st) : 10;
	}
	return *shared == 'm' ? 0 : 11;
}

/* Run legacy_child() in a process exec'd with @persona, return its status. */
static int run_legacy(unsigned long persona)
{
	pid_t pid = fork();

	if (pid == 0) {
		if (persona && personality(persona) < 0)
			_exit(30);
		execl("/proc/self/exe", "hp_layout", CHILD_ARG, (char *)NULL);
		_exit(31);
	}
	return wait_status(pid);
}

TEST(setarch_legacy_layout)
{
	REQUIRE_HALFPROC();
	ASSERT_EQ(0, run_legacy(PER_LINUX | ADDR_COMPAT_LAYOUT));
}

TEST(sysctl_legacy_va_layout)
{
	int fd = open("/proc/sys/vm/legacy_va_layout", O_RDWR);
	char old = '0';
	int r;

	REQUIRE_HALFPROC();
	if (fd < 0)
		SKIP(return, "no /proc/sys/vm/legacy_va_layout");
	ASSERT_EQ(1, pread(fd, &old, 1, 0));
	ASSERT_EQ(1, pwrite(fd, "1", 1, 0));
	r = run_legacy(0);
	ASSERT_EQ(1, pwrite(fd, &old, 1, 0));
	close(fd);
	ASSERT_EQ(0, r);
}

/* Sets each test creates (the first address of each is compared). */
#define NSETS 16

/*
 * The address of the first non-fixed MAP_HALFPROC mapping of @n fresh sets,
 * each created by a child of ours after personality(@persona) (none if 0).
 * 0 on success.
 */
static int first_addresses(unsigned long persona, uint64_t *addr, int n)
{
	for (int i = 0; i < n; i++) {
		int fd[2];
		pid_t pid;

		if (pipe(fd))
			return -1;
		pid = fork();
		if (pid < 0)
			return -1;
		if (pid == 0) {
			uint64_t a = 0;
			void *p;

			if (persona && personality(persona) < 0)
				_exit(30);
			p = hp_anon(PAGE);
			if (p != MAP_FAILED)
				a = (uintptr_t)p;
			_exit(write(fd[1], &a, sizeof(a)) == sizeof(a) ? 0 : 31);
		}
		close(fd[1]);
		if (read(fd[0], &addr[i], sizeof(addr[i])) != sizeof(addr[i]))
			addr[i] = 0;
		close(fd[0]);
		if (wait_status(pid) != 0)
			return -1;
	}
	return 0;
}

static int distinct(const uint64_t *a, int n)
{
	int d = 0;

	for (int i = 0; i < n; i++) {
		int seen = 0;

		for (int j = 0; j < i; j++)
			seen |= a[j] == a[i];
		d += !seen;
	}
	return d;
}

static long read_long(const char *path)
{
	char buf[32] = "";
	int fd = open(path, O_RDONLY);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	return n > 0 ? strtol(buf, NULL, 10) : -1;
}

/*
 * With randomisation on, the first address of NSETS fresh sets is not the
 * same for all.  The base is the range's end less a random page count of
 * vm.mmap_rnd_bits bits (28 by default on x86-64): the chance that 16
 * sets all draw the same one is 2^(-bits * 15), nil for any bits >= 8
 * (vm.mmap_rnd_bits cannot go below 28 here).
 */
TEST(set_mm_base_is_randomised)
{
	uint64_t a[NSETS], lo = ~0ULL, hi = 0;
	long bits = read_long("/proc/sys/vm/mmap_rnd_bits");

	REQUIRE_HALFPROC();
	if (read_long("/proc/sys/kernel/randomize_va_space") == 0)
		SKIP(return, "randomize_va_space is 0");
	ASSERT_EQ(0, first_addresses(0, a, NSETS));
	for (int i = 0; i < NSETS; i++) {
		ASSERT_TRUE(in_range((void *)(uintptr_t)a[i], PAGE));
		ASSERT_EQ(0, a[i] % PAGE);
		lo = a[i] < lo ? a[i] : lo;
		hi = a[i] > hi ? a[i] : hi;
	}
	TH_LOG("%d distinct first addresses of %d sets (vm.mmap_rnd_bits %ld), %#llx..%#llx",
	       distinct(a, NSETS), NSETS, bits, (unsigned long long)lo,
	       (unsigned long long)hi);
	ASSERT_GT(distinct(a, NSETS), 1);
	/* At most 2^32 pages below the end: half the range stays below. */
	ASSERT_GE(lo, HALFPROC_RANGE_END - (1ULL << 44) - PAGE);
}

/* setarch -R: the creator's ADDR_NO_RANDOMIZE gives every set one base. */
TEST(set_mm_base_is_fixed_with_addr_no_randomize)
{
	uint64_t a[NSETS];

	REQUIRE_HALFPROC();
	ASSERT_EQ(0, first_addresses(PER_LINUX | ADDR_NO_RANDOMIZE, a, NSETS));
	TH_LOG("first address %#llx, %d distinct", (unsigned long long)a[0],
	       distinct(a, NSETS));
	ASSERT_EQ(1, distinct(a, NSETS));
	ASSERT_EQ(HALFPROC_RANGE_END - PAGE, a[0]);
}

/* kernel.randomize_va_space = 0 turns it off for sets too. */
TEST(set_mm_base_is_fixed_without_randomize_va_space)
{
	int fd = open("/proc/sys/kernel/randomize_va_space", O_RDWR);
	uint64_t a[NSETS];
	char old = '2';
	int r;

	REQUIRE_HALFPROC();
	if (fd < 0)
		SKIP(return, "no /proc/sys/kernel/randomize_va_space");
	ASSERT_EQ(1, pread(fd, &old, 1, 0));
	ASSERT_EQ(1, pwrite(fd, "0", 1, 0));
	r = first_addresses(0, a, NSETS);
	ASSERT_EQ(1, pwrite(fd, &old, 1, 0));
	close(fd);
	ASSERT_EQ(0, r);
	ASSERT_EQ(1, distinct(a, NSETS));
	ASSERT_EQ(HALFPROC_RANGE_END - PAGE, a[0]);
}

/*
 * The part of the range above a set's random base stays reachable: with
 * everything from the range's start up to the first mapping taken (one
 * PROT_NONE, MAP_NORESERVE mapping), a mapping without a hint still fits,
 * above the base.  Before the set mm's top-down search was kept in the
 * range it looked below 2^45, always "found" room there, and the address
 * check turned that into ENOMEM.
 */
TEST(range_above_the_random_base_stays_reachable)
{
	pid_t pid;

	REQUIRE_HALFPROC();
	if (read_long("/proc/sys/kernel/randomize_va_space") == 0)
		SKIP(return, "randomize_va_space is 0: the base is the range's end");
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		char *p = hp_anon(PAGE), *fill, *q;
		uint64_t base, below;

		if (p == MAP_FAILED)
			_exit(10);
		base = (uint64_t)(uintptr_t)p + PAGE;
		below = (uint64_t)(uintptr_t)p - HALFPROC_RANGE_START;
		printf("# base %#llx, %llu GiB below the first mapping\n",
		       (unsigned long long)base, (unsigned long long)(below >> 30));
		if (base >= HALFPROC_RANGE_END)
			_exit(11); /* no randomisation after all */
		fill = hp_mmap((void *)HALFPROC_RANGE_START, below, PROT_NONE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE);
		if (fill != (void *)HALFPROC_RANGE_START)
			_exit(12);
		q = hp_anon(PAGE);
		if (q == MAP_FAILED) {
			printf("# no hint: %s\n", strerror(errno));
			_exit(13);
		}
		printf("# no hint: %p\n", q);
		if ((uint64_t)(uintptr_t)q < base || !in_range(q, PAGE))
			_exit(14);
		*q = 1;
		_exit(0);
	}
	ASSERT_EQ(0, wait_status(pid));
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc == 2 && !strcmp(argv[1], CHILD_ARG))
		return legacy_child();
	return test_harness_run(argc, argv);
}
