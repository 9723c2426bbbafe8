/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * What halfproc_join() reports, and what halfproc_create() refuses:
 * - a member that fork()s and exec()s a child, and waits for it;
 * - a member that exec()s itself: joined with the new program's status;
 * - exit code 139 and death by SIGSEGV are told apart (wait status);
 * - NULL handle or function pointers are EINVAL, not a crash; joining a
 *   handle twice is ESRCH.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <halfproc.h>

static int fork_exec(void *arg)
{
	int st;
	pid_t p = fork();

	(void)arg;
	if (p == 0) {
		execl("/bin/sh", "sh", "-c", "exit 7", (char *)NULL);
		_exit(127);
	}
	if (p < 0 || waitpid(p, &st, 0) != p)
		return 1;
	return WIFEXITED(st) && WEXITSTATUS(st) == 7 ? 0 : 2;
}

static int exec_self(void *arg)
{
	(void)arg;
	execl("/bin/sh", "sh", "-c", "exit 5", (char *)NULL);
	return 1;
}

static int exit_139(void *arg)
{
	(void)arg;
	return 139;
}

static int segv(void *arg)
{
	(void)arg;
	raise(SIGSEGV);
	return 0;
}

static int check(const char *what, int (*fn)(void *), int want_exit, int want_sig)
{
	halfproc_t h;
	int st = -1, err = halfproc_create(&h, fn, NULL);

	if (!err)
		err = halfproc_join(h, &st);
	if (err) {
		printf("not ok: %s: %s\n", what, strerror(err));
		return 1;
	}
	if (want_sig ? !(WIFSIGNALED(st) && WTERMSIG(st) == want_sig)
		     : !(WIFEXITED(st) && WEXITSTATUS(st) == want_exit)) {
		printf("not ok: %s: wait status %#x\n", what, st);
		return 1;
	}
	printf("ok: %s\n", what);
	return 0;
}

int main(void)
{
	halfproc_t h;
	int bad = 0, err;

	setvbuf(stdout, NULL, _IONBF, 0);
	if (halfproc_init(NULL) != 0)
		return 1;
	bad |= check("a member forks and execs a child", fork_exec, 0, 0);
	bad |= check("a member execs: joined with the program's status", exec_self, 5, 0);
	bad |= check("exit code 139 is an exit code", exit_139, 139, 0);
	bad |= check("death by SIGSEGV is a signal", segv, 0, SIGSEGV);
	err = halfproc_create(NULL, exit_139, NULL);
	printf("%s: a NULL handle pointer is EINVAL (got %s)\n",
	       err == EINVAL ? "ok" : "not ok", strerror(err));
	bad |= err != EINVAL;
	err = halfproc_create(&h, NULL, NULL);
	printf("%s: a NULL function is EINVAL (got %s)\n",
	       err == EINVAL ? "ok" : "not ok", strerror(err));
	bad |= err != EINVAL;
	if (halfproc_create(&h, exit_139, NULL) || halfproc_join(h, NULL))
		return 1;
	err = halfproc_join(h, NULL);
	printf("%s: joining twice is ESRCH (got %s)\n",
	       err == ESRCH ? "ok" : "not ok", strerror(err));
	bad |= err != ESRCH;
	return bad;
}
