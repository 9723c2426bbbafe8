// SPDX-License-Identifier: GPL-2.0
/*
 * The legacy mmap layout (setarch -L, vm.legacy_va_layout=1) searches
 * bottom-up from TASK_SIZE / 3, which on x86-64 lies inside the shared
 * range.  A process there must still be able to start a set, and a member's
 * private mmap() and exec must work: their searches skip the range.
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

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc == 2 && !strcmp(argv[1], CHILD_ARG))
		return legacy_child();
	return test_harness_run(argc, argv);
}
