/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Helpers shared by the in-guest half-process tests: the ABI constants (kept
 * equal to include/uapi/linux/halfproc.h by the uapi crate's tests), raw
 * syscall wrappers, fault probes and parent/child channels.
 */
#ifndef HALFPROC_TEST_H
#define HALFPROC_TEST_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/sched.h>

#ifndef HALFPROC_RANGE_START
#define HALFPROC_RANGE_START	(1ULL << 45)
#define HALFPROC_RANGE_END	(1ULL << 46)
#endif
#ifndef CLONE_HALFPROC
#define CLONE_HALFPROC		(1ULL << 40)
#endif
#ifndef MAP_HALFPROC
#define MAP_HALFPROC		0x200000
#endif
#ifndef __NR_dmread
#define __NR_dmread		470
#define __NR_dmwrite		471
#define __NR_dmreadv		472
#define __NR_dmwritev		473
#endif
#ifndef __NR_clone3
#define __NR_clone3		435
#endif

#define PAGE 4096UL

static inline int in_range(const void *p, size_t len)
{
	uint64_t a = (uint64_t)(uintptr_t)p;

	return a >= HALFPROC_RANGE_START && a <= HALFPROC_RANGE_END &&
	       len <= HALFPROC_RANGE_END - a;
}

/* clone3() with SIGCHLD; returns like fork(). */
static inline pid_t hp_clone(uint64_t flags)
{
	struct clone_args args;

	memset(&args, 0, sizeof(args));
	args.flags = flags;
	args.exit_signal = SIGCHLD;
	return syscall(__NR_clone3, &args, sizeof(args));
}

static inline pid_t hp_spawn(void)
{
	return hp_clone(CLONE_HALFPROC);
}

static inline void *hp_mmap(void *addr, size_t len, int prot, int flags)
{
	return mmap(addr, len, prot, flags | MAP_HALFPROC, -1, 0);
}

static inline void *hp_anon(size_t len)
{
	return hp_mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS);
}

static inline ssize_t dmread(pid_t pid, const void *ptr, size_t size, void *buf)
{
	return syscall(__NR_dmread, pid, ptr, size, buf);
}

static inline ssize_t dmwrite(pid_t pid, void *ptr, size_t size, const void *buf)
{
	return syscall(__NR_dmwrite, pid, ptr, size, buf);
}

static inline ssize_t dmreadv(pid_t pid, const struct iovec *l, unsigned long ln,
			      const struct iovec *r, unsigned long rn,
			      unsigned long flags)
{
	return syscall(__NR_dmreadv, pid, l, ln, r, rn, flags);
}

/* Whether the kernel backend is here: patched kernel with the module. */
static inline int hp_supported(void)
{
	return access("/sys/module/halfproc", F_OK) == 0;
}

/* Fault probes: 0 if the access worked, -1 if it raised SIGSEGV/SIGBUS. */
static __thread sigjmp_buf probe_env;
static __thread volatile int probing;

static void probe_handler(int sig)
{
	if (!probing) {
		signal(sig, SIG_DFL);
		raise(sig);
	}
	siglongjmp(probe_env, 1);
}

/*
 * Installed once per process (handlers survive fork, as does this flag).
 * Probes make no system call when the access works: with PTI every kernel
 * entry reloads CR3, and under QEMU TCG a CR3 load flushes the whole TLB,
 * which would hide the stale translations hp_tlb looks for.
 */
static int probe_installed;

static inline void probe_init(void)
{
	struct sigaction sa;

	if (probe_installed)
		return;
	probe_installed = 1;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = probe_handler;
	sa.sa_flags = SA_NODEFER;
	sigaction(SIGSEGV, &sa, NULL);
	sigaction(SIGBUS, &sa, NULL);
}

/* Read (*out = *p) or write (*p = v) under the probe's fault handler. */
static inline int probe_access(volatile char *p, int write, char v, char *out)
{
	probe_init();
	/* No mask to save: SA_NODEFER leaves the mask alone in the handler. */
	if (sigsetjmp(probe_env, 0)) {
		probing = 0;
		return -1;
	}
	probing = 1;
	if (write)
		*p = v;
	else
		*out = *p;
	probing = 0;
	return 0;
}

static inline int probe_read(const volatile char *p, char *out)
{
	return probe_access((volatile char *)p, 0, 0, out);
}

static inline int probe_write(volatile char *p, char v)
{
	return probe_access(p, 1, v, NULL);
}

/* A two-way byte channel between a parent and a child. */
struct chan {
	int down[2];	/* parent -> child */
	int up[2];	/* child -> parent */
};

static inline int chan_open(struct chan *c)
{
	return pipe(c->down) || pipe(c->up) ? -1 : 0;
}

static inline void chan_put(int fd, char v)
{
	if (write(fd, &v, 1) != 1)
		_exit(90);
}

static inline char chan_get(int fd)
{
	char v;

	if (read(fd, &v, 1) != 1)
		_exit(91);
	return v;
}

/* Parent side. */
static inline void tell_child(struct chan *c, char v) { chan_put(c->down[1], v); }
static inline char from_child(struct chan *c) { return chan_get(c->up[0]); }
/* Child side. */
static inline void tell_parent(struct chan *c, char v) { chan_put(c->up[1], v); }
static inline char from_parent(struct chan *c) { return chan_get(c->down[0]); }

/* Exit status of a child, or -1 if it died of a signal. */
static inline int wait_status(pid_t pid)
{
	int st;

	if (waitpid(pid, &st, 0) != pid)
		return -2;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static inline long minflt(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt;
}

/*
 * Whether test-only module @name (/lib/modules/@name.ko, tests/guest/kmods)
 * is loaded, loading it if not: its debugfs file @probe is then writable.
 */
static inline int test_module_ready(const char *name, const char *probe)
{
	char cmd[128];

	if (access(probe, W_OK) == 0)
		return 1;
	snprintf(cmd, sizeof(cmd), "insmod /lib/modules/%s.ko 2>/dev/null", name);
	if (system(cmd) != 0)
		return 0;
	return access(probe, W_OK) == 0;
}

/* The number a file holds (sysfs, debugfs), or -1. */
static inline long file_long(const char *path)
{
	long v = -1;
	FILE *f = fopen(path, "r");

	if (!f)
		return -1;
	if (fscanf(f, "%ld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

/* The number on the "KEY: N ..." line of @path (/proc/meminfo-like), or -1. */
static inline long proc_field(const char *path, const char *key)
{
	char line[256];
	long v = -1;
	FILE *f = fopen(path, "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, key, strlen(key)) && line[strlen(key)] == ':') {
			v = strtol(line + strlen(key) + 1, NULL, 10);
			break;
		}
	}
	fclose(f);
	return v;
}

static inline long meminfo(const char *key)
{
	return proc_field("/proc/meminfo", key);
}

/* References on the module: one per live set (and per call in flight). */
static inline int hp_module_refs(void)
{
	char v[16] = "";
	int fd = open("/sys/module/halfproc/refcnt", O_RDONLY);

	if (fd < 0)
		return -1;
	if (read(fd, v, sizeof(v) - 1) < 0)
		v[0] = 0;
	close(fd);
	return atoi(v);
}

/*
 * meminfo() with every CPU's pending vmstat deltas folded in first.  Plain
 * /proc/meminfo omits up to the stat threshold per CPU (24 pages on the
 * 2-vCPU, 4 GB guest), so PageTables read twice can differ by +-190 kB
 * with nothing leaked.  Writing /proc/sys/vm/stat_refresh (root) folds
 * them; -1 if that fails.
 */
static inline long meminfo_exact(const char *key)
{
	int fd = open("/proc/sys/vm/stat_refresh", O_WRONLY);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, "1", 1);
	close(fd);
	return n == 1 ? meminfo(key) : -1;
}

/*
 * For kselftest_harness.h tests: skip the test when the module is not
 * loaded (expanded where used, so the harness header may come later).
 */
#define REQUIRE_HALFPROC() do {						\
	if (!hp_supported())						\
		SKIP(return, "halfproc module not loaded");		\
} while (0)

#endif /* HALFPROC_TEST_H */
