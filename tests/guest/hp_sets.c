// SPDX-License-Identifier: GPL-2.0
/*
 * Half-process sets: membership, placement, semantics I and II, futexes,
 * lifecycle and leaks (exec: hp_exec.c).  Every semantics-I check touches the memory in
 * the observing member first, so a stale TLB entry would let the access
 * through after the other member's call returned.
 */
#include "../lib/halfproc_test.h"
#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include "kselftest_harness.h"

#define MB (1UL << 20)

TEST(clone_flag_rules)
{
	pid_t pid;

	REQUIRE_HALFPROC();
	errno = 0;
	ASSERT_EQ(-1, hp_clone(CLONE_HALFPROC | CLONE_VM));
	ASSERT_EQ(EINVAL, errno);
	errno = 0;
	ASSERT_EQ(-1, hp_clone(CLONE_HALFPROC | CLONE_VM | CLONE_SIGHAND |
			       CLONE_THREAD));
	ASSERT_EQ(EINVAL, errno);
	pid = hp_spawn();
	ASSERT_GE(pid, 0);
	if (pid == 0)
		_exit(7);
	ASSERT_EQ(7, wait_status(pid));
}

TEST(map_lands_in_range)
{
	char *p, *q, *hint = (char *)(HALFPROC_RANGE_START + (1ULL << 40));

	REQUIRE_HALFPROC();
	p = hp_anon(MB);
	ASSERT_NE(MAP_FAILED, p);
	ASSERT_TRUE(in_range(p, MB));
	memset(p, 0x5a, MB);
	ASSERT_EQ(0x5a, p[MB - 1]);

	q = hp_mmap(hint, MB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
	ASSERT_EQ(hint, q);
	q = hp_mmap(hint, MB, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE);
	ASSERT_EQ(MAP_FAILED, q);
	ASSERT_EQ(EEXIST, errno);
	q = hp_mmap(hint, MB, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED);
	ASSERT_EQ(hint, q);

	/* A hint outside the range is ignored. */
	q = hp_mmap((void *)0x10000000, MB, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS);
	ASSERT_NE(MAP_FAILED, q);
	ASSERT_TRUE(in_range(q, MB));

	/* Errors. */
	errno = 0;
	ASSERT_EQ(MAP_FAILED, hp_mmap((void *)0x10000000, MB, PROT_READ,
				      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED));
	ASSERT_EQ(EINVAL, errno);
	errno = 0;
	ASSERT_EQ(MAP_FAILED, hp_mmap((void *)(HALFPROC_RANGE_END - PAGE), 2 * PAGE,
				      PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED));
	ASSERT_EQ(EINVAL, errno);
	errno = 0;
	ASSERT_EQ(MAP_FAILED, hp_mmap(NULL, MB, PROT_READ,
				      MAP_PRIVATE | MAP_ANONYMOUS | MAP_GROWSDOWN));
	ASSERT_EQ(EINVAL, errno);
}

TEST(private_mappings_stay_out)
{
	char *p, *in = (char *)(HALFPROC_RANGE_START + (2ULL << 40));

	REQUIRE_HALFPROC();
	ASSERT_NE(MAP_FAILED, hp_anon(PAGE));	/* now a member */
	errno = 0;
	p = mmap(in, PAGE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	ASSERT_EQ(MAP_FAILED, p);
	ASSERT_EQ(EINVAL, errno);
	p = mmap(in, PAGE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, p);
	ASSERT_FALSE(in_range(p, PAGE));
	/* Calls straddling the boundary. */
	errno = 0;
	ASSERT_EQ(-1, munmap((void *)(HALFPROC_RANGE_START - PAGE), 2 * PAGE));
	ASSERT_EQ(EINVAL, errno);
	errno = 0;
	ASSERT_EQ(-1, mprotect((void *)(HALFPROC_RANGE_END - PAGE), 2 * PAGE, PROT_READ));
	ASSERT_EQ(EINVAL, errno);
	/* mremap across the boundary, both ways. */
	errno = 0;
	ASSERT_EQ(MAP_FAILED, mremap(p, PAGE, PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, in));
	ASSERT_EQ(EINVAL, errno);
	{
		char *s = hp_anon(PAGE);

		ASSERT_NE(MAP_FAILED, s);
		errno = 0;
		ASSERT_EQ(MAP_FAILED, mremap(s, PAGE, PAGE, MREMAP_MAYMOVE | MREMAP_FIXED,
					     (void *)0x20000000));
		ASSERT_EQ(EINVAL, errno);
	}
}

TEST(busy_range_blocks_set_creation)
{
	char *p;

	REQUIRE_HALFPROC();
	/* Outside any set the range is ordinary memory... */
	p = mmap((void *)HALFPROC_RANGE_START, PAGE, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	ASSERT_EQ((void *)HALFPROC_RANGE_START, p);
	/* ...but then this process cannot start a set. */
	errno = 0;
	ASSERT_EQ(MAP_FAILED, hp_anon(PAGE));
	ASSERT_EQ(EBUSY, errno);
	errno = 0;
	ASSERT_EQ(-1, hp_spawn());
	ASSERT_EQ(EBUSY, errno);
	ASSERT_EQ(0, munmap(p, PAGE));
	ASSERT_NE(MAP_FAILED, hp_anon(PAGE));
}

TEST(shmem_and_memfd_mappings)
{
	char *a, *f;
	int fd;
	pid_t pid;

	REQUIRE_HALFPROC();
	a = hp_mmap(NULL, MB, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS);
	ASSERT_NE(MAP_FAILED, a);
	ASSERT_TRUE(in_range(a, MB));
	fd = memfd_create("hp", 0);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(0, ftruncate(fd, MB));
	f = mmap(NULL, MB, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_HALFPROC, fd, 0);
	ASSERT_NE(MAP_FAILED, f);
	ASSERT_TRUE(in_range(f, MB));
	pid = hp_spawn();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		a[100] = 'a';
		f[200] = 'f';
		_exit(msync(f, MB, MS_SYNC) ? 1 : 0);
	}
	ASSERT_EQ(0, wait_status(pid));
	ASSERT_EQ('a', a[100]);
	ASSERT_EQ('f', f[200]);
	{
		char c = 0;

		ASSERT_EQ(1, pread(fd, &c, 1, 200));
		ASSERT_EQ('f', c);
	}
}

TEST(plain_children_are_not_members)
{
	char *p, c;
	pid_t pid;

	REQUIRE_HALFPROC();
	p = hp_anon(PAGE);
	ASSERT_NE(MAP_FAILED, p);
	p[0] = 'P';
	pid = hp_clone(0);
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		char *q;

		if (probe_read(p, &c) == 0)
			_exit(1);	/* saw the parent's set */
		q = hp_anon(PAGE);	/* its own, new set */
		if (q == MAP_FAILED || !in_range(q, PAGE))
			_exit(2);
		q[0] = 'C';
		_exit(0);
	}
	ASSERT_EQ(0, wait_status(pid));
	ASSERT_EQ('P', p[0]);

	/* A plain fork of a member is not a member either. */
	pid = hp_spawn();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		pid_t g = hp_clone(0);

		if (g == 0)
			_exit(probe_read(p, &c) == 0 ? 1 : 0);
		_exit(wait_status(g) == 0 && p[0] == 'P' ? 0 : 3);
	}
	ASSERT_EQ(0, wait_status(pid));
}

struct node {
	struct node *next;
	long value;
};

TEST(pointer_structures_cross_members)
{
	char *arena;
	struct node **head;
	size_t used = 64;
	pid_t pid;
	long sum = 0, want = 0;

	REQUIRE_HALFPROC();
	arena = hp_anon(16 * MB);
	ASSERT_NE(MAP_FAILED, arena);
	head = (struct node **)arena;
	for (long i = 1; i <= 1000; i++) {
		struct node *n = (struct node *)(arena + used);

		used += sizeof(*n);
		n->value = i;
		n->next = *head;
		*head = n;
		want += i;
	}
	pid = hp_spawn();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		long s = 0;

		for (struct node *n = *head; n; n = n->next)
			s += n->value;
		if (s != want)
			_exit(1);
		/* Extend the list with nodes the parent must walk. */
		for (long i = 0; i < 1000; i++) {
			struct node *n = (struct node *)(arena + 8 * MB + i * sizeof(*n));

			n->value = 2;
			n->next = *head;
			*head = n;
		}
		_exit(0);
	}
	ASSERT_EQ(0, wait_status(pid));
	for (struct node *n = *head; n; n = n->next)
		sum += n->value;
	ASSERT_EQ(want + 2000, sum);
}

/*
 * Semantics I: member A changes the mapping, member B (which touched the
 * memory first, so its TLB may hold it) checks it right after A's call.
 */
enum op { OP_MUNMAP, OP_MPROTECT, OP_DONTNEED, OP_MREMAP };

static int observe(enum op op, char *p, char *moved, struct chan *c, int in_child)
{
	char v = 0;
	volatile char *vp = p;

	/* Touch: read and write, so both translations are cached. */
	vp[0] = 'x';
	vp[PAGE] = 'y';
	v = vp[0];
	(void)v;
	if (in_child) {
		tell_parent(c, 'r');
		from_parent(c);
	} else {
		tell_child(c, 'r');
		from_child(c);
	}
	switch (op) {
	case OP_MUNMAP:
		return probe_read(p, &v) == -1 ? 0 : 10;
	case OP_MPROTECT:
		if (probe_write(p, 'z') != -1)
			return 11;
		return probe_read(p, &v) == 0 && v == 'x' ? 0 : 12;
	case OP_DONTNEED:
		return probe_read(p, &v) == 0 && v == 0 ? 0 : 13;
	case OP_MREMAP:
		if (probe_read(p, &v) != -1)
			return 14;
		return moved[0] == 'x' && moved[PAGE] == 'y' ? 0 : 15;
	}
	return 16;
}

static int act(enum op op, char *p, char *moved)
{
	switch (op) {
	case OP_MUNMAP:
		return munmap(p, 2 * PAGE);
	case OP_MPROTECT:
		return mprotect(p, 2 * PAGE, PROT_READ);
	case OP_DONTNEED:
		return madvise(p, 2 * PAGE, MADV_DONTNEED);
	case OP_MREMAP:
		return mremap(p, 2 * PAGE, 2 * PAGE, MREMAP_MAYMOVE | MREMAP_FIXED,
			      moved) == moved ? 0 : -1;
	}
	return -1;
}

static void semantics_i(struct __test_metadata *_metadata, enum op op, int child_acts)
{
	char *p, *moved = (char *)(HALFPROC_RANGE_START + (5ULL << 40));
	struct chan c;
	pid_t pid;

	p = hp_anon(2 * PAGE);
	ASSERT_NE(MAP_FAILED, p);
	ASSERT_EQ(0, chan_open(&c));
	pid = hp_spawn();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		if (child_acts) {
			from_parent(&c);	/* parent touched */
			if (act(op, p, moved)) {
				printf("# child: op %d failed: %s\n", op, strerror(errno));
				_exit(20);
			}
			tell_parent(&c, 'd');
			_exit(0);
		}
		_exit(observe(op, p, moved, &c, 1));
	}
	if (child_acts) {
		ASSERT_EQ(0, observe(op, p, moved, &c, 0));
	} else {
		from_child(&c);
		ASSERT_EQ(0, act(op, p, moved)) {
			TH_LOG("op %d: %s", op, strerror(errno));
		}
		tell_child(&c, 'd');
	}
	ASSERT_EQ(0, wait_status(pid));
}

TEST(munmap_reaches_other_member) { REQUIRE_HALFPROC(); semantics_i(_metadata, OP_MUNMAP, 0); }
TEST(munmap_by_child_reaches_parent) { REQUIRE_HALFPROC(); semantics_i(_metadata, OP_MUNMAP, 1); }
TEST(mprotect_reaches_other_member) { REQUIRE_HALFPROC(); semantics_i(_metadata, OP_MPROTECT, 0); }
TEST(mprotect_by_child_reaches_parent) { REQUIRE_HALFPROC(); semantics_i(_metadata, OP_MPROTECT, 1); }
TEST(dontneed_reaches_other_member) { REQUIRE_HALFPROC(); semantics_i(_metadata, OP_DONTNEED, 0); }
TEST(dontneed_by_child_reaches_parent) { REQUIRE_HALFPROC(); semantics_i(_metadata, OP_DONTNEED, 1); }
TEST(mremap_reaches_other_member) { REQUIRE_HALFPROC(); semantics_i(_metadata, OP_MREMAP, 0); }
TEST(mremap_by_child_reaches_parent) { REQUIRE_HALFPROC(); semantics_i(_metadata, OP_MREMAP, 1); }

TEST(mlock_msync_on_shared_range)
{
	char *p;
	pid_t pid;

	REQUIRE_HALFPROC();
	p = hp_mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS);
	ASSERT_NE(MAP_FAILED, p);
	pid = hp_spawn();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		if (mlock(p, 4 * PAGE))
			_exit(1);
		if (msync(p, 4 * PAGE, MS_SYNC))
			_exit(2);
		if (munlock(p, 4 * PAGE))
			_exit(3);
		/* Unmapped shared-range address: ENOMEM, as for threads. */
		if (msync((void *)(HALFPROC_RANGE_START + (3ULL << 40)), PAGE, MS_SYNC) != -1 ||
		    errno != ENOMEM)
			_exit(4);
		_exit(0);
	}
	ASSERT_EQ(0, wait_status(pid));
	/* The child's mlock populated the pages for everyone. */
	ASSERT_EQ(0, mlock(p, PAGE));
	ASSERT_EQ(0, munlock(p, PAGE));
}

TEST(mbind_on_shared_range)
{
	unsigned long mask = 1;
	char *p;

	REQUIRE_HALFPROC();
	p = hp_anon(4 * PAGE);
	ASSERT_NE(MAP_FAILED, p);
	/* MPOL_BIND (2) to node 0. */
	if (syscall(__NR_mbind, p, 4 * PAGE, 2, &mask, 2, 0) && errno == ENOSYS)
		SKIP(return, "kernel without NUMA");
	ASSERT_EQ(0, syscall(__NR_mbind, p, 4 * PAGE, 2, &mask, 2, 0));
	p[0] = 1;
	errno = 0;
	/* Straddling the range's start: EINVAL, as for every meta-operation. */
	ASSERT_EQ(-1, syscall(__NR_mbind, HALFPROC_RANGE_START - PAGE, 2 * PAGE, 2,
			      &mask, 2, 0));
	ASSERT_EQ(EINVAL, errno);
}

TEST(one_fault_populates_all)
{
	const int pages = 256;
	char *p;
	struct chan c;
	pid_t pid;
	long before, faults;

	REQUIRE_HALFPROC();
	p = hp_anon(pages * PAGE);
	ASSERT_NE(MAP_FAILED, p);
	ASSERT_EQ(0, chan_open(&c));
	pid = hp_spawn();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		for (int i = 0; i < pages; i++)
			p[i * PAGE] = (char)i;
		tell_parent(&c, 'd');
		_exit(0);
	}
	from_child(&c);
	before = minflt();
	for (int i = 0; i < pages; i++)
		ASSERT_EQ((char)i, p[i * PAGE]);
	faults = minflt() - before;
	ASSERT_EQ(0, wait_status(pid));
	TH_LOG("%ld minor faults for %d pages populated by another member", faults, pages);
	ASSERT_LT(faults, pages / 16);
}

/* A three-state futex mutex (Drepper, "Futexes Are Tricky"). */
static void mutex_lock(atomic_int *m, int priv)
{
	int c = 0;

	if (atomic_compare_exchange_strong(m, &c, 1))
		return;
	if (c != 2)
		c = atomic_exchange(m, 2);
	while (c != 0) {
		syscall(SYS_futex, m, FUTEX_WAIT | priv, 2, NULL, NULL, 0);
		c = atomic_exchange(m, 2);
	}
}

static void mutex_unlock(atomic_int *m, int priv)
{
	if (atomic_fetch_sub(m, 1) != 1) {
		atomic_store(m, 0);
		syscall(SYS_futex, m, FUTEX_WAKE | priv, 1, NULL, NULL, 0);
	}
}

static void futex_contention(struct __test_metadata *_metadata, int priv)
{
	const long iters = 20000;
	struct { atomic_int lock; long counter; atomic_long waits; } *s;
	pid_t pids[2];

	s = hp_anon(PAGE);
	ASSERT_NE(MAP_FAILED, s);
	for (int k = 0; k < 2; k++) {
		pids[k] = hp_spawn();
		ASSERT_GE(pids[k], 0);
		if (pids[k] == 0) {
			for (long i = 0; i < iters; i++) {
				mutex_lock(&s->lock, priv);
				s->counter++;
				if (i % 64 == 0)
					sched_yield();	/* hold it across a switch */
				mutex_unlock(&s->lock, priv);
			}
			_exit(0);
		}
	}
	for (long i = 0; i < iters; i++) {
		mutex_lock(&s->lock, priv);
		s->counter++;
		mutex_unlock(&s->lock, priv);
	}
	ASSERT_EQ(0, wait_status(pids[0]));
	ASSERT_EQ(0, wait_status(pids[1]));
	ASSERT_EQ(3 * iters, s->counter);
}

TEST(futex_mutex_shared_flag) { REQUIRE_HALFPROC(); futex_contention(_metadata, 0); }
TEST(futex_mutex_private_flag) { REQUIRE_HALFPROC(); futex_contention(_metadata, FUTEX_PRIVATE_FLAG); }

TEST(futex_wake_reaches_waiter)
{
	atomic_int *w;
	pid_t pid;

	REQUIRE_HALFPROC();
	w = hp_anon(PAGE);
	ASSERT_NE(MAP_FAILED, w);
	pid = hp_spawn();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		struct timespec ts = { .tv_sec = 10 };

		while (atomic_load(w) == 0)
			if (syscall(SYS_futex, w, FUTEX_WAIT, 0, &ts, NULL, 0) &&
			    errno == ETIMEDOUT)
				_exit(1);
		_exit(0);
	}
	usleep(100000);
	atomic_store(w, 1);
	/* The waiter is asleep in another mm: the wake must find it. */
	while (syscall(SYS_futex, w, FUTEX_WAKE, 1, NULL, NULL, 0) == 0 &&
	       waitpid(pid, NULL, WNOHANG) == 0)
		usleep(1000);
	ASSERT_EQ(0, wait_status(pid));
}

TEST(set_outlives_first_member)
{
	int res[2];
	char r = 0;
	pid_t first;

	REQUIRE_HALFPROC();
	ASSERT_EQ(0, pipe(res));
	first = hp_clone(0);
	ASSERT_GE(first, 0);
	if (first == 0) {
		char *p = hp_anon(MB);	/* this process starts the set */
		/*
		 * Not getppid() in the child: if this process has exited
		 * before the child runs, that is the reaper, which never goes.
		 */
		pid_t f = getpid();
		pid_t m;

		strcpy(p, "kept");
		m = hp_spawn();
		if (m == 0) {
			char *q;

			/* Wait until the first member is gone (and reaped). */
			while (kill(f, 0) == 0)
				usleep(10000);
			q = hp_anon(MB);
			r = (q != MAP_FAILED && strcmp(p, "kept") == 0) ? 'k' : 'f';
			q[0] = 1;
			if (write(res[1], &r, 1) != 1)
				_exit(1);
			_exit(0);
		}
		_exit(m > 0 ? 0 : 1);	/* first member exits early */
	}
	ASSERT_EQ(0, wait_status(first));
	ASSERT_EQ(1, read(res[0], &r, 1));
	ASSERT_EQ('k', r);
}

/* Whether /proc/<pid>/<file> lists a mapping that covers the address @p. */
static int proc_lists(pid_t pid, const char *file, void *p)
{
	unsigned long a = (unsigned long)p, start, end;
	char path[64], line[512];
	int found = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/%s", pid, file);
	f = fopen(path, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%lx-%lx ", &start, &end) == 2 && start <= a && a < end)
			found = 1;
	fclose(f);
	return found;
}

TEST(proc_maps_show_shared_range)
{
	char *p, *q;
	pid_t pid;
	struct chan c;

	REQUIRE_HALFPROC();
	p = hp_anon(4 * PAGE);
	ASSERT_NE(MAP_FAILED, p);
	memset(p, 1, 4 * PAGE);
	ASSERT_EQ(0, chan_open(&c));
	pid = hp_spawn();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		char *m = hp_anon(PAGE);

		*(char **)p = m;	/* tell the parent where */
		tell_parent(&c, 'm');
		from_parent(&c);
		/* The parent's mapping shows in the child's maps and smaps. */
		_exit(proc_lists(getpid(), "maps", p) &&
		      proc_lists(getpid(), "smaps", p) &&
		      proc_lists(getpid(), "maps", m) ? 0 : 1);
	}
	from_child(&c);
	q = *(char **)p;
	if (!proc_lists(getpid(), "maps", p)) {
		char line[512];
		FILE *f = fopen("/proc/self/maps", "r");

		TH_LOG("%p not in maps:", p);
		while (f && fgets(line, sizeof(line), f))
			TH_LOG("  %s", line);
		if (f)
			fclose(f);
	}
	/* The child's mapping shows in ours, and in ours seen from the child. */
	ASSERT_TRUE(proc_lists(getpid(), "maps", q));
	ASSERT_TRUE(proc_lists(getpid(), "maps", p));
	ASSERT_TRUE(proc_lists(pid, "maps", p));
	/* Private mappings above the range are still listed after it. */
	{
		char line[512];
		int stack = 0;
		FILE *f = fopen("/proc/self/maps", "r");

		ASSERT_NE(NULL, f);
		while (fgets(line, sizeof(line), f))
			stack |= strstr(line, "[stack]") != NULL;
		fclose(f);
		ASSERT_TRUE(stack);
	}
	tell_child(&c, 'g');
	ASSERT_EQ(0, wait_status(pid));
}

TEST(no_leak_after_many_sets)
{
	long pt0 = 0, sun0 = 0, anon0 = 0, free0 = 0, pt1, sun1, anon1, free1;
	const int rounds = 128;

	REQUIRE_HALFPROC();
	/* Warm up allocator caches, then take the baseline. */
	for (int i = 0; i < 2 * rounds + 1; i++) {
		pid_t a = hp_clone(0);

		if (a == 0) {
			char *p = hp_anon(2 * MB);
			pid_t m;

			memset(p, 1, 2 * MB);
			m = hp_spawn();
			if (m == 0) {
				memset(p, 2, MB);
				_exit(0);
			}
			_exit(wait_status(m));
		}
		ASSERT_EQ(0, wait_status(a));
		if (i == rounds) {
			pt0 = meminfo_exact("PageTables");
			sun0 = meminfo_exact("SUnreclaim");
			anon0 = meminfo_exact("AnonPages") + meminfo_exact("AnonHugePages");
			free0 = meminfo_exact("MemFree");
		}
	}
	pt1 = meminfo_exact("PageTables");
	sun1 = meminfo_exact("SUnreclaim");
	anon1 = meminfo_exact("AnonPages") + meminfo_exact("AnonHugePages");
	free1 = meminfo_exact("MemFree");
	TH_LOG("over %d sets: PageTables %ld -> %ld kB, SUnreclaim %ld -> %ld kB, anon %ld -> %ld kB, MemFree %ld -> %ld kB",
	       rounds, pt0, pt1, sun0, sun1, anon0, anon1, free0, free1);
	ASSERT_LT(0, pt1);
	ASSERT_LT(0, sun1);
	/*
	 * What a set holds, by the counter it is in: 64 PUD tables (256 kB)
	 * plus PMD and PTE tables (PageTables), the set mm, the set and its
	 * debugfs entries (unreclaimable slab), 2 MB of data (anonymous
	 * pages).  The counters are read exact (vmstat folded): unfolded,
	 * PageTables wandered by up to +-190 kB with no leak at all.  Measured
	 * over 128 sets, 4 runs in one boot (2026-11-24): PageTables 0,
	 * SUnreclaim +4/+4/0/0 kB.  So one page-table page per set (512 kB
	 * here) or one 512-byte object per set (64 kB) is over its bound, and
	 * one set's data (256 MB) far over the anonymous bound.
	 *
	 * MemFree is logged, not judged: in the same 4 runs it moved by
	 * -11808, +3816, -4452 and -4752 kB with slab and page tables still
	 * (pages on per-CPU free lists are not counted as free), and a CI run
	 * failed the old 12 MB bound on MemFree at -12820 kB.
	 */
	ASSERT_LT(pt1 - pt0, 64);
	ASSERT_LT(sun1 - sun0, 64);
	ASSERT_LT(anon1 - anon0, 16 * 1024);
}

/*
 * A set of 256 processes: its member list outgrows what one small kmalloc
 * holds (152-byte entries; it is kvmalloc'd, so growing never needs
 * high-order memory).  Each member writes its slot of a shared page and
 * checks everyone's once all have; the set goes with the last of them.
 */
TEST(set_of_256_members)
{
	const int n = 256;
	int refs0;
	pid_t a;

	REQUIRE_HALFPROC();
	refs0 = hp_module_refs();
	a = hp_clone(0);
	ASSERT_GE(a, 0);
	if (a == 0) {
		volatile int *slot = hp_anon(PAGE);
		int up[2], down[2], bad = 0;
		pid_t m[256];
		char c;

		if (slot == MAP_FAILED || pipe(up) || pipe(down))
			_exit(10);
		slot[0] = 1;
		for (int i = 1; i < n; i++) {
			m[i] = hp_spawn();
			if (m[i] < 0)
				_exit(11);
			if (m[i] == 0) {
				close(down[1]);
				slot[i] = i + 1;
				if (write(up[1], "x", 1) != 1)
					_exit(20);
				/* EOF once every member has written. */
				if (read(down[0], &c, 1) != 0)
					_exit(21);
				for (int j = 0; j < n; j++)
					if (slot[j] != j + 1)
						_exit(22);
				_exit(0);
			}
		}
		close(up[1]);
		for (int i = 1; i < n; i++)
			if (read(up[0], &c, 1) != 1)
				_exit(12);
		for (int j = 0; j < n; j++)
			if (slot[j] != j + 1)
				_exit(13);
		close(down[1]);
		for (int i = 1; i < n; i++)
			if (wait_status(m[i]) != 0)
				bad++;
		_exit(bad ? 14 : 0);
	}
	ASSERT_EQ(0, wait_status(a));
	/* The last member's exit released the set, and its module reference. */
	ASSERT_EQ(refs0, hp_module_refs());
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	return test_harness_run(argc, argv);
}
