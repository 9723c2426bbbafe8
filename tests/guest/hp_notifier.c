// SPDX-License-Identifier: GPL-2.0
/*
 * Secondary MMUs and half-process members (issue 10, defect 3).  A member's
 * shared range is mapped by the set's page tables: an unmap in the range
 * is invalidated on the set mm, so an mmu notifier on a member mm (KVM, an
 * IOMMU in SVA mode) would never hear it and keep a stale translation.
 * Patch 0021 refuses such a registration on a member (EOPNOTSUPP), and the
 * module refuses to make a process with one a member (EBUSY).
 *
 * The mirror here is tests/guest/kmods/hp_mn_test.ko, a test-only module
 * that registers an invalidate_range_start notifier on a given pid's mm and
 * counts what it hears.
 */
#include "../lib/halfproc_test.h"
#include "kselftest_harness.h"

#define MN "/sys/kernel/debug/hp_mn_test/"

#define REQUIRE_MIRROR() do {						\
	if (!hp_supported())						\
		SKIP(return, "halfproc module not loaded");		\
	if (!test_module_ready("hp_mn_test", MN "pid"))		\
		SKIP(return, "no hp_mn_test.ko (test-only module)");	\
} while (0)

static long mn_read(const char *name)
{
	char path[128];

	snprintf(path, sizeof(path), MN "%s", name);
	return file_long(path);
}

/* Registers the mirror on @pid's mm (0 unregisters); its result. */
static long mn_register(pid_t pid)
{
	char buf[32];
	int fd = open(MN "pid", O_WRONLY);
	int n;

	if (fd < 0)
		return -1000;
	n = snprintf(buf, sizeof(buf), "%d", pid);
	if (write(fd, buf, n) != n) {
		close(fd);
		return -1001;
	}
	close(fd);
	return pid ? mn_read("result") : 0;
}

/* The mirror works: on a plain process it hears that process's unmaps. */
TEST(mirror_on_a_plain_process_hears_its_unmaps)
{
	char *p;
	long c;

	REQUIRE_MIRROR();
	p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, p);
	p[0] = 1;
	ASSERT_EQ(0, mn_register(getpid()));
	ASSERT_EQ(0, munmap(p, PAGE));
	c = mn_read("count");
	mn_register(0);
	EXPECT_LE(1, c) TH_LOG("the mirror heard %ld invalidations of its own unmap", c);
}

/*
 * A member refuses a mirror.  Where it would be accepted (the kernel
 * without patch 0021), say what the mirror misses: another member unmaps a
 * shared page this member has mapped, and the mirror hears nothing.
 */
TEST(member_refuses_a_secondary_mmu)
{
	volatile char *p;
	long r, before, after;
	pid_t child;

	REQUIRE_MIRROR();
	p = hp_anon(PAGE);
	ASSERT_NE(MAP_FAILED, (void *)p);
	p[0] = 1;
	r = mn_register(getpid());
	if (r == 0) {
		struct chan c;

		/* The fork itself write-protects our private pages: count after it. */
		ASSERT_EQ(0, chan_open(&c));
		child = hp_spawn();
		ASSERT_LE(0, child);
		if (child == 0) {
			from_parent(&c);
			_exit(munmap((void *)p, PAGE) ? 1 : 0);
		}
		before = mn_read("count");
		tell_child(&c, 'x');
		ASSERT_EQ(0, wait_status(child));
		after = mn_read("count");
		mn_register(0);
		TH_LOG("a member accepted a secondary MMU; another member's unmap of a page it maps reached it %ld times",
		       after - before);
	}
	EXPECT_EQ(-EOPNOTSUPP, r);
}

/* Its forks and execs are members too: so are the mirror's refusals. */
TEST(member_child_refuses_a_secondary_mmu)
{
	struct chan c;
	pid_t child;
	long r;

	REQUIRE_MIRROR();
	ASSERT_EQ(0, chan_open(&c));
	child = hp_spawn();
	ASSERT_LE(0, child);
	if (child == 0) {
		from_parent(&c);
		_exit(0);
	}
	r = mn_register(child);
	tell_child(&c, 'x');
	ASSERT_EQ(0, wait_status(child));
	if (r == 0)
		mn_register(0);
	EXPECT_EQ(-EOPNOTSUPP, r);
}

/*
 * A process that has a secondary MMU cannot become a member, by mmap or by
 * clone3; the refusal outlives the mirror (the kernel keeps an mm's
 * subscription list until the mm is freed, and that is what is checked).
 */
TEST(process_with_a_secondary_mmu_cannot_join)
{
	pid_t child;
	void *p;

	REQUIRE_MIRROR();
	ASSERT_EQ(0, mn_register(getpid()));
	p = hp_anon(PAGE);
	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(EBUSY, errno);
	child = hp_spawn();
	if (child == 0)
		_exit(0);
	if (child > 0)
		wait_status(child);
	EXPECT_EQ(-1, child);
	EXPECT_EQ(EBUSY, errno);
	mn_register(0);
	p = hp_anon(PAGE);
	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(EBUSY, errno);
}

TEST_HARNESS_MAIN
