// SPDX-License-Identifier: GPL-2.0
/*
 * Remote access to a member's shared range: process_vm_readv/writev,
 * /proc/<pid>/mem, PTRACE_PEEKDATA/POKEDATA (what gdb uses to read and
 * write a tracee), dmread() and core dumps must see the range as the member
 * sees it, from a tracer inside or outside the set, with ptrace's permission
 * rules on the member.  An access that crosses a boundary of the range
 * continues in the other mm.  A member's own slow GUP (vmsplice() of a page
 * nobody touched yet) reaches the range too.
 *
 * Each test creates a set (the test process is its first member) with a
 * region in the range, a member target that waits on a channel, and, for
 * the non-member cases, a plain fork() of the test process, which is not a
 * member (checked: the range faults there).
 */
#include "../lib/halfproc_test.h"
#include <elf.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include "kselftest_harness.h"

#define UNPRIV 1000

#define REQUIRE_HALFPROC() do {						\
	if (!hp_supported())						\
		SKIP(return, "halfproc module not loaded");		\
} while (0)

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

/* process_vm_readv() of @len bytes at @remote in @pid into @buf. */
static ssize_t pvm_read(pid_t pid, void *buf, const void *remote, size_t len)
{
	struct iovec l = { .iov_base = buf, .iov_len = len };
	struct iovec r = { .iov_base = (void *)remote, .iov_len = len };

	return process_vm_readv(pid, &l, 1, &r, 1, 0);
}

static ssize_t pvm_write(pid_t pid, const void *buf, void *remote, size_t len)
{
	struct iovec l = { .iov_base = (void *)buf, .iov_len = len };
	struct iovec r = { .iov_base = remote, .iov_len = len };

	return process_vm_writev(pid, &l, 1, &r, 1, 0);
}

/*
 * process_vm_readv()/writev() of a member's shared range by a non-member
 * (root) and by a member: what they read is the range's content, what
 * they write every member sees.
 */
TEST(process_vm_rw_of_shared_range)
{
	unsigned char *shared = hp_anon(8 * PAGE);
	struct chan c;
	pid_t target, s;

	REQUIRE_HALFPROC();
	ASSERT_NE(MAP_FAILED, shared);
	fill(shared, 8 * PAGE, 1);
	target = start_target(&c, NULL);
	ASSERT_GT(target, 0);

	s = start_stranger(shared);
	ASSERT_GE(s, 0);
	if (s == 0) {
		unsigned char *buf = malloc(8 * PAGE);
		ssize_t r;

		memset(buf, 0, 8 * PAGE);
		errno = 0;
		r = pvm_read(target, buf, shared, 8 * PAGE);
		printf("# non-member process_vm_readv of 8 pages: %zd (errno %d)\n", r, errno);
		if (r != (ssize_t)(8 * PAGE) || mismatch(buf, 8 * PAGE, 1) >= 0)
			_exit(1);
		fill(buf, 3 * PAGE, 2);
		errno = 0;
		r = pvm_write(target, buf, shared + PAGE + 100, 3 * PAGE);
		printf("# non-member process_vm_writev of 3 pages: %zd (errno %d)\n", r, errno);
		_exit(r == (ssize_t)(3 * PAGE) ? 0 : 2);
	}
	ASSERT_EQ(0, wait_status(s));
	/* The test process, a member, sees what the stranger wrote. */
	ASSERT_EQ(-1, mismatch(shared + PAGE + 100, 3 * PAGE, 2));
	ASSERT_EQ(-1, mismatch(shared, PAGE + 100, 1));

	/* A member reading another member's range reads the same memory. */
	{
		unsigned char buf[PAGE];
		ssize_t r;

		errno = 0;
		r = pvm_read(target, buf, shared + PAGE + 100, PAGE);
		TH_LOG("member process_vm_readv of 1 page: %zd (errno %d)", r, errno);
		ASSERT_EQ((ssize_t)PAGE, r);
		ASSERT_EQ(-1, mismatch(buf, PAGE, 2));
	}
	ASSERT_EQ(0, stop_target(&c, target));
}

/*
 * One process_vm_readv() iovec and one /proc/<pid>/mem read across 2^45:
 * the member's private page below the range, then the set's page above it.
 */
TEST(remote_access_across_range_start)
{
	unsigned char *below = (unsigned char *)(uintptr_t)(HALFPROC_RANGE_START - PAGE);
	unsigned char *above = (unsigned char *)(uintptr_t)HALFPROC_RANGE_START;
	unsigned char *shared = hp_anon(PAGE);
	struct chan c;
	pid_t target, s;

	REQUIRE_HALFPROC();
	ASSERT_NE(MAP_FAILED, shared);
	ASSERT_EQ(above, hp_mmap(above, PAGE, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE));
	fill(above, PAGE, 4);
	/* The target maps its own private page just below the range. */
	ASSERT_EQ(0, chan_open(&c));
	target = hp_spawn();
	ASSERT_GE(target, 0);
	if (target == 0) {
		if (mmap(below, PAGE, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) != below)
			_exit(20);
		fill(below, PAGE, 3);
		tell_parent(&c, 'r');
		from_parent(&c);
		_exit(0);
	}
	ASSERT_EQ('r', from_child(&c));

	s = start_stranger(shared);
	ASSERT_GE(s, 0);
	if (s == 0) {
		unsigned char buf[2 * PAGE];
		char path[64];
		ssize_t r;
		int fd;

		memset(buf, 0, sizeof(buf));
		errno = 0;
		r = pvm_read(target, buf, below, 2 * PAGE);
		printf("# process_vm_readv across 2^45: %zd of %lu (errno %d)\n",
		       r, 2 * PAGE, errno);
		if (r != (ssize_t)(2 * PAGE) || mismatch(buf, PAGE, 3) >= 0 ||
		    mismatch(buf + PAGE, PAGE, 4) >= 0)
			_exit(1);
		snprintf(path, sizeof(path), "/proc/%d/mem", target);
		fd = open(path, O_RDONLY);
		if (fd < 0)
			_exit(2);
		/* One page from the middle of one to the middle of the other. */
		memset(buf, 0, sizeof(buf));
		errno = 0;
		r = pread(fd, buf, PAGE, (off_t)(uintptr_t)(below + PAGE / 2));
		printf("# /proc/pid/mem read across 2^45: %zd of %lu (errno %d)\n",
		       r, PAGE, errno);
		if (r != (ssize_t)PAGE)
			_exit(3);
		for (size_t i = 0; i < PAGE / 2; i++)
			if (buf[i] != pat(i + PAGE / 2, 3))
				_exit(4);
		if (mismatch(buf + PAGE / 2, PAGE / 2, 4) >= 0)
			_exit(5);
		_exit(0);
	}
	ASSERT_EQ(0, wait_status(s));
	tell_child(&c, 'q');
	ASSERT_EQ(0, wait_status(target));
}

/* /proc/<pid>/mem read and write of a member's shared range by a non-member. */
TEST(proc_pid_mem_of_shared_range)
{
	unsigned char *shared = hp_anon(4 * PAGE);
	struct chan c;
	pid_t target, s;

	REQUIRE_HALFPROC();
	ASSERT_NE(MAP_FAILED, shared);
	fill(shared, 4 * PAGE, 5);
	target = start_target(&c, NULL);
	ASSERT_GT(target, 0);
	s = start_stranger(shared);
	ASSERT_GE(s, 0);
	if (s == 0) {
		unsigned char buf[3 * PAGE];
		char path[64];
		ssize_t r;
		int fd;

		snprintf(path, sizeof(path), "/proc/%d/mem", target);
		fd = open(path, O_RDWR);
		if (fd < 0)
			_exit(1);
		errno = 0;
		r = pread(fd, buf, 3 * PAGE, (off_t)(uintptr_t)shared);
		printf("# /proc/pid/mem read of 3 pages: %zd (errno %d)\n", r, errno);
		if (r != (ssize_t)(3 * PAGE) || mismatch(buf, 3 * PAGE, 5) >= 0)
			_exit(2);
		fill(buf, 2 * PAGE, 6);
		errno = 0;
		r = pwrite(fd, buf, 2 * PAGE, (off_t)(uintptr_t)(shared + 2 * PAGE));
		printf("# /proc/pid/mem write of 2 pages: %zd (errno %d)\n", r, errno);
		_exit(r == (ssize_t)(2 * PAGE) ? 0 : 3);
	}
	ASSERT_EQ(0, wait_status(s));
	ASSERT_EQ(-1, mismatch(shared, 2 * PAGE, 5));
	ASSERT_EQ(-1, mismatch(shared + 2 * PAGE, 2 * PAGE, 6));
	ASSERT_EQ(0, stop_target(&c, target));
}

/*
 * PTRACE_PEEKDATA/POKEDATA of a shared variable, as gdb reads and writes
 * it ("print shared->counter", "set var"): by @tracer_is_member the test
 * process (a member and the target's parent), else a plain non-member child.
 * The target's private word is peeked too, so the tracer is known to work.
 */
static int peek_poke(pid_t target, unsigned long *shared_word,
		     unsigned long *private_word)
{
	unsigned long v;
	int st;

	if (ptrace(PTRACE_ATTACH, target, 0, 0))
		return 10;
	if (waitpid(target, &st, 0) != target || !WIFSTOPPED(st))
		return 11;
	errno = 0;
	v = ptrace(PTRACE_PEEKDATA, target, private_word, 0);
	if (errno || v != 0x0123456789abcdefUL)
		return 12;
	errno = 0;
	v = ptrace(PTRACE_PEEKDATA, target, shared_word, 0);
	printf("# PTRACE_PEEKDATA of a shared variable: %#lx (errno %d)\n", v, errno);
	if (errno || v != 0x5ca1ab1e0ddba11UL)
		return 13;
	errno = 0;
	if (ptrace(PTRACE_POKEDATA, target, shared_word + 1, 0xfeedfacecafebeefUL)) {
		printf("# PTRACE_POKEDATA of a shared variable: errno %d\n", errno);
		return 14;
	}
	if (ptrace(PTRACE_DETACH, target, 0, 0))
		return 15;
	return 0;
}

static unsigned long target_private_word;

static void ptrace_shared_variable(struct __test_metadata *_metadata,
				   int tracer_is_member)
{
	unsigned long *shared = hp_anon(PAGE);
	struct chan c;
	pid_t target, s;

	ASSERT_NE(MAP_FAILED, shared);
	shared[0] = 0x5ca1ab1e0ddba11UL;
	shared[1] = 0;
	target_private_word = 0x0123456789abcdefUL;
	target = start_target(&c, NULL);
	ASSERT_GT(target, 0);
	if (tracer_is_member) {
		ASSERT_EQ(0, peek_poke(target, shared, &target_private_word));
	} else {
		s = start_stranger(shared);
		ASSERT_GE(s, 0);
		if (s == 0)
			_exit(peek_poke(target, shared, &target_private_word));
		ASSERT_EQ(0, wait_status(s));
	}
	ASSERT_EQ(0xfeedfacecafebeefUL, shared[1]);
	/* The target runs on, unharmed. */
	tell_child(&c, 'x');
	ASSERT_EQ('k', from_child(&c));
	ASSERT_EQ(0, stop_target(&c, target));
}

TEST(ptrace_peek_poke_shared_variable_by_member)
{
	REQUIRE_HALFPROC();
	ptrace_shared_variable(_metadata, 1);
}

TEST(ptrace_peek_poke_shared_variable_by_non_member)
{
	REQUIRE_HALFPROC();
	ptrace_shared_variable(_metadata, 0);
}

/*
 * Who may: ptrace's rules on the member, nothing more and nothing less.  A
 * uid-1000 non-member may not reach a root member's range by any of the
 * three ways (EPERM/EACCES, as for its private memory); the same
 * non-member reaches a uid-1000 member's range.  Yama's scope is 0 for the
 * test, so only the credentials decide.
 */
TEST(remote_access_follows_ptrace_rules_on_the_member)
{
	unsigned char *shared = hp_anon(PAGE);
	int scope = yama_scope(-1);
	struct chan c;
	pid_t root_target, user_target, s;

	REQUIRE_HALFPROC();
	if (getuid() != 0)
		SKIP(return, "needs root to drop privileges");
	ASSERT_NE(MAP_FAILED, shared);
	fill(shared, PAGE, 8);
	if (scope > 0)
		ASSERT_EQ(0, yama_scope(0));
	root_target = start_target(&c, NULL);
	ASSERT_GT(root_target, 0);
	user_target = hp_spawn();
	ASSERT_GE(user_target, 0);
	if (user_target == 0) {
		if (drop_privileges() || prctl(PR_SET_DUMPABLE, 1))
			_exit(1);
		for (;;)
			pause();
	}
	usleep(100000);
	s = start_stranger(shared);
	ASSERT_GE(s, 0);
	if (s == 0) {
		unsigned char buf[PAGE];
		char path[64];
		ssize_t r;
		int fd;

		if (drop_privileges())
			_exit(1);
		errno = 0;
		if (pvm_read(root_target, buf, shared, PAGE) != -1 || errno != EPERM)
			_exit(2);
		snprintf(path, sizeof(path), "/proc/%d/mem", root_target);
		errno = 0;
		if (open(path, O_RDONLY) != -1 || errno != EACCES)
			_exit(3);
		errno = 0;
		if (ptrace(PTRACE_ATTACH, root_target, 0, 0) != -1 || errno != EPERM)
			_exit(4);
		/* The uid-1000 member: allowed, and the range is there. */
		errno = 0;
		r = pvm_read(user_target, buf, shared, PAGE);
		printf("# uid 1000 process_vm_readv of a uid-1000 member: %zd (errno %d)\n",
		       r, errno);
		if (r != (ssize_t)PAGE || mismatch(buf, PAGE, 8) >= 0)
			_exit(5);
		snprintf(path, sizeof(path), "/proc/%d/mem", user_target);
		fd = open(path, O_RDONLY);
		if (fd < 0 || pread(fd, buf, PAGE, (off_t)(uintptr_t)shared) != (ssize_t)PAGE ||
		    mismatch(buf, PAGE, 8) >= 0)
			_exit(6);
		_exit(0);
	}
	ASSERT_EQ(0, wait_status(s));
	kill(user_target, SIGKILL);
	wait_status(user_target);
	ASSERT_EQ(0, stop_target(&c, root_target));
	if (scope > 0)
		ASSERT_EQ(0, yama_scope(scope));
}

/* dmread()/dmwrite() of another member's shared range: the same memory. */
TEST(dmread_of_shared_range)
{
	unsigned char *shared = hp_anon(2 * PAGE);
	unsigned char buf[2 * PAGE];
	struct chan c;
	pid_t target;
	ssize_t r;

	REQUIRE_HALFPROC();
	ASSERT_NE(MAP_FAILED, shared);
	fill(shared, 2 * PAGE, 9);
	target = start_target(&c, NULL);
	ASSERT_GT(target, 0);
	errno = 0;
	r = dmread(target, shared + 10, 2 * PAGE - 10, buf);
	TH_LOG("dmread of 2 pages of the range: %zd (errno %d)", r, errno);
	ASSERT_EQ((ssize_t)(2 * PAGE - 10), r);
	for (size_t i = 0; i < 2 * PAGE - 10; i++)
		ASSERT_EQ(pat(i + 10, 9), buf[i]);
	fill(buf, PAGE, 10);
	ASSERT_EQ((ssize_t)PAGE, dmwrite(target, shared + PAGE, PAGE, buf));
	ASSERT_EQ(-1, mismatch(shared + PAGE, PAGE, 10));
	ASSERT_EQ(0, stop_target(&c, target));
}

/*
 * A member's own GUP of a shared page nobody has touched yet: the fast path
 * finds no page and the slow path must fault it in through the set mm.
 */
TEST(vmsplice_of_untouched_shared_page)
{
	unsigned char *shared = hp_anon(2 * PAGE);
	unsigned char buf[PAGE];
	struct iovec iov;
	ssize_t r;
	int p[2];

	REQUIRE_HALFPROC();
	ASSERT_NE(MAP_FAILED, shared);
	ASSERT_EQ(0, pipe(p));
	iov.iov_base = shared + PAGE;
	iov.iov_len = PAGE;
	errno = 0;
	r = vmsplice(p[1], &iov, 1, 0);
	TH_LOG("vmsplice of an untouched shared page: %zd (errno %d)", r, errno);
	ASSERT_EQ((ssize_t)PAGE, r);
	ASSERT_EQ((ssize_t)PAGE, read(p[0], buf, PAGE));
	for (size_t i = 0; i < PAGE; i++)
		ASSERT_EQ(0, buf[i]);
	close(p[0]);
	close(p[1]);
}

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
	FILE *f;
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

	f = fopen("/proc/sys/kernel/core_pattern", "r");
	ASSERT_NE(NULL, f);
	ASSERT_NE(NULL, fgets(pattern, sizeof(pattern), f));
	fclose(f);
	f = fopen("/proc/sys/kernel/core_pattern", "w");
	ASSERT_NE(NULL, f);
	fprintf(f, "/tmp/hp_remote.core.%%p\n");
	ASSERT_EQ(0, fclose(f));
	ASSERT_EQ(0, setrlimit(RLIMIT_CORE, &rl));

	target = start_target(&c, ppage);
	ASSERT_GT(target, 0);
	tell_child(&c, 'p');
	ASSERT_EQ('k', from_child(&c));
	tell_child(&c, 'a');
	ASSERT_EQ(target, waitpid(target, &st, 0));

	f = fopen("/proc/sys/kernel/core_pattern", "w");
	ASSERT_NE(NULL, f);
	fputs(pattern, f);
	fclose(f);

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
	FILE *f;
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
	f = fopen("/proc/sys/kernel/core_pattern", "r");
	ASSERT_NE(NULL, f);
	ASSERT_NE(NULL, fgets(pattern, sizeof(pattern), f));
	fclose(f);
	f = fopen("/proc/sys/kernel/core_pattern", "w");
	ASSERT_NE(NULL, f);
	fprintf(f, "/tmp/hp_remote.core.%%p\n");
	ASSERT_EQ(0, fclose(f));
	hp_gdb_shared[1] = 0xc0dedbadc0deUL;
	tell_child(&c, 'a');
	ASSERT_EQ(target, waitpid(target, &st, 0));
	f = fopen("/proc/sys/kernel/core_pattern", "w");
	ASSERT_NE(NULL, f);
	fputs(pattern, f);
	fclose(f);
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
