// SPDX-License-Identifier: GPL-2.0
/*
 * A member's clear_child_tid word (set_tid_address(), CLONE_CHILD_CLEARTID)
 * in the shared range is cleared and FUTEX_WAKE'd when the member exits,
 * also when it is single-threaded: every member maps the word, as every
 * thread maps a thread's, so another member may wait on it (a join).
 * Upstream's mm_release() clears it only when the exiting mm has other
 * users, which a single-threaded member's has not (issue 10, defect 6).
 */
#include "../lib/halfproc_test.h"
#include <linux/futex.h>
#include <time.h>
#include "kselftest_harness.h"

/* How long a waiter waits before the test calls it lost (TCG is slow). */
#define WAIT_S 5

/* The state letter of @pid in /proc/<pid>/stat, or 0. */
static char task_state(pid_t pid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	p = strrchr(buf, ')');
	return p && p[1] == ' ' ? p[2] : 0;
}

/*
 * In the exiting member: wait until @waiter sleeps (it sleeps only in its
 * FUTEX_WAIT on the word), for at most WAIT_S seconds, then exit.
 */
static void exit_once_waited_on(pid_t waiter)
{
	for (int i = 0; i < WAIT_S * 1000 && task_state(waiter) != 'S'; i++)
		usleep(1000);
	/* Let the waiter settle in the futex queue. */
	usleep(20000);
	_exit(0);
}

/* FUTEX_WAIT on @word while it holds @val; 0 or an errno. */
static int futex_wait_for(volatile uint32_t *word, uint32_t val, int op)
{
	struct timespec ts = { .tv_sec = WAIT_S };

	if (syscall(SYS_futex, word, op, val, &ts, NULL, 0))
		return errno;
	return 0;
}

/*
 * Member B (single-threaded) points set_tid_address() at a word in the
 * range holding its tid; member A waits on the word with @op; B exits.
 * A must be woken (not time out) and read 0.
 */
static void set_tid_address_join(struct __test_metadata *_metadata, int op)
{
	volatile uint32_t *w = hp_anon(PAGE), *ready;
	uint32_t tid;
	pid_t a = getpid(), b;
	int err;

	ASSERT_NE(MAP_FAILED, (void *)w);
	ready = w + 1;
	b = hp_spawn();
	ASSERT_GE(b, 0);
	if (b == 0) {
		*w = syscall(SYS_gettid);
		syscall(SYS_set_tid_address, w);
		*ready = 1;
		exit_once_waited_on(a);
	}
	/* Spin, do not sleep: B takes our first sleep for the futex wait. */
	while (!*ready)
		;
	tid = *w;
	ASSERT_EQ((uint32_t)b, tid);
	err = futex_wait_for(w, tid, op);
	TH_LOG("waiter: %s, word %u", err ? strerror(err) : "woken", *w);
	ASSERT_EQ(0, wait_status(b));
	EXPECT_EQ(0, *w);
	/* EAGAIN: the word was 0 before we slept (B raced ahead); fine too. */
	ASSERT_TRUE(err == 0 || err == EAGAIN);
}

TEST(set_tid_address_word_in_range_is_cleared_and_woken)
{
	REQUIRE_HALFPROC();
	set_tid_address_join(_metadata, FUTEX_WAIT);
}

TEST(set_tid_address_word_in_range_wakes_a_private_waiter)
{
	REQUIRE_HALFPROC();
	/* glibc waits on a thread's tid with FUTEX_PRIVATE_FLAG. */
	set_tid_address_join(_metadata, FUTEX_WAIT | FUTEX_PRIVATE_FLAG);
}

TEST(clone_child_cleartid_in_range_is_a_join)
{
	volatile uint32_t *w;
	struct clone_args args;
	uint32_t tid;
	pid_t a = getpid(), b;
	int err;

	REQUIRE_HALFPROC();
	w = hp_anon(PAGE);
	ASSERT_NE(MAP_FAILED, (void *)w);
	memset(&args, 0, sizeof(args));
	args.flags = CLONE_HALFPROC | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID;
	args.parent_tid = (uintptr_t)w;
	args.child_tid = (uintptr_t)w;
	args.exit_signal = SIGCHLD;
	b = syscall(__NR_clone3, &args, sizeof(args));
	ASSERT_GE(b, 0);
	if (b == 0)
		exit_once_waited_on(a);
	tid = *w;
	ASSERT_EQ((uint32_t)b, tid);
	err = futex_wait_for(w, tid, FUTEX_WAIT);
	TH_LOG("waiter: %s, word %u", err ? strerror(err) : "woken", *w);
	ASSERT_EQ(0, wait_status(b));
	EXPECT_EQ(0, *w);
	ASSERT_TRUE(err == 0 || err == EAGAIN);
}

/*
 * Unchanged upstream behaviour outside the range: a single-threaded
 * process's word in its own memory is left alone (nobody else maps it).
 * Here a member's private word, checked through a MAP_SHARED page the
 * parent maps too: not cleared, as for any single-threaded process.
 */
TEST(private_word_of_single_threaded_member_is_left_alone)
{
	volatile uint32_t *w;
	pid_t b;

	REQUIRE_HALFPROC();
	w = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, (void *)w);
	ASSERT_FALSE(in_range((void *)w, PAGE));
	b = hp_spawn();
	ASSERT_GE(b, 0);
	if (b == 0) {
		*w = syscall(SYS_gettid);
		syscall(SYS_set_tid_address, w);
		_exit(0);
	}
	ASSERT_EQ(0, wait_status(b));
	ASSERT_EQ((uint32_t)b, *w);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	return test_harness_run(argc, argv);
}
