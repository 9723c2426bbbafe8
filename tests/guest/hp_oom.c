// SPDX-License-Identifier: GPL-2.0
/*
 * The OOM killer and a set (docs/design-mm.md, "OOM badness").  A member's
 * badness counts the set's memory only in an OOM that can free it: a
 * system-wide one, or one of the set's memory cgroup or an ancestor of it;
 * and only when every process of the set can be killed.  A member chosen
 * with the set's memory in its badness takes every other member with it,
 * as the processes sharing one mm are killed together.
 *
 * Every OOM here is a memory cgroup's (memory.max), never the guest's: a
 * hog in a cgroup allocates private memory until it is killed or done, and
 * which processes die, and how many OOM kills memory.events counts, say
 * which were chosen.  The processes of the set are the test's children
 * (CLONE_PARENT), so it can tell a killed one from a live one.  Skips
 * without the cgroup v2 memory controller.
 */
#include "../lib/halfproc_test.h"
#include "../lib/hp_cgroup.h"
#include "kselftest_harness.h"

#define MB (1UL << 20)
#define MAX_MEMBERS 4

/*
 * One process of the set: where it runs, its oom_score_adj, and whether it
 * loops over meta-operations on the range (switched to the set mm most of
 * the time) instead of sleeping.
 */
struct proc_spec {
	const char *cg;
	int adj;
	int busy;
};

/* A set: its creator (index 0) and members, all children of the test. */
struct scene {
	pid_t pid[1 + MAX_MEMBERS];
	int n;
};

/* What a process of the set reports when it is ready. */
struct ready {
	int index;
	pid_t pid;
};

static int set_adj(int adj)
{
	char v[16];

	snprintf(v, sizeof(v), "%d", adj);
	return cg_write("/proc/self", "oom_score_adj", v);
}

static int touch(char *p, size_t len)
{
	for (size_t i = 0; i < len; i += PAGE)
		p[i] = 1;
	return 0;
}

/*
 * A new member that is a sibling of the caller (CLONE_PARENT): the test's
 * own child.  clone3() wants exit_signal 0 with CLONE_PARENT; the child
 * takes the caller's (SIGCHLD).
 */
static pid_t spawn_sibling(void)
{
	struct clone_args args;

	memset(&args, 0, sizeof(args));
	args.flags = CLONE_HALFPROC | CLONE_PARENT;
	return syscall(__NR_clone3, &args, sizeof(args));
}

/* In a process of the set: join its cgroup, set its adj, report, wait. */
static void settle(const struct proc_spec *spec, int index, int up)
{
	struct ready r = { index, getpid() };
	char *q = NULL;

	if (spec->cg && cg_write(spec->cg, "cgroup.procs", "0"))
		_exit(30);
	if (spec->adj && set_adj(spec->adj))
		_exit(31);
	if (spec->busy) {
		q = hp_anon(4 * PAGE);
		if (q == MAP_FAILED)
			_exit(33);
		q[0] = 1;
	}
	if (write(up, &r, sizeof(r)) != sizeof(r))
		_exit(32);
	if (!spec->busy)
		for (;;)
			pause();
	/*
	 * Meta-operations on the range that charge nothing to the member's
	 * cgroup once the mapping is set up: no VMA is made or split, the
	 * anon_vma and the page table stay, and the page a fault brings is
	 * the set's (its cgroup).  A charge to the member's cgroup while the
	 * OOM victim exits could start a second OOM there that finds only the
	 * member: exit_mmap() sets MMF_OOM_SKIP on the victim's mm before
	 * tlb_finish_mmu() frees the pages it gathered (seen 2026-11-28 with
	 * a loop that mapped, split and unmapped: a second kill, the member,
	 * with the cgroup's usage at 2 of 32 MiB when it was reported).
	 */
	for (;;) {
		if (mprotect(q, 4 * PAGE, PROT_READ) ||
		    mprotect(q, 4 * PAGE, PROT_READ | PROT_WRITE))
			_exit(34);
		q[0] = 1;
		if (madvise(q, 4 * PAGE, MADV_DONTNEED))
			_exit(35);
	}
}

/*
 * A set whose creator, spec[0], faults @set_mb MiB in the range (charged to
 * the creator's cgroup), with @n - 1 members spec[1..].  Returns once all
 * are in place; 0 or -1.
 */
static int make_set(struct scene *sc, const struct proc_spec *spec, int n,
		    size_t set_mb)
{
	int up[2], got = 0;
	pid_t creator;

	if (pipe(up))
		return -1;
	sc->n = n;
	creator = fork();
	if (creator < 0)
		return -1;
	if (creator == 0) {
		char *s;

		close(up[0]);
		if (spec[0].cg && cg_write(spec[0].cg, "cgroup.procs", "0"))
			_exit(20);
		s = hp_anon(set_mb * MB);
		if (s == MAP_FAILED)
			_exit(21);
		touch(s, set_mb * MB);
		for (int i = 1; i < n; i++) {
			pid_t m = spawn_sibling();

			if (m < 0)
				_exit(22);
			if (m == 0)
				settle(&spec[i], i, up[1]);
		}
		settle(&(struct proc_spec){ NULL, spec[0].adj }, 0, up[1]);
	}
	close(up[1]);
	while (got < n) {
		struct ready r;

		if (read(up[0], &r, sizeof(r)) != sizeof(r) || r.index < 0 ||
		    r.index >= n)
			break;
		sc->pid[r.index] = r.pid;
		got++;
	}
	close(up[0]);
	return got == n ? 0 : -1;
}

/*
 * 1 if process @i of the set was killed by SIGKILL, 0 if it is still alive a
 * second later, else -1.  The wait: a process killed with an OOM victim
 * exits after the victim, and may still be exiting when the hog is done.
 */
static int killed(struct scene *sc, int i)
{
	int st;

	for (int ms = 0; ms < 1000; ms += 10) {
		pid_t r = waitpid(sc->pid[i], &st, WNOHANG);

		if (r == sc->pid[i]) {
			sc->pid[i] = 0;
			return WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL ? 1 : -1;
		}
		if (r != 0)
			return -1;
		usleep(10000);
	}
	return 0;
}

static void end_scene(struct scene *sc)
{
	for (int i = 0; i < sc->n; i++) {
		if (sc->pid[i] <= 0)
			continue;
		kill(sc->pid[i], SIGKILL);
		waitpid(sc->pid[i], NULL, 0);
	}
}

/*
 * A process in @cg that faults @mb MiB of private memory; its wait status
 * (0: it got all of it).
 */
static int hog(const char *cg, size_t mb)
{
	pid_t h = fork();
	int st;

	if (h == 0) {
		char *p;

		if (cg_write(cg, "cgroup.procs", "0"))
			_exit(40);
		p = mmap(NULL, mb * MB, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			_exit(41);
		touch(p, mb * MB);
		_exit(0);
	}
	if (h < 0 || waitpid(h, &st, 0) != h)
		return -1;
	return st;
}

static int limit(const char *cg, size_t mb)
{
	char v[32];

	snprintf(v, sizeof(v), "%zu", mb * MB);
	/* No swap: over the limit is an OOM, never swapping. */
	cg_write(cg, "memory.swap.max", "0");
	return cg_write(cg, "memory.max", v);
}

#define SIGKILLED(st) (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)

/*
 * The set charges cgroup S (no limit); a member runs in cgroup B (32 MiB)
 * beside a hog.  B's OOM cannot free the set's 64 MiB: the hog, the bigger
 * of the two in B, is killed, and the member lives.  Before, the member's
 * badness carried the set's 64 MiB in B's OOM too, and it was killed first.
 */
static void foreign_oom(struct __test_metadata *_metadata, int busy)
{
	char s[128], b[128];
	struct scene sc = { 0 };
	long oom0, oom1;
	int st, member, creator;

	REQUIRE_HALFPROC();
	if (!memcg_available())
		SKIP(return, "no cgroup v2 memory controller");
	ASSERT_EQ(0, cg_make_in(s, sizeof(s), CG, "hp_oom", "s"));
	ASSERT_EQ(0, cg_make_in(b, sizeof(b), CG, "hp_oom", "b"));
	ASSERT_EQ(0, limit(b, 32));
	ASSERT_EQ(0, make_set(&sc, (struct proc_spec[]){ { s, 0, 0 }, { b, 0, busy } }, 2, 64));
	oom0 = cg_read(b, "memory.events", "oom_kill");
	st = hog(b, 128);
	oom1 = cg_read(b, "memory.events", "oom_kill");
	member = killed(&sc, 1);
	creator = killed(&sc, 0);
	TH_LOG("hog in B: %s; member in B: %s; B's oom_kill %ld -> %ld",
	       SIGKILLED(st) ? "killed" : "not killed", member ? "killed" : "alive",
	       oom0, oom1);
	EXPECT_TRUE(SIGKILLED(st));
	EXPECT_EQ(0, member);
	EXPECT_EQ(0, creator);
	EXPECT_EQ(oom0 + 1, oom1);
	end_scene(&sc);
	cg_remove(b);
	cg_remove(s);
}

TEST(foreign_cgroup_oom_leaves_the_set_out)
{
	foreign_oom(_metadata, 0);
}

/*
 * The same with the member looping over meta-operations on the range, so
 * that the OOM killer mostly finds it switched to the set mm: its badness
 * must still be its own mm's (patch 0016), and the OOM reaper must never
 * reap the set mm (the member would die of SIGBUS, not SIGKILL).
 */
TEST(foreign_cgroup_oom_spares_a_switched_member)
{
	foreign_oom(_metadata, 1);
}

/*
 * Cgroup P (64 MiB) holds the set's cgroup P/S (creator and two members, a
 * 40 MiB set) and a hog's, P/H (48 MiB).  P's OOM can free the set: a member
 * is chosen with it in its badness, and all three processes of the set go
 * in that one OOM kill, after which the hog gets its 48 MiB.  Before, the
 * members were killed one OOM event at a time: three kills.
 */
TEST(members_are_killed_together)
{
	char p[128], s[192], h[192];
	struct scene sc = { 0 };
	long oom0, oom1;
	int st, i;

	REQUIRE_HALFPROC();
	if (!memcg_available())
		SKIP(return, "no cgroup v2 memory controller");
	ASSERT_EQ(0, cg_make_in(p, sizeof(p), CG, "hp_oom", "p"));
	ASSERT_NE(0, memcg_enable(p));
	ASSERT_EQ(0, cg_make_in(s, sizeof(s), p, "hp_oom", "s"));
	ASSERT_EQ(0, cg_make_in(h, sizeof(h), p, "hp_oom", "h"));
	ASSERT_EQ(0, limit(p, 64));
	ASSERT_EQ(0, make_set(&sc, (struct proc_spec[]){ { s, 0 }, { s, 0 }, { s, 0 } },
			      3, 40));
	oom0 = cg_read(p, "memory.events", "oom_kill");
	st = hog(h, 48);
	oom1 = cg_read(p, "memory.events", "oom_kill");
	TH_LOG("hog: %s; P's oom_kill %ld -> %ld", st == 0 ? "got its 48 MiB" : "failed",
	       oom0, oom1);
	EXPECT_EQ(0, st);
	for (i = 0; i < 3; i++)
		EXPECT_EQ(1, killed(&sc, i)) TH_LOG("process %d of the set", i);
	EXPECT_EQ(oom0 + 1, oom1);
	end_scene(&sc);
	cg_remove(h);
	cg_remove(s);
	cg_remove(p);
}

/*
 * Cgroup A (64 MiB): a 40 MiB set whose member M1 is at OOM_SCORE_ADJ_MIN,
 * and a hog.  Killing the others cannot free the set, so it is in no
 * member's badness: the hog is killed, and the set's processes all live.
 * Before, the creator and the other member were killed first, for nothing.
 */
TEST(unkillable_member_keeps_the_set_out_of_badness)
{
	char a[128];
	struct scene sc = { 0 };
	long oom0, oom1;
	int st, i;

	REQUIRE_HALFPROC();
	if (!memcg_available())
		SKIP(return, "no cgroup v2 memory controller");
	ASSERT_EQ(0, cg_make_in(a, sizeof(a), CG, "hp_oom", "a"));
	ASSERT_EQ(0, limit(a, 64));
	ASSERT_EQ(0, make_set(&sc, (struct proc_spec[]){ { a, 0 }, { a, -1000 }, { a, 0 } },
			      3, 40));
	oom0 = cg_read(a, "memory.events", "oom_kill");
	st = hog(a, 128);
	oom1 = cg_read(a, "memory.events", "oom_kill");
	TH_LOG("hog: %s; A's oom_kill %ld -> %ld", SIGKILLED(st) ? "killed" : "not killed",
	       oom0, oom1);
	EXPECT_TRUE(SIGKILLED(st));
	for (i = 0; i < 3; i++)
		EXPECT_EQ(0, killed(&sc, i)) TH_LOG("process %d of the set", i);
	EXPECT_EQ(oom0 + 1, oom1);
	end_scene(&sc);
	cg_remove(a);
}

TEST_HARNESS_MAIN
