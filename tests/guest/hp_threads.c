// SPDX-License-Identifier: GPL-2.0
/*
 * Multi-threaded members switching concurrently (issue 10, "Concurrency").
 * Every meta-operation on the range switches the calling thread, and only
 * it, to the set mm; its sibling threads go on in the member's own mm, and
 * threads of other members switch at the same time.
 *
 * MEMBERS members of THREADS threads each run for RUN_MS:
 * - mappers map a region in the range, fill it with a tag of their own,
 *   check it, mprotect it read-only and back, and unmap it, publishing the
 *   region under a sequence count (odd while the region is live);
 * - checkers read the other members' published regions: a page read while
 *   the sequence count stayed odd must hold the tag (a fault there, or
 *   another tag, is an error);
 * - private threads map, fill and unmap private memory and check a
 *   private global that no other member may see changed, while their
 *   siblings are switched.
 *
 * Checks: 0 errors; the set's switch counter grew by exactly the number of
 * range meta-operations made (one switch each, none lost or doubled under
 * concurrency); meta-operations of different threads overlapped in time.
 */
#include "../lib/hp_stats.h"
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include "kselftest_harness.h"

#define MEMBERS		3
#define THREADS		3	/* a mapper, a checker, a private thread */
#define RUN_MS		3000
#define REGION_PAGES	8

struct slot {
	atomic_ulong seq;	/* odd while addr and tag name a live region */
	atomic_ulong addr;
	atomic_ulong tag;
};

/* In the range, made before the members. */
struct board {
	struct slot slot[MEMBERS];
	atomic_int ready, go, stop, finished, done;
	atomic_long meta_ops, inflight, max_inflight, checked, errors;
	atomic_long private_rounds;
	char why[256];
};

static struct board *b;
static unsigned long private_global;	/* each member's own */

static void bad(const char *fmt, unsigned long a, unsigned long c)
{
	if (atomic_fetch_add(&b->errors, 1) == 0)
		snprintf(b->why, sizeof(b->why), fmt, a, c);
}

/* Brackets one meta-operation: counts it and how many run at once. */
static void meta_begin(void)
{
	long n = atomic_fetch_add(&b->inflight, 1) + 1;
	long m = atomic_load(&b->max_inflight);

	while (n > m && !atomic_compare_exchange_weak(&b->max_inflight, &m, n))
		;
}

static void meta_end(void)
{
	atomic_fetch_sub(&b->inflight, 1);
	atomic_fetch_add(&b->meta_ops, 1);
}

static void mapper(int me)
{
	struct slot *s = &b->slot[me];
	size_t len = REGION_PAGES * PAGE;
	unsigned long round = 0;

	while (!atomic_load(&b->stop)) {
		unsigned long tag = ((unsigned long)me << 32) | ++round;
		unsigned long *p;

		meta_begin();
		p = hp_anon(len);
		meta_end();
		if (p == MAP_FAILED) {
			bad("mapper: MAP_HALFPROC failed (errno %lu, round %lu)", errno, round);
			return;
		}
		for (size_t i = 0; i < len / sizeof(*p); i += PAGE / sizeof(*p))
			p[i] = tag;
		meta_begin();
		if (mprotect(p, len, PROT_READ))
			bad("mapper: mprotect RO (errno %lu, round %lu)", errno, round);
		meta_end();
		for (size_t i = 0; i < len / sizeof(*p); i += PAGE / sizeof(*p))
			if (p[i] != tag)
				bad("mapper: own page holds %lx, wrote %lx", p[i], tag);
		meta_begin();
		if (mprotect(p, len, PROT_READ | PROT_WRITE))
			bad("mapper: mprotect RW (errno %lu, round %lu)", errno, round);
		meta_end();
		/* Publish, and withdraw before the unmap. */
		atomic_store(&s->addr, (unsigned long)p);
		atomic_store(&s->tag, tag);
		atomic_fetch_add(&s->seq, 1);
		usleep(200);
		atomic_fetch_add(&s->seq, 1);
		meta_begin();
		if (munmap(p, len))
			bad("mapper: munmap (errno %lu, round %lu)", errno, round);
		meta_end();
	}
}

static void checker(int me)
{
	while (!atomic_load(&b->stop)) {
		for (int m = 0; m < MEMBERS; m++) {
			struct slot *s = &b->slot[m];
			unsigned long seq = atomic_load(&s->seq), addr, tag;
			char c;
			int ok;

			if (m == me || !(seq & 1))
				continue;	/* ours, or none live */
			addr = atomic_load(&s->addr);
			tag = atomic_load(&s->tag);
			ok = probe_read((volatile char *)addr, &c) == 0;
			if (atomic_load(&s->seq) != seq)
				continue;	/* unmapped meanwhile */
			if (!ok)
				bad("checker: live region %lx faulted (tag %lx)", addr, tag);
			else if (*(volatile unsigned long *)addr != tag &&
				 atomic_load(&s->seq) == seq)
				bad("checker: region %lx lost its tag %lx", addr, tag);
			else
				atomic_fetch_add(&b->checked, 1);
		}
		sched_yield();
	}
}

static void private_thread(int me)
{
	while (!atomic_load(&b->stop)) {
		unsigned long want = (unsigned long)me * 1000003 + atomic_load(&b->private_rounds);
		unsigned long *q;

		private_global = want;
		q = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (q == MAP_FAILED) {
			bad("private: mmap (errno %lu, member %lu)", errno, me);
			return;
		}
		for (int i = 0; i < 4; i++)
			q[i * PAGE / sizeof(*q)] = want + i;
		for (int i = 0; i < 4; i++)
			if (q[i * PAGE / sizeof(*q)] != want + i)
				bad("private: page %lu lost its value (member %lu)", i, me);
		munmap(q, 4 * PAGE);
		if (private_global != want)
			bad("private: global changed under us (%lx, member %lu)", private_global, me);
		atomic_fetch_add(&b->private_rounds, 1);
	}
}

struct job {
	int member, kind;
};

static void *thread_main(void *arg)
{
	struct job *j = arg;

	atomic_fetch_add(&b->ready, 1);
	while (!atomic_load(&b->go))
		sched_yield();
	if (j->kind == 0)
		mapper(j->member);
	else if (j->kind == 1)
		checker(j->member);
	else
		private_thread(j->member);
	atomic_fetch_add(&b->finished, 1);
	return NULL;
}

/* One member: THREADS threads, then wait until the leader has counted. */
static void member(int me)
{
	pthread_t t[THREADS];
	struct job j[THREADS];

	for (int i = 0; i < THREADS; i++) {
		j[i] = (struct job){ me, i };
		if (pthread_create(&t[i], NULL, thread_main, &j[i])) {
			bad("pthread_create failed (member %lu, thread %lu)", me, i);
			atomic_fetch_add(&b->ready, 1);
			atomic_fetch_add(&b->finished, 1);
			t[i] = 0;
		}
	}
	for (int i = 0; i < THREADS; i++)
		if (t[i])
			pthread_join(t[i], NULL);
}

static void *leader_member(void *arg)
{
	member(0);
	return arg;
}

TEST(threads_of_members_switch_concurrently)
{
	pid_t pids[MEMBERS];
	char set[32];
	long s0, s1;

	if (!hp_supported())
		SKIP(return, "halfproc module not loaded");
	probe_init();
	b = hp_anon(sizeof(*b));
	ASSERT_NE(MAP_FAILED, (void *)b);
	memset(b, 0, sizeof(*b));
	snprintf(set, sizeof(set), "%ld", newest_set());
	for (int m = 1; m < MEMBERS; m++) {
		pids[m] = hp_spawn();
		ASSERT_LE(0, pids[m]);
		if (pids[m] == 0) {
			private_global = 0xdead0000 + m;
			member(m);
			while (!atomic_load(&b->done))
				usleep(1000);
			_exit(0);
		}
	}
	pthread_t lead;

	ASSERT_EQ(0, pthread_create(&lead, NULL, leader_member, NULL));
	while (atomic_load(&b->ready) < MEMBERS * THREADS)
		usleep(1000);
	s0 = counter(set, "switches");
	atomic_store(&b->go, 1);
	usleep(RUN_MS * 1000);
	atomic_store(&b->stop, 1);
	pthread_join(lead, NULL);
	while (atomic_load(&b->finished) < MEMBERS * THREADS)
		usleep(1000);
	s1 = counter(set, "switches");
	atomic_store(&b->done, 1);
	for (int m = 1; m < MEMBERS; m++)
		EXPECT_EQ(0, wait_status(pids[m]));
	TH_LOG("%ld meta-operations (up to %ld at once), %ld switches, %ld checked reads, %ld private rounds",
	       atomic_load(&b->meta_ops), atomic_load(&b->max_inflight), s1 - s0,
	       atomic_load(&b->checked), atomic_load(&b->private_rounds));
	EXPECT_EQ(0, atomic_load(&b->errors)) TH_LOG("first: %s", b->why);
	if (s0 >= 0 && s1 >= 0)
		EXPECT_EQ(atomic_load(&b->meta_ops), s1 - s0);
	EXPECT_LE(2, atomic_load(&b->max_inflight));
	EXPECT_LT(0, atomic_load(&b->checked));
	EXPECT_LT(0, atomic_load(&b->private_rounds));
}

TEST_HARNESS_MAIN
