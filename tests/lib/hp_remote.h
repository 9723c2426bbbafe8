/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Helpers of the remote-access tests (tests/guest/hp_remote.c, hp_debug.c):
 * byte patterns, a member target that waits on a channel, a non-member
 * stranger, Yama's scope and privilege dropping, core_pattern.
 */
#ifndef HP_REMOTE_H
#define HP_REMOTE_H

#include "halfproc_test.h"

#define UNPRIV 1000

static unsigned char pat(size_t i, unsigned int seed)
{
	return (unsigned char)((i * 13 + seed * 101 + (i >> 12)) & 0xff);
}

static void fill(unsigned char *p, size_t len, unsigned int seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = pat(i, seed);
}

/* Index of the first byte of @p that is not pat(i, @seed), or -1. */
static long mismatch(const unsigned char *p, size_t len, unsigned int seed)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != pat(i, seed))
			return (long)i;
	return -1;
}

/*
 * A member that waits: 'q' exits, 'p' checks that its private page still
 * holds pattern 7, 'a' aborts (a core dump).  Answers each with 'k'.
 */
static pid_t start_target(struct chan *c, unsigned char *priv)
{
	pid_t pid;

	if (chan_open(c))
		return -1;
	pid = hp_spawn();
	if (pid != 0)
		return pid;
	for (;;) {
		char cmd = from_parent(c);

		if (cmd == 'q')
			_exit(0);
		if (cmd == 'a')
			abort();
		if (cmd == 'p' && priv && mismatch(priv, PAGE, 7) >= 0)
			_exit(30);
		tell_parent(c, 'k');
	}
}

static int stop_target(struct chan *c, pid_t pid)
{
	tell_child(c, 'q');
	return wait_status(pid);
}

/* A plain fork() of the test process: not a member of its set. */
static pid_t start_stranger(const void *shared)
{
	pid_t pid = fork();
	char v;

	if (pid == 0 && probe_read(shared, &v) == 0)
		_exit(100);	/* the range is mapped here: a member */
	return pid;
}

static int yama_scope(int set)
{
	FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", set >= 0 ? "w" : "r");
	int v = 0;

	if (!f)
		return set >= 0 ? 0 : -2;
	if (set >= 0)
		v = fprintf(f, "%d\n", set) > 0 ? 0 : -1;
	else if (fscanf(f, "%d", &v) != 1)
		v = -1;
	return fclose(f) ? -1 : v;
}

static int drop_privileges(void)
{
	return setresgid(UNPRIV, UNPRIV, UNPRIV) || setresuid(UNPRIV, UNPRIV, UNPRIV);
}

/* Point core dumps at /tmp/hp_remote.core.<pid>; the old pattern in @old. */
static int core_pattern_set(char *old, size_t oldlen)
{
	FILE *f = fopen("/proc/sys/kernel/core_pattern", "r");

	if (!f || !fgets(old, oldlen, f))
		return -1;
	fclose(f);
	f = fopen("/proc/sys/kernel/core_pattern", "w");
	if (!f)
		return -1;
	fprintf(f, "/tmp/hp_remote.core.%%p\n");
	return fclose(f) ? -1 : 0;
}

static void core_pattern_restore(const char *old)
{
	FILE *f = fopen("/proc/sys/kernel/core_pattern", "w");

	if (f) {
		fputs(old, f);
		fclose(f);
	}
}

#endif /* HP_REMOTE_H */
