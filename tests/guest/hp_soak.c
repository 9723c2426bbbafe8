// SPDX-License-Identifier: GPL-2.0
/*
 * Soak: random meta-operations across the members of one set, with kills.
 * MEMBERS members with two threads each pick, at random and without any
 * coordination, among: map a region in the range (MAP_HALFPROC), unmap,
 * mprotect, madvise(DONTNEED), mremap, touch pages (faults on whatever is
 * mapped at that moment, SIGSEGV caught), futex wait/wake on range words,
 * dmread of another member's private memory, a new member that lives
 * briefly, and exec of this program as a short-lived member.  The leader
 * kills a random member with SIGKILL every few hundred milliseconds (while
 * its threads are inside any of these) and starts a replacement.
 *
 * Checks: every call returns success or an errno the operation documents
 * for the race it lost (EINVAL/ENOMEM/EFAULT/... listed per call), each
 * member's canary page in the range keeps its pattern (written by the
 * member only), every member ends, the set is gone afterwards, and the
 * kernel reports nothing (the harness scans the console).
 *
 * Duration: halfproc.soak=SECONDS on the kernel command line (`scripts/test
 * --soak`: 600), else 20 s in the suite.
 */
#include "../lib/halfproc_test.h"
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include "kselftest_harness.h"

#define MEMBERS		4
#define SLOTS		32		/* region slots in the shared table */
#define SLOT_PAGES	8
#define KILL_EVERY_MS	300

/* Shared by all members: in the range, made before the first member. */
struct board {
	atomic_ulong slot[SLOTS];	/* address of a region, or 0 */
	atomic_uint futex[SLOTS];
	atomic_int pids[MEMBERS];
	atomic_int stop;
	atomic_long ops, errors, kills, execs;
	char canary[MEMBERS][PAGE] __attribute__((aligned(4096)));
	char why[256];
};

static struct board *b;
static const char *self_exe = "/proc/self/exe";
static char private_page[PAGE] = "private";

static unsigned long rnd(unsigned long *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void bad(const char *what, int err)
{
	if (atomic_fetch_add(&b->errors, 1) == 0)
		snprintf(b->why, sizeof(b->why), "%s: %s", what, strerror(err));
}

/* A failed call is fine when it lost a race the errno names. */
static void check(long rc, const char *what, int e1, int e2)
{
	if (rc < 0 && errno != e1 && errno != e2)
		bad(what, errno);
}

static int soak_seconds(void)
{
	char line[1024] = "";
	FILE *f = fopen("/proc/cmdline", "r");
	char *p;

	if (f) {
		if (!fgets(line, sizeof(line), f))
			line[0] = 0;
		fclose(f);
	}
	p = strstr(line, "halfproc.soak=");
	return p ? atoi(p + strlen("halfproc.soak=")) : 20;
}

static void one_op(unsigned long *s, int me)
{
	int i = rnd(s) % SLOTS;
	unsigned long a = atomic_load(&b->slot[i]);
	char *p = (char *)a, got;
	struct timespec ts = { 0, 1000000 };
	long rc;

	switch (rnd(s) % 12) {
	case 0:	/* map a region into an empty slot */
	case 1:
		if (a)
			break;
		p = hp_anon(SLOT_PAGES * PAGE);
		if (p == MAP_FAILED) {
			check(-1, "mmap(MAP_HALFPROC)", ENOMEM, ENOMEM);
			break;
		}
		if (!atomic_compare_exchange_strong(&b->slot[i], &a, (unsigned long)p))
			check(munmap(p, SLOT_PAGES * PAGE), "munmap(own)", 0, 0);
		break;
	case 2:	/* unmap a region someone may be using */
		if (a && atomic_compare_exchange_strong(&b->slot[i], &a, 0))
			check(munmap(p, SLOT_PAGES * PAGE), "munmap", 0, 0);
		break;
	case 3:	/* mprotect part of it (the region may be gone: ENOMEM) */
		if (a)
			check(mprotect(p + (rnd(s) % SLOT_PAGES) * PAGE, PAGE,
				       rnd(s) & 1 ? PROT_READ : PROT_READ | PROT_WRITE),
			      "mprotect", ENOMEM, ENOMEM);
		break;
	case 4:
		if (a)
			check(madvise(p, SLOT_PAGES * PAGE, MADV_DONTNEED), "madvise",
			      ENOMEM, EINVAL);
		break;
	case 5: {	/* mremap a page of it within the region (may be gone) */
		void *r;

		if (!a)
			break;
		r = mremap(p + PAGE, PAGE, PAGE, MREMAP_MAYMOVE | MREMAP_FIXED,
			   p + (SLOT_PAGES - 1) * PAGE);
		check(r == MAP_FAILED ? -1 : 0, "mremap", EFAULT, EINVAL);
		break;
	}
	case 6:	/* touch: faults on whatever is mapped now */
	case 7:
		if (!a)
			break;
		for (int k = 0; k < SLOT_PAGES; k++) {
			if (rnd(s) & 1)
				probe_write(p + k * PAGE + 8 * me, (char)me);
			else
				probe_read(p + k * PAGE, &got);
		}
		break;
	case 8:	/* futexes in the range */
		if (rnd(s) & 1) {
			rc = syscall(SYS_futex, &b->futex[i], FUTEX_WAIT, 0, &ts, NULL, 0);
			check(rc, "futex wait", ETIMEDOUT, EAGAIN);
		} else {
			atomic_fetch_add(&b->futex[i], 1);
			check(syscall(SYS_futex, &b->futex[i], FUTEX_WAKE, 1, NULL, NULL, 0),
			      "futex wake", 0, 0);
		}
		break;
	case 9: {	/* dmread of another member's private page */
		pid_t pid = atomic_load(&b->pids[rnd(s) % MEMBERS]);
		char buf[64];

		if (pid > 0) {
			rc = dmread(pid, private_page, sizeof(buf), buf);
			/* It may just have been killed or be exiting. */
			check(rc, "dmread", ESRCH, EFAULT);
			if (rc == (long)sizeof(buf) && strcmp(buf, "private"))
				bad("dmread returned wrong data", 0);
		}
		break;
	}
	case 10: {	/* a short-lived member */
		pid_t pid = hp_spawn();

		if (pid == 0)
			_exit(probe_read(b->canary[me], &got) == 0 ? 0 : 1);
		if (pid < 0)
			check(-1, "clone3(CLONE_HALFPROC)", EAGAIN, ENOMEM);
		else if (wait_status(pid) != 0)
			bad("short-lived member did not see the range", 0);
		break;
	}
	case 11: {	/* exec as a member (one thread only: exec kills siblings) */
		pid_t pid;

		if (rnd(s) % 8)
			break;
		pid = hp_spawn();
		if (pid == 0) {
			char arg[32];

			snprintf(arg, sizeof(arg), "%p", (void *)b);
			execl(self_exe, self_exe, "--exec-probe", arg, (char *)NULL);
			_exit(99);
		}
		if (pid < 0)
			check(-1, "clone3 for exec", EAGAIN, ENOMEM);
		else if (wait_status(pid) != 0)
			bad("exec'd member did not see the range", 0);
		else
			atomic_fetch_add(&b->execs, 1);
		break;
	}
	}
	atomic_fetch_add(&b->ops, 1);
}

struct worker {
	int me;
	unsigned long seed;
};

static void *work(void *arg)
{
	struct worker *w = arg;

	while (!atomic_load(&b->stop)) {
		one_op(&w->seed, w->me);
		if (memcmp(b->canary[w->me], "canary", 7))
			bad("a member's canary page changed", 0);
	}
	return NULL;
}

static void member(int me, unsigned long seed)
{
	struct worker w[2] = { { me, seed }, { me, seed * 31 + 7 } };
	pthread_t t;

	strcpy(b->canary[me], "canary");
	if (pthread_create(&t, NULL, work, &w[1]))
		_exit(3);
	work(&w[0]);
	pthread_join(t, NULL);
	_exit(0);
}

static pid_t start_member(int me, unsigned long seed)
{
	pid_t pid = hp_spawn();

	if (pid == 0)
		member(me, seed);
	if (pid > 0)
		atomic_store(&b->pids[me], pid);
	return pid;
}

FIXTURE(soak) {};
FIXTURE_SETUP(soak) {}
FIXTURE_TEARDOWN(soak) {}

/* The harness's limit: the 10-minute soak of scripts/test --soak, and more. */
TEST_F_TIMEOUT(soak, random_meta_operations_with_kills, 900)
{
	int seconds = soak_seconds(), refs, i;
	unsigned long seed = time(NULL) | 1;
	struct timespec t0, now;
	pid_t leader;

	REQUIRE_HALFPROC();
	refs = hp_module_refs();
	TH_LOG("%d s, %d members x 2 threads, a kill every %d ms, seed %lu", seconds,
	       MEMBERS, KILL_EVERY_MS, seed);
	/* The leader makes the set; this process stays outside it. */
	leader = fork();
	ASSERT_LE(0, leader);
	if (leader == 0) {
		b = hp_anon(sizeof(*b));
		if (b == MAP_FAILED)
			_exit(4);
		for (i = 0; i < MEMBERS; i++)
			if (start_member(i, seed + i) < 0)
				_exit(5);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		do {
			int st;
			pid_t pid;

			usleep(KILL_EVERY_MS * 1000);
			i = rnd(&seed) % MEMBERS;
			kill(atomic_load(&b->pids[i]), SIGKILL);
			pid = waitpid(atomic_load(&b->pids[i]), &st, 0);
			if (pid < 0 || !WIFSIGNALED(st)) {
				/* A member only ends by its kill while the soak runs. */
				bad("a member ended on its own", 0);
				break;
			}
			atomic_fetch_add(&b->kills, 1);
			if (start_member(i, rnd(&seed)) < 0)
				_exit(6);
			clock_gettime(CLOCK_MONOTONIC, &now);
		} while (now.tv_sec - t0.tv_sec < seconds && !atomic_load(&b->errors));
		atomic_store(&b->stop, 1);
		for (i = 0; i < MEMBERS; i++) {
			int st = wait_status(atomic_load(&b->pids[i]));

			if (st != 0)
				bad("a member did not end cleanly at the stop", 0);
		}
		printf("# %ld operations, %ld kills, %ld execs, %ld errors%s%s\n",
		       atomic_load(&b->ops), atomic_load(&b->kills), atomic_load(&b->execs),
		       atomic_load(&b->errors), b->errors ? ": " : "", b->why);
		_exit(atomic_load(&b->errors) || atomic_load(&b->kills) < 2 ? 1 : 0);
	}
	ASSERT_EQ(0, wait_status(leader));
	/* The set is gone with its last member (it holds a module reference). */
	for (i = 0; i < 50 && hp_module_refs() > refs; i++)
		usleep(100000);
	/* Sets of earlier tests may have gone meanwhile, never ours stayed. */
	ASSERT_GE(refs, hp_module_refs());
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--exec-probe")) {
		/* A member's exec: the board is still where it was. */
		struct board *p = (struct board *)strtoull(argv[2], NULL, 0);
		char got;

		_exit(probe_read((char *)p->canary[0], &got) == 0 ? 0 : 1);
	}
	return test_harness_run(argc, argv);
}
