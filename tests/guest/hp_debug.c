// SPDX-License-Identifier: GPL-2.0
/*
 * Debugging a member: its core dump holds the shared range with its
 * content; uprobes on code it runs from the range fire and do not kill it;
 * gdb (when the guest has it: scripts/gdb-proof.sh) prints and sets a
 * shared variable in a live member and prints it from the core.
 */
#include "hp_remote.h"
#include <elf.h>
#include <linux/perf_event.h>
#include "kselftest_harness.h"

#ifndef __NR_perf_event_open
#define __NR_perf_event_open	298
#endif

/* Read @len bytes at @off of @fd. */
static int read_at(int fd, void *buf, size_t len, off_t off)
{
	return pread(fd, buf, len, off) == (ssize_t)len ? 0 : -1;
}

/*
 * The PT_LOAD segment of core file @fd that maps @addr: 0 and its header in
 * @out, or -1.  Also checks that the segments are in address order.
 */
static int core_segment(int fd, unsigned long addr, Elf64_Phdr *out, int *nload)
{
	Elf64_Ehdr eh;
	unsigned long last = 0;
	int found = -1;

	*nload = 0;
	if (read_at(fd, &eh, sizeof(eh), 0) || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
	    eh.e_type != ET_CORE)
		return -2;
	for (int i = 0; i < eh.e_phnum; i++) {
		Elf64_Phdr ph;

		if (read_at(fd, &ph, sizeof(ph), eh.e_phoff + (off_t)i * eh.e_phentsize))
			return -2;
		if (ph.p_type != PT_LOAD)
			continue;
		(*nload)++;
		if (ph.p_vaddr < last)
			return -3;
		last = ph.p_vaddr;
		if (addr >= ph.p_vaddr && addr < ph.p_vaddr + ph.p_memsz) {
			*out = ph;
			found = 0;
		}
	}
	return found;
}

/*
 * A member's core dump holds the shared range where the member had it,
 * with its content (read back from the core's PT_LOAD segments, as gdb
 * does), beside its private memory.
 */
TEST(core_dump_contains_shared_range)
{
	unsigned char *shared = hp_anon(4 * PAGE);
	unsigned char *ro = hp_anon(2 * PAGE);
	unsigned char *priv = malloc(2 * PAGE);
	unsigned char *ppage = (unsigned char *)(((uintptr_t)priv + PAGE - 1) & ~(PAGE - 1));
	char pattern[256] = "", path[64];
	unsigned char buf[4 * PAGE];
	struct rlimit rl = { RLIM_INFINITY, RLIM_INFINITY };
	Elf64_Phdr ph;
	struct chan c;
	int fd, st, nload, r;
	pid_t target;

	REQUIRE_HALFPROC();
	ASSERT_NE(MAP_FAILED, shared);
	ASSERT_NE(MAP_FAILED, ro);
	ASSERT_NE(NULL, priv);
	fill(shared, 4 * PAGE, 11);
	fill(ro, 2 * PAGE, 12);
	/* Another VMA of the set: read-only. */
	ASSERT_EQ(0, mprotect(ro, 2 * PAGE, PROT_READ));
	fill(ppage, PAGE, 7);

	ASSERT_EQ(0, core_pattern_set(pattern, sizeof(pattern)));
	ASSERT_EQ(0, setrlimit(RLIMIT_CORE, &rl));

	target = start_target(&c, ppage);
	ASSERT_GT(target, 0);
	tell_child(&c, 'p');
	ASSERT_EQ('k', from_child(&c));
	tell_child(&c, 'a');
	ASSERT_EQ(target, waitpid(target, &st, 0));
	core_pattern_restore(pattern);

	ASSERT_TRUE(WIFSIGNALED(st));
	ASSERT_EQ(SIGABRT, WTERMSIG(st));
	ASSERT_TRUE(WCOREDUMP(st));
	snprintf(path, sizeof(path), "/tmp/hp_remote.core.%d", target);
	fd = open(path, O_RDONLY);
	ASSERT_LE(0, fd);

	/* The private page: the core is readable and right at all. */
	ASSERT_EQ(0, core_segment(fd, (unsigned long)ppage, &ph, &nload));
	ASSERT_EQ(0, read_at(fd, buf, PAGE, ph.p_offset + ((unsigned long)ppage - ph.p_vaddr)));
	ASSERT_EQ(-1, mismatch(buf, PAGE, 7));

	r = core_segment(fd, (unsigned long)shared, &ph, &nload);
	TH_LOG("core: %d PT_LOAD segments; the shared region %s", nload,
	       r == 0 ? "is in one" : "is in none");
	ASSERT_EQ(0, r);
	ASSERT_TRUE(ph.p_flags & PF_W);
	ASSERT_LE((unsigned long)shared + 4 * PAGE, ph.p_vaddr + ph.p_filesz);
	ASSERT_EQ(0, read_at(fd, buf, 4 * PAGE, ph.p_offset + ((unsigned long)shared - ph.p_vaddr)));
	ASSERT_EQ(-1, mismatch(buf, 4 * PAGE, 11));

	ASSERT_EQ(0, core_segment(fd, (unsigned long)ro, &ph, &nload));
	ASSERT_FALSE(ph.p_flags & PF_W);
	ASSERT_EQ(0, read_at(fd, buf, 2 * PAGE, ph.p_offset + ((unsigned long)ro - ph.p_vaddr)));
	ASSERT_EQ(-1, mismatch(buf, 2 * PAGE, 12));
	close(fd);
	if (!getenv("HP_REMOTE_KEEP_CORE"))
		unlink(path);
	else
		TH_LOG("core kept at %s; shared region at %p", path, shared);
}

/*
 * Uprobes on code a member runs from the shared range.  probed_fn() is
 * position independent (no memory operand), so a copy of the test binary's
 * page mapped into the range with MAP_HALFPROC runs it there.  A
 * system-wide uprobe on it (perf's uprobe PMU, one counting event per CPU)
 * must count the calls in the range as well as the private ones, and the
 * member calling it must not be killed by the breakpoint (SIGTRAP).  The
 * probe is registered once after a range mapping exists (registration
 * installs it) and once before another is made (mmap() installs it).
 */
__attribute__((noinline, aligned(64))) long probed_fn(long x)
{
	return x * 3 + 1;
}

static int uprobe_pmu_type(void)
{
	FILE *f = fopen("/sys/bus/event_source/devices/uprobe/type", "r");
	int t = -1;

	if (!f)
		return -1;
	if (fscanf(f, "%d", &t) != 1)
		t = -1;
	fclose(f);
	return t;
}

/* probed_fn()'s offset in the file mapped at it, from /proc/self/maps. */
static long probed_fn_offset(char *path, size_t pathlen)
{
	unsigned long fn = (unsigned long)probed_fn, start, end, pgoff;
	char line[512], perms[8], file[256];
	long off = -1;
	FILE *f = fopen("/proc/self/maps", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		file[0] = 0;
		if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %255s", &start, &end, perms,
			   &pgoff, file) < 4)
			continue;
		if (fn >= start && fn < end && perms[2] == 'x' && file[0] == '/') {
			off = (long)(fn - start + pgoff);
			snprintf(path, pathlen, "%s", file);
			break;
		}
	}
	fclose(f);
	return off;
}

/* One counting uprobe event per online CPU; the number opened, or -1. */
static int open_uprobe(int type, const char *path, long off, int *fds, int max)
{
	struct perf_event_attr attr;
	int n = 0;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	memset(&attr, 0, sizeof(attr));
	attr.size = sizeof(attr);
	attr.type = type;
	attr.config1 = (unsigned long)path;	/* uprobe_path */
	attr.config2 = off;			/* probe_offset */
	for (long cpu = 0; cpu < cpus && n < max; cpu++) {
		fds[n] = syscall(__NR_perf_event_open, &attr, -1, cpu, -1, 0);
		if (fds[n] < 0)
			return -1;
		n++;
	}
	return n;
}

static long uprobe_count(const int *fds, int n)
{
	long sum = 0;

	for (int i = 0; i < n; i++) {
		unsigned long v;

		if (read(fds[i], &v, sizeof(v)) != sizeof(v))
			return -1;
		sum += v;
	}
	return sum;
}

/* A copy of probed_fn() in the range: the binary's page mapped there. */
static long (*map_probed_fn(int fd, long off))(long)
{
	long page_off = off & ~(long)(PAGE - 1);
	char *p = mmap(NULL, 2 * PAGE, PROT_READ | PROT_EXEC,
		       MAP_PRIVATE | MAP_HALFPROC, fd, page_off);

	if (p == MAP_FAILED || !in_range(p, 2 * PAGE))
		return NULL;
	return (long (*)(long))(p + (off - page_off));
}

/* A member calls @a and @b (range copies) and probed_fn() (private). */
static int call_in_member(long (*a)(long), long (*b)(long))
{
	pid_t pid = hp_spawn();
	int st;

	if (pid == 0) {
		if (a(20) != 61 || b(7) != 22 || probed_fn(1) != 4 || a(0) != 1)
			_exit(1);
		_exit(0);
	}
	if (pid < 0)
		return -2;
	/* 5 s: a member that cannot get past the breakpoint spins on it. */
	for (int i = 0; waitpid(pid, &st, WNOHANG) != pid; i++) {
		if (i == 500) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			printf("# member calling probed code in the range: still on it after 5 s, killed\n");
			return -3;
		}
		usleep(10000);
	}
	if (WIFSIGNALED(st))
		printf("# member calling probed code in the range: killed by signal %d\n",
		       WTERMSIG(st));
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(uprobe_on_code_in_shared_range)
{
	int type = uprobe_pmu_type(), fds[64], n, fd;
	long (*before_probe)(long), (*after_probe)(long);
	char path[256];
	long off, c0, c1;

	REQUIRE_HALFPROC();
	if (type < 0)
		SKIP(return, "no uprobe PMU (CONFIG_UPROBE_EVENTS)");
	off = probed_fn_offset(path, sizeof(path));
	ASSERT_LE(0, off);
	fd = open(path, O_RDONLY);
	ASSERT_LE(0, fd);
	before_probe = map_probed_fn(fd, off);
	ASSERT_NE(NULL, before_probe);
	/* Unprobed, the range copy runs. */
	ASSERT_EQ(61, before_probe(20));

	n = open_uprobe(type, path, off, fds, 64);
	ASSERT_LT(0, n);
	after_probe = map_probed_fn(fd, off);
	ASSERT_NE(NULL, after_probe);
	c0 = uprobe_count(fds, n);
	ASSERT_EQ(0, call_in_member(before_probe, after_probe));
	/* The test process, the set's first member, too. */
	ASSERT_EQ(61, before_probe(20));
	ASSERT_EQ(22, after_probe(7));
	c1 = uprobe_count(fds, n);
	TH_LOG("uprobe hits: %ld of 6 calls (4 in the range, 2 private)", c1 - c0);
	ASSERT_EQ(6, c1 - c0);
	for (int i = 0; i < n; i++)
		close(fds[i]);
	/* Unregistered: the range's code is the file's again. */
	ASSERT_EQ(0, memcmp((void *)after_probe, (void *)probed_fn, 16));
	ASSERT_EQ(0, call_in_member(before_probe, after_probe));
	close(fd);
}

/*
 * gdb itself, when the guest has it (scripts/gdb-proof.sh puts Debian's gdb
 * in; the suite's guest has none and skips): attached to a member, gdb
 * prints a shared variable through a private pointer and sets it; from the
 * member's core file, gdb prints it again.  gdb reads and writes a live
 * tracee with PTRACE_PEEKDATA/POKEDATA and /proc/<pid>/mem, tested above
 * without gdb.
 */
static unsigned long *hp_gdb_shared;

static int run_gdb(const char *args, const char *want, char *out, size_t outlen)
{
	char cmd[512];
	size_t n = 0;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "/usr/bin/gdb -nx -batch %s 2>&1", args);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	while (n + 1 < outlen && fgets(out + n, outlen - n, p))
		n += strlen(out + n);
	out[n] = 0;
	if (pclose(p) == -1)
		return -1;
	return strstr(out, want) ? 0 : -1;
}

static void print_lines(const char *out)
{
	const char *l = out;

	while (*l) {
		const char *e = strchr(l, '\n');
		int len = e ? (int)(e - l) : (int)strlen(l);

		if (len > 0 && len < 200)
			printf("# gdb: %.*s\n", len, l);
		l += len + (e ? 1 : 0);
	}
}

TEST(gdb_reads_shared_variable_live_and_from_core)
{
	static char out[65536];
	struct rlimit rl = { RLIM_INFINITY, RLIM_INFINITY };
	char args[384], pattern[256] = "", path[64], exe[128] = "";
	struct chan c;
	pid_t target;
	int st;

	REQUIRE_HALFPROC();
	if (access("/usr/bin/gdb", X_OK))
		SKIP(return, "no gdb in this guest (scripts/gdb-proof.sh adds it)");
	hp_gdb_shared = hp_anon(PAGE);
	ASSERT_NE(MAP_FAILED, hp_gdb_shared);
	hp_gdb_shared[0] = 0x5ca1ab1e0ddba11UL;
	ASSERT_EQ(0, setrlimit(RLIMIT_CORE, &rl));
	target = start_target(&c, NULL);
	ASSERT_GT(target, 0);

	/* Live: the private pointer, then the shared variable through it. */
	snprintf(args, sizeof(args),
		 "-p %d -ex 'print/x *(unsigned long *)&hp_gdb_shared' "
		 "-ex 'print/x **(unsigned long **)&hp_gdb_shared' "
		 "-ex 'set var **(unsigned long **)&hp_gdb_shared = 0xfeedfacecafebeef' "
		 "/proc/%d/exe", target, target);
	ASSERT_EQ(0, run_gdb(args, "= 0x5ca1ab1e0ddba11", out, sizeof(out))) {
		printf("%s", out);
	}
	print_lines(out);
	ASSERT_EQ(0xfeedfacecafebeefUL, hp_gdb_shared[0]);

	/* The core: dumped by the member, read by gdb. */
	ASSERT_EQ(0, core_pattern_set(pattern, sizeof(pattern)));
	hp_gdb_shared[1] = 0xc0dedbadc0deUL;
	tell_child(&c, 'a');
	ASSERT_EQ(target, waitpid(target, &st, 0));
	core_pattern_restore(pattern);
	ASSERT_TRUE(WCOREDUMP(st));
	snprintf(path, sizeof(path), "/tmp/hp_remote.core.%d", target);
	ASSERT_LT(0, readlink("/proc/self/exe", exe, sizeof(exe) - 1));
	snprintf(args, sizeof(args),
		 "-ex 'print/x *(unsigned long *)&hp_gdb_shared' "
		 "-ex 'print/x **(unsigned long **)&hp_gdb_shared' "
		 "-ex 'print/x (*(unsigned long **)&hp_gdb_shared)[1]' "
		 "%s %s", exe, path);
	ASSERT_EQ(0, run_gdb(args, "= 0xc0dedbadc0de", out, sizeof(out))) {
		printf("%s", out);
	}
	print_lines(out);
	ASSERT_NE(NULL, strstr(out, "= 0xfeedfacecafebeef"));
	unlink(path);
}

TEST_HARNESS_MAIN
