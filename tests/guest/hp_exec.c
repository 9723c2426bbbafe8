// SPDX-License-Identifier: GPL-2.0
/*
 * Membership across execve(): a member's exec keeps it in the set (so
 * unmodified programs run as half-processes), what a vfork() child of a
 * member runs does not join, and a set-uid exec leaves the set; exec from
 * a non-leader thread keeps membership, and a member whose leader thread
 * exits while another thread is in meta-operations stays one.  An exec
 * whose new image does not fit beside the set within the member's limits
 * fails with ENOMEM.  The probe is this program itself, run as
 * `hp_exec --exec-probe ADDRESS`.
 */
#include "../lib/halfproc_test.h"
#include <pthread.h>
#include "kselftest_harness.h"

static const char *self_exe;

enum probe_how { PROBE_EXEC, PROBE_VFORK_EXEC, PROBE_SETUID_EXEC, PROBE_THREAD_EXEC };

struct exec_args {
	const char *path;
	char *arg;
};

/* A non-leader thread's exec: de_thread() makes it the leader first. */
static void *exec_in_thread(void *a)
{
	struct exec_args *e = a;

	execl(e->path, e->path, "--exec-probe", e->arg, (char *)NULL);
	_exit(99);
}

/*
 * Put a string in the shared range, then have a new member exec
 * @path --exec-probe <address> (directly, from a vfork child, or after
 * dropping root for a set-uid binary).  Returns the probe's exit status:
 * 0 when it saw the string (and overwrote it), 3 when it was no member.
 */
/*
 * Put "survives exec" in a shared page (*@shared), its address in @arg (the
 * probe's argument), and spawn a new member: hp_spawn()'s pid, or -3 / -4
 * when the page or the member could not be made.
 */
static pid_t spawn_with_probe_string(char **shared, char arg[32])
{
	char *p = hp_anon(PAGE);
	pid_t pid;

	if (p == MAP_FAILED)
		return -3;
	*shared = p;
	strcpy(p, "survives exec");
	snprintf(arg, 32, "%p", p);
	pid = hp_spawn();
	return pid < 0 ? -4 : pid;
}

static int exec_probe_in_member(const char *path, enum probe_how how, char **shared)
{
	char arg[32];
	pid_t pid = spawn_with_probe_string(shared, arg);

	if (pid < 0)
		return pid;
	if (pid == 0) {
		pid_t v;

		switch (how) {
		case PROBE_EXEC:
			break;
		case PROBE_VFORK_EXEC:
			/*
			 * posix_spawn()/system() in a member: the vfork child
			 * borrows the member's mm but is not the member; what
			 * it runs must not join the set.
			 */
			v = vfork();
			if (v != 0)
				_exit(wait_status(v));
			break;
		case PROBE_SETUID_EXEC:
			if (setresuid(1000, 1000, 1000))
				_exit(98);
			break;
		case PROBE_THREAD_EXEC: {
			struct exec_args e = { path, arg };
			pthread_t t;

			if (pthread_create(&t, NULL, exec_in_thread, &e))
				_exit(97);
			pthread_join(t, NULL); /* never returns: exec ends this thread */
			_exit(96);
		}
		}
		execl(path, path, "--exec-probe", arg, (char *)NULL);
		_exit(99);
	}
	return wait_status(pid);
}

TEST(exec_keeps_membership)
{
	char *p;

	REQUIRE_HALFPROC();
	ASSERT_EQ(0, exec_probe_in_member(self_exe, PROBE_EXEC, &p));
	ASSERT_EQ(0, strcmp(p, "written after exec"));
}

TEST(vfork_exec_does_not_join)
{
	char *p;

	REQUIRE_HALFPROC();
	ASSERT_EQ(3, exec_probe_in_member(self_exe, PROBE_VFORK_EXEC, &p));
	ASSERT_EQ(0, strcmp(p, "survives exec"));
}

TEST(exec_from_a_non_leader_thread_keeps_membership)
{
	char *p;

	REQUIRE_HALFPROC();
	ASSERT_EQ(0, exec_probe_in_member(self_exe, PROBE_THREAD_EXEC, &p));
	ASSERT_EQ(0, strcmp(p, "written after exec"));
}

#define MiB (1UL << 20)

/*
 * A member with 256 MiB in its set and @res (RLIMIT_AS or RLIMIT_DATA) of
 * 64 MiB: its exec cannot fit the new image beside the set, so execve()
 * fails with ENOMEM and the member runs on (before patch 0045 the ELF
 * loader met the limit past the point of no return and the member died of
 * SIGSEGV: -1 here).  A vfork() child's exec under the same limit does not
 * join, so the set does not count: the probe runs, no member (3).  With
 * 256 + 64 MiB the exec fits and the probe runs as a member (0).  Returns
 * the member's exit status: 0, the probe's, or the failing step (20-25).
 */
static int exec_past_limit(int res, char **shared)
{
	char arg[32];
	pid_t pid = spawn_with_probe_string(shared, arg);

	if (pid < 0)
		return pid;
	if (pid == 0) {
		struct rlimit rl = { 64 * MiB, RLIM_INFINITY };
		pid_t v;

		if (hp_anon(256 * MiB) == MAP_FAILED)
			_exit(20);
		if (setrlimit(res, &rl))
			_exit(21);
		execl(self_exe, self_exe, "--exec-probe", arg, (char *)NULL);
		if (errno != ENOMEM)
			_exit(22);
		v = vfork();
		if (v == 0) {
			execl(self_exe, self_exe, "--exec-probe", arg, (char *)NULL);
			_exit(99);
		}
		if (wait_status(v) != 3)
			_exit(23);
		rl.rlim_cur = (256 + 64) * MiB;
		if (setrlimit(res, &rl))
			_exit(24);
		execl(self_exe, self_exe, "--exec-probe", arg, (char *)NULL);
		_exit(25);
	}
	return wait_status(pid);
}

TEST(exec_past_rlimit_as_fails_with_enomem)
{
	char *p;

	REQUIRE_HALFPROC();
	ASSERT_EQ(0, exec_past_limit(RLIMIT_AS, &p));
	ASSERT_EQ(0, strcmp(p, "written after exec"));
}

TEST(exec_past_rlimit_data_fails_with_enomem)
{
	char *p;

	REQUIRE_HALFPROC();
	ASSERT_EQ(0, exec_past_limit(RLIMIT_DATA, &p));
	ASSERT_EQ(0, strcmp(p, "written after exec"));
}

static void *switch_in_a_loop(void *a)
{
	volatile char *word = a;

	/* Meta-operations on the range (switched) after the leader is gone. */
	for (int i = 0; i < 2000; i++) {
		char *q = hp_anon(PAGE);

		if (q == MAP_FAILED || mprotect(q, PAGE, PROT_READ) || munmap(q, PAGE))
			_exit(10);
		if (i == 1000)
			*word = 'h'; /* halfway: the leader has surely exited by now */
	}
	_exit(*word == 'h' ? 0 : 11);
}

TEST(leader_exits_while_another_thread_is_switched)
{
	char *word;
	pid_t pid;

	REQUIRE_HALFPROC();
	word = hp_anon(PAGE);
	ASSERT_NE(MAP_FAILED, word);
	pid = hp_spawn();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		pthread_t t;

		if (pthread_create(&t, NULL, switch_in_a_loop, word))
			_exit(12);
		/* The leader (owner of the thread group's membership) ends. */
		pthread_exit(NULL);
	}
	ASSERT_EQ(0, wait_status(pid));
	ASSERT_EQ('h', *word);
	/* The set still works for a new member. */
	pid = hp_spawn();
	ASSERT_LE(0, pid);
	if (pid == 0)
		_exit(*word == 'h' ? 0 : 1);
	ASSERT_EQ(0, wait_status(pid));
}

TEST(setuid_exec_leaves_the_set)
{
	char path[] = "/tmp/hp_exec_suid", buf[65536], *p;
	int in, out;
	ssize_t n;

	REQUIRE_HALFPROC();
	if (getuid() != 0)
		SKIP(return, "needs root to make a set-uid binary");
	in = open(self_exe, O_RDONLY);
	ASSERT_GE(in, 0);
	out = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0755);
	ASSERT_GE(out, 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		ASSERT_EQ(n, write(out, buf, n));
	close(in);
	close(out);
	ASSERT_EQ(0, chmod(path, 04755));
	ASSERT_EQ(3, exec_probe_in_member(path, PROBE_SETUID_EXEC, &p));
	ASSERT_EQ(0, strcmp(p, "survives exec"));
	unlink(path);
}

/*
 * failslab (CONFIG_FAILSLAB): its debugfs knobs, saved and restored around a
 * test.  With task-filter and ignore-gfp-wait (the default), it fails every
 * slab allocation that cannot sleep made by a task with make-it-fail set.
 */
#define FAILSLAB "/sys/kernel/debug/failslab/"
static const char *const failslab_knobs[] = {
	"probability", "interval", "times", "space", "verbose",
	"task-filter", "ignore-gfp-wait", "cache-filter",
};
#define NKNOBS (sizeof(failslab_knobs) / sizeof(failslab_knobs[0]))

/* Read knob @name into @old (unless NULL), then write @val; 0 or -1. */
static int knob(const char *name, char *old, const char *val)
{
	char path[128];
	ssize_t n = 0;
	int fd;

	snprintf(path, sizeof(path), FAILSLAB "%s", name);
	/* Separate opens: the attribute files are not seekable (no pwrite). */
	if (old) {
		fd = open(path, O_RDONLY);
		if (fd < 0)
			return -1;
		n = read(fd, old, 31);
		old[n > 0 ? n : 0] = 0;
		old[strcspn(old, "\n")] = 0;
		close(fd);
	}
	fd = open(path, O_WRONLY);
	if (fd < 0)
		return -1;
	n = write(fd, val, strlen(val));
	close(fd);
	return n == (ssize_t)strlen(val) ? 0 : -1;
}

static void set_make_it_fail(int on)
{
	int fd = open("/proc/self/make-it-fail", O_WRONLY);

	if (fd >= 0) {
		if (write(fd, on ? "1" : "0", 1) != 1)
			_exit(97);
		close(fd);
	}
}

/*
 * A member execs with failslab failing its non-sleeping slab allocations,
 * when the set has @n members.  The module's member list grows (doubling)
 * when a member is added at 1, 2, 4, 8 members, and an exec in a member
 * adds the new mm before the old one leaves, after exec's point of no
 * return: an allocation that can fail there kills the exec with SIGSEGV.
 * Returns the exec'd probe's status (0: it ran, still a member), or 128 +
 * the signal that killed the member.
 */
static int exec_in_member_of(int n, char **shared)
{
	char *p = hp_anon(PAGE), arg[32];
	pid_t holders[16], pid;
	struct chan c;
	int st;

	if (p == MAP_FAILED || n > 16 || chan_open(&c))
		return -3;
	*shared = p;
	strcpy(p, "survives exec");
	snprintf(arg, sizeof(arg), "%p", p);
	/* Us, n - 2 members waiting for the end, the one that execs. */
	for (int i = 0; i < n - 2; i++) {
		holders[i] = hp_spawn();
		if (holders[i] == 0) {
			char v;

			close(c.down[1]);
			_exit(read(c.down[0], &v, 1) == 0 ? 0 : 1);
		}
	}
	pid = hp_spawn();
	if (pid == 0) {
		set_make_it_fail(1);
		execl(self_exe, self_exe, "--exec-probe", arg, "--failslab", (char *)NULL);
		_exit(99);
	}
	if (waitpid(pid, &st, 0) != pid)
		st = -1;
	else
		st = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	close(c.down[1]);
	for (int i = 0; i < n - 2; i++)
		wait_status(holders[i]);
	return st;
}

TEST(exec_in_members_under_failslab)
{
	char old[NKNOBS][32];
	const char *val[NKNOBS] = { "100", "1", "-1", "0", "0", "Y", "Y", "N" };
	size_t k;
	/* 3: no growth (room for 4), the control: it runs before the fix. */
	int st[5], n[5] = { 2, 3, 4, 8, 16 }, pid;
	char *p;

	REQUIRE_HALFPROC();
	if (access(FAILSLAB "probability", W_OK) ||
	    access("/proc/self/make-it-fail", W_OK))
		SKIP(return, "no failslab (CONFIG_FAILSLAB, debugfs)");
	for (k = 0; k < NKNOBS; k++) {
		if (knob(failslab_knobs[k], old[k], val[k])) {
			TH_LOG("failslab/%s: %s", failslab_knobs[k], strerror(errno));
			knob("probability", NULL, "0");
			ASSERT_TRUE(0);
		}
	}
	/* Each size in a fresh set, so the member list starts empty. */
	for (int i = 0; i < 5; i++) {
		pid = fork();
		if (pid == 0) {
			int r = exec_in_member_of(n[i], &p);

			if (r == 0 && strcmp(p, "written after exec"))
				r = 50;
			_exit(r & 0xff);
		}
		st[i] = wait_status(pid);
	}
	knob("probability", NULL, "0");
	for (k = 0; k < NKNOBS; k++)
		knob(failslab_knobs[k], NULL, old[k]);
	for (int i = 0; i < 5; i++)
		TH_LOG("exec in a member of a set of %d: %s (status %d)", n[i],
		       st[i] == 0 ? "ran" : st[i] > 128 ? "killed by a signal" : "failed",
		       st[i]);
	for (int i = 0; i < 5; i++)
		ASSERT_EQ(0, st[i]);
}

static int exec_probe(const char *arg)
{
	char *p = (char *)strtoull(arg, NULL, 16), c;

	if (probe_read(p, &c))
		return 3;	/* not a member any more */
	if (strcmp(p, "survives exec"))
		return 4;
	strcpy(p, "written after exec");
	return hp_anon(PAGE) == MAP_FAILED ? 5 : 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	self_exe = argv[0];
	if (argc == 4 && !strcmp(argv[3], "--failslab"))
		set_make_it_fail(0);
	if (argc >= 3 && !strcmp(argv[1], "--exec-probe"))
		return exec_probe(argv[2]);
	return test_harness_run(argc, argv);
}
