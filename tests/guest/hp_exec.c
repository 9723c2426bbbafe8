// SPDX-License-Identifier: GPL-2.0
/*
 * Membership across execve(): a member's exec keeps it in the set (so
 * unmodified programs run as half-processes), what a vfork() child of a
 * member runs does not join, and a set-uid exec leaves the set; exec from
 * a non-leader thread keeps membership, and a member whose leader thread
 * exits while another thread is in meta-operations stays one.  The probe
 * is this program itself, run as `hp_exec --exec-probe ADDRESS`.
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
static int exec_probe_in_member(const char *path, enum probe_how how, char **shared)
{
	char *p = hp_anon(PAGE), arg[32];
	pid_t pid;

	if (p == MAP_FAILED)
		return -3;
	*shared = p;
	strcpy(p, "survives exec");
	snprintf(arg, sizeof(arg), "%p", p);
	pid = hp_spawn();
	if (pid < 0)
		return -4;
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
	if (argc == 3 && !strcmp(argv[1], "--exec-probe"))
		return exec_probe(argv[2]);
	return test_harness_run(argc, argv);
}
