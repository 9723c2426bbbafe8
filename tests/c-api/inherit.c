/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * halfproc_set_inherit(1): plain fork() children and exec()ed programs of
 * this process are members (kernel backend), so an unmodified child program
 * sees the shared range.  On the portable backend it is ENOTSUP.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <halfproc.h>

struct shared {
	halfproc_mutex_t lock;
	int value;
};

static int wait_code(pid_t p)
{
	int st;

	if (p < 0 || waitpid(p, &st, 0) != p)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(int argc, char **argv)
{
	struct shared *s;
	char arg[32];
	int err;
	pid_t p;

	if (argc == 3 && !strcmp(argv[1], "--read"))	/* the exec()ed program */
		return ((struct shared *)strtoull(argv[2], NULL, 16))->value;
	setvbuf(stdout, NULL, _IONBF, 0);
	if (halfproc_init(NULL) || !(s = halfproc_calloc(1, sizeof(*s))))
		return 1;
	err = halfproc_set_inherit(1);
	if (halfproc_backend_kind() == HALFPROC_BACKEND_PORTABLE) {
		printf("%s: portable backend: halfproc_set_inherit is ENOTSUP (got %s)\n",
		       err == ENOTSUP ? "ok" : "not ok", strerror(err));
		return err == ENOTSUP ? 0 : 1;
	}
	if (err) {
		printf("not ok: halfproc_set_inherit: %s\n", strerror(err));
		return 1;
	}
	s->value = 41;
	p = fork();
	if (p == 0) {
		/* A member: the lock works (an outsider would get EPERM). */
		if (halfproc_mutex_lock(&s->lock))
			_exit(2);
		s->value++;
		halfproc_mutex_unlock(&s->lock);
		_exit(0);
	}
	if (wait_code(p) != 0 || s->value != 42) {
		printf("not ok: a fork()ed child is a member (value %d)\n", s->value);
		return 1;
	}
	printf("ok: a plain fork() child is a member\n");
	snprintf(arg, sizeof(arg), "%p", (void *)s);
	p = fork();
	if (p == 0) {
		execl("/proc/self/exe", argv[0], "--read", arg, (char *)NULL);
		_exit(127);
	}
	err = wait_code(p);
	printf("%s: an exec()ed program reads the shared range (exit %d)\n",
	       err == 42 ? "ok" : "not ok", err);
	return err == 42 ? 0 : 1;
}
