// SPDX-License-Identifier: GPL-2.0
/*
 * dmread()/dmwrite(): copies between members' private memory.  Data over
 * many sizes and alignments, the error list, short copies, targets that
 * unmap or exit in the middle of large copies (no pin may leak), and who may
 * copy: members only, with ptrace's credentials, to a dumpable target, and
 * what Yama's ptrace_scope allows.
 */
#include "../lib/halfproc_test.h"
#include <sys/prctl.h>
#include "kselftest_harness.h"

#define MB (1UL << 20)

static unsigned char pat(size_t i, unsigned seed)
{
	return (unsigned char)((i * 31 + seed * 7 + (i >> 12)) & 0xff);
}

/* A member that owns a private buffer and serves commands over a channel. */
struct peer {
	pid_t pid;
	struct chan c;
	unsigned char **buf;	/* where the child publishes its buffer address */
};

static unsigned char **shared_slot(void)
{
	return hp_anon(PAGE);
}

/* Child: allocate len private bytes, fill with pattern seed, publish, wait. */
static int peer_child(struct peer *p, size_t len, unsigned seed)
{
	unsigned char *b = malloc(len + 2 * PAGE);
	char cmd;

	if (!b)
		return 40;
	for (size_t i = 0; i < len + 2 * PAGE; i++)
		b[i] = pat(i, seed);
	*p->buf = b;
	tell_parent(&p->c, 'r');
	while ((cmd = from_parent(&p->c)) != 'q') {
		if (cmd == 'v') {	/* verify what the parent dmwrote */
			size_t off = 0, n = 0;

			memcpy(&off, (char *)p->buf + 16, sizeof(off));
			memcpy(&n, (char *)p->buf + 32, sizeof(n));
			for (size_t i = 0; i < n; i++)
				if (b[off + i] != (unsigned char)~pat(i, seed + 1))
					return 41;
			/* Restore the pattern for the next reads. */
			for (size_t i = 0; i < n; i++)
				b[off + i] = pat(off + i, seed);
			tell_parent(&p->c, 'k');
		}
	}
	return 0;
}

static int peer_start(struct peer *p, size_t len, unsigned seed)
{
	p->buf = shared_slot();
	if (p->buf == MAP_FAILED || chan_open(&p->c))
		return -1;
	p->pid = hp_spawn();
	if (p->pid == 0)
		_exit(peer_child(p, len, seed));
	if (p->pid < 0)
		return -1;
	from_child(&p->c);
	return 0;
}

static int peer_stop(struct peer *p)
{
	tell_child(&p->c, 'q');
	return wait_status(p->pid);
}

TEST(sizes_and_alignments)
{
	static const size_t sizes[] = { 1, 2, 7, 63, 64, 4095, 4096, 4097, 8191,
					65536 + 3, MB - 1, MB + 5, 16 * MB + 1 };
	static const size_t offs[] = { 0, 1, 4095, 2048 + 3 };
	size_t max = 16 * MB + 1 + PAGE;
	unsigned char *local = malloc(max + PAGE);
	struct peer p;

	REQUIRE_HALFPROC();
	ASSERT_NE(NULL, local);
	ASSERT_EQ(0, peer_start(&p, max, 5));
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		for (size_t o = 0; o < sizeof(offs) / sizeof(offs[0]); o++) {
			size_t n = sizes[s], off = offs[o], lo = (off * 7) % PAGE;
			ssize_t r;

			memset(local, 0, n + lo);
			r = dmread(p.pid, *p.buf + off, n, local + lo);
			ASSERT_EQ((ssize_t)n, r) TH_LOG("dmread size %zu off %zu", n, off);
			for (size_t i = 0; i < n; i++) {
				ASSERT_EQ(pat(off + i, 5), local[lo + i]) {
					TH_LOG("byte %zu of size %zu off %zu", i, n, off);
				}
			}
			/* And back: write the complement of another pattern. */
			for (size_t i = 0; i < n; i++)
				local[lo + i] = (unsigned char)~pat(i, 6);
			r = dmwrite(p.pid, *p.buf + off, n, local + lo);
			ASSERT_EQ((ssize_t)n, r);
			memcpy((char *)p.buf + 16, &off, sizeof(off));
			memcpy((char *)p.buf + 32, &n, sizeof(n));
			tell_child(&p.c, 'v');
			ASSERT_EQ('k', from_child(&p.c));
		}
	}
	ASSERT_EQ(0, peer_stop(&p));
	free(local);
}

TEST(quarter_gigabyte)
{
	const size_t n = 256 * MB;
	unsigned char *local;
	struct peer p;
	ssize_t r;

	REQUIRE_HALFPROC();
	if (meminfo("MemAvailable") < (long)(3 * n / 1024 + 65536))
		SKIP(return, "needs %zu MiB of free memory", 3 * n / MB);
	local = malloc(n);
	ASSERT_NE(NULL, local);
	ASSERT_EQ(0, peer_start(&p, n, 9));
	r = dmread(p.pid, *p.buf + 3, n - 5, local + 1);
	ASSERT_EQ((ssize_t)(n - 5), r);
	for (size_t i = 0; i < n - 5; i += 4093)
		ASSERT_EQ(pat(3 + i, 9), local[1 + i]);
	ASSERT_EQ(pat(n - 3, 9), local[n - 5]);
	ASSERT_EQ(0, peer_stop(&p));
	free(local);
}

TEST(vectored)
{
	unsigned char a[100], b[5000];
	struct iovec l[2] = { { a, sizeof(a) }, { b, sizeof(b) } };
	struct iovec r[2];
	struct peer p;

	REQUIRE_HALFPROC();
	ASSERT_EQ(0, peer_start(&p, 3 * PAGE, 11));
	r[0] = (struct iovec){ *p.buf + 10, 3000 };
	r[1] = (struct iovec){ *p.buf + 5000, 2100 };
	ASSERT_EQ(5100, dmreadv(p.pid, l, 2, r, 2, 0));
	for (int i = 0; i < 100; i++)
		ASSERT_EQ(pat(10 + i, 11), a[i]);
	for (int i = 0; i < 2900; i++)
		ASSERT_EQ(pat(110 + i, 11), b[i]);
	for (int i = 0; i < 2100; i++)
		ASSERT_EQ(pat(5000 + i, 11), b[2900 + i]);
	errno = 0;
	ASSERT_EQ(-1, dmreadv(p.pid, l, 2, r, 2, 1));
	ASSERT_EQ(EINVAL, errno);
	ASSERT_EQ(0, peer_stop(&p));
}

TEST(error_list)
{
	char buf[2 * PAGE];
	unsigned char *remote;
	char *none;
	struct peer p;
	pid_t stranger;

	REQUIRE_HALFPROC();
	ASSERT_EQ(0, peer_start(&p, 4 * PAGE, 1));
	/* size 0 copies nothing, even from a bad pid. */
	ASSERT_EQ(0, dmread(p.pid, *p.buf, 0, buf));
	ASSERT_EQ(0, dmread(999999, *p.buf, 0, buf));
	errno = 0;
	ASSERT_EQ(-1, dmread(999999, *p.buf, 8, buf));
	ASSERT_EQ(ESRCH, errno);
	errno = 0;
	ASSERT_EQ(-1, dmread(p.pid, *p.buf, SIZE_MAX, buf));
	ASSERT_EQ(EINVAL, errno);
	errno = 0;
	ASSERT_EQ(-1, dmread(p.pid, (void *)-16L, 64, buf));
	ASSERT_EQ(EINVAL, errno);
	errno = 0;
	ASSERT_EQ(-1, dmread(p.pid, *p.buf, 8, (void *)8));
	ASSERT_EQ(EFAULT, errno);
	errno = 0;
	ASSERT_EQ(-1, dmread(p.pid, (void *)0x1000, 8, buf));
	ASSERT_EQ(EFAULT, errno);
	/* PROT_NONE and unmapped remote pages. */
	none = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, none);
	{
		/* The child inherited nothing of this mapping: it is the
		 * parent's private memory; read it from the child's side. */
		pid_t q = hp_spawn();

		if (q == 0) {
			char tmp[16];

			/* Parent's page made PROT_NONE below before we copy. */
			usleep(200000);
			if (dmread(getppid(), none, 16, tmp) != -1 || errno != EFAULT)
				_exit(1);
			if (dmread(getppid(), none + PAGE, 16, tmp) != -1 || errno != EFAULT)
				_exit(2);
			_exit(0);
		}
		ASSERT_EQ(0, mprotect(none, PAGE, PROT_NONE));
		ASSERT_EQ(0, munmap(none + PAGE, PAGE));
		ASSERT_EQ(0, wait_status(q));
	}
	/* Short copy: a valid page followed by an unmapped one. */
	{
		char *two = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		pid_t q;

		ASSERT_NE(MAP_FAILED, two);
		memset(two, 'v', PAGE);
		ASSERT_EQ(0, munmap(two + PAGE, PAGE));
		q = hp_spawn();
		if (q == 0) {
			char tmp[2 * PAGE];
			ssize_t r = dmread(getppid(), two + 100, 2 * PAGE - 200, tmp);

			_exit(r == (ssize_t)(PAGE - 100) && tmp[0] == 'v' ? 0 : 1);
		}
		ASSERT_EQ(0, wait_status(q));
	}
	/*
	 * Strangers: root outside any set, then a process of another set.  A
	 * plain child cannot see the shared range, so take the address first.
	 */
	remote = *p.buf;
	stranger = hp_clone(0);
	ASSERT_GE(stranger, 0);
	if (stranger == 0) {
		char tmp[8];

		if (dmread(p.pid, remote, 8, tmp) != -1 || errno != EPERM)
			_exit(1);
		if (hp_anon(PAGE) == MAP_FAILED)	/* now in a set of its own */
			_exit(2);
		if (dmwrite(p.pid, remote, 8, tmp) != -1 || errno != EPERM)
			_exit(3);
		_exit(0);
	}
	ASSERT_EQ(0, wait_status(stranger));
	/* And a member may not reach a stranger. */
	stranger = hp_clone(0);
	if (stranger == 0) {
		pause();
		_exit(0);
	}
	errno = 0;
	ASSERT_EQ(-1, dmread(stranger, *p.buf, 8, buf));
	ASSERT_EQ(EPERM, errno);
	kill(stranger, SIGKILL);
	wait_status(stranger);
	ASSERT_EQ(0, peer_stop(&p));
}

static long vmstat(const char *key)
{
	char name[64];
	long v;
	long r = -1;
	FILE *f = fopen("/proc/vmstat", "r");

	if (!f)
		return -1;
	while (fscanf(f, "%63s %ld", name, &v) == 2)
		if (!strcmp(name, key))
			r = v;
	fclose(f);
	return r;
}

TEST(target_vanishes_mid_copy)
{
	const size_t n = 32 * MB;
	unsigned char *local = malloc(n);
	long acq0, rel0, acq1, rel1;
	int shorts = 0, fulls = 0;

	REQUIRE_HALFPROC();
	ASSERT_NE(NULL, local);
	acq0 = vmstat("nr_foll_pin_acquired");
	rel0 = vmstat("nr_foll_pin_released");
	for (int round = 0; round < 12; round++) {
		unsigned char **slot = shared_slot();
		pid_t t;
		ssize_t r = 0;

		ASSERT_NE(MAP_FAILED, slot);
		t = hp_spawn();
		ASSERT_GE(t, 0);
		if (t == 0) {
			unsigned char *b = mmap(NULL, n, PROT_READ | PROT_WRITE,
						MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

			memset(b, 0x77, n);
			*slot = b;
			usleep(1000 * (round % 4) * 3);
			if (round % 2)
				munmap(b, n);
			_exit(0);	/* exit with or without unmapping */
		}
		while (!*(volatile unsigned char **)slot)
			usleep(100);
		while (r >= 0) {
			r = dmread(t, *slot, n, local);
			if (r == (ssize_t)n)
				fulls++;
			else if (r >= 0) {
				shorts++;
				break;
			}
		}
		ASSERT_TRUE(r >= 0 || errno == EFAULT || errno == ESRCH)
			TH_LOG("round %d: errno %d", round, errno);
		wait_status(t);
		munmap(slot, PAGE);
	}
	acq1 = vmstat("nr_foll_pin_acquired");
	rel1 = vmstat("nr_foll_pin_released");
	TH_LOG("%d full and %d short copies; pins acquired %ld released %ld",
	       fulls, shorts, acq1 - acq0, rel1 - rel0);
	ASSERT_GT(acq1 - acq0, 0);
	ASSERT_EQ(acq1 - acq0, rel1 - rel0);
	free(local);
}

/*
 * Membership is not enough: dm* also needs what ptrace attach would (same
 * real credentials or CAP_SYS_PTRACE, a dumpable target, the LSM hook), and
 * a non-dumpable target refuses every member.
 */
TEST(credentials_and_dumpable)
{
	unsigned char **slot;
	unsigned char *remote;
	char buf[8];
	struct chan c;
	struct peer p;
	pid_t q;

	REQUIRE_HALFPROC();
	if (getuid() != 0)
		SKIP(return, "needs root to drop privileges");
	ASSERT_EQ(0, peer_start(&p, 4 * PAGE, 3));
	remote = *p.buf;

	/* A member that dropped to uid 1000 cannot reach a root member. */
	q = hp_spawn();
	ASSERT_GE(q, 0);
	if (q == 0) {
		char tmp[8] = "dropped";

		if (setresgid(1000, 1000, 1000) || setresuid(1000, 1000, 1000))
			_exit(1);
		if (dmwrite(p.pid, remote, 8, tmp) != -1 || errno != EPERM)
			_exit(2);
		if (dmread(p.pid, remote, 8, tmp) != -1 || errno != EPERM)
			_exit(3);
		_exit(0);
	}
	ASSERT_EQ(0, wait_status(q));
	/* A root member still can, and nothing was written. */
	ASSERT_EQ(8, dmread(p.pid, remote, 8, buf));
	for (int i = 0; i < 8; i++)
		ASSERT_EQ(pat(i, 3), (unsigned char)buf[i]);

	/* A member that made itself non-dumpable cannot be read, even by root. */
	slot = shared_slot();
	ASSERT_NE(MAP_FAILED, slot);
	ASSERT_EQ(0, chan_open(&c));
	q = hp_spawn();
	ASSERT_GE(q, 0);
	if (q == 0) {
		static char secret[PAGE] = "secret";

		if (prctl(PR_SET_DUMPABLE, 0))
			_exit(1);
		*slot = (unsigned char *)secret;
		tell_parent(&c, 'n');
		if (from_parent(&c) != 'd' || prctl(PR_SET_DUMPABLE, 1))
			_exit(2);
		tell_parent(&c, 'y');
		from_parent(&c);
		_exit(0);
	}
	ASSERT_EQ('n', from_child(&c));
	errno = 0;
	ASSERT_EQ(-1, dmread(q, *slot, 6, buf));
	ASSERT_EQ(EPERM, errno);
	errno = 0;
	ASSERT_EQ(-1, dmwrite(q, *slot, 6, "public"));
	ASSERT_EQ(EPERM, errno);
	/* Dumpable again: readable again. */
	tell_child(&c, 'd');
	ASSERT_EQ('y', from_child(&c));
	ASSERT_EQ(6, dmread(q, *slot, 6, buf));
	ASSERT_EQ(0, memcmp(buf, "secret", 6));
	tell_child(&c, 'q');
	ASSERT_EQ(0, wait_status(q));
	ASSERT_EQ(0, peer_stop(&p));
}

#define YAMA_SCOPE "/proc/sys/kernel/yama/ptrace_scope"

/* Yama's ptrace_scope, or -1 without Yama. */
static int yama_get(void)
{
	long v = file_long(YAMA_SCOPE);

	return v < 0 ? -1 : (int)v;
}

static int yama_set(int v)
{
	FILE *f = fopen(YAMA_SCOPE, "w");
	int r;

	if (!f)
		return -1;
	r = fprintf(f, "%d\n", v) > 0 ? 0 : -1;
	return fclose(f) ? -1 : r;
}

/*
 * From a fresh member (a sibling of @target, not its ancestor), at uid 1000
 * when @drop: dmread 8 bytes of @addr and dmwrite them back.  0 if both
 * worked and read @want, 1 if both failed with EPERM, else a step number.
 */
static int sibling_copies(pid_t target, void *addr, const char *want, int drop)
{
	pid_t q = hp_spawn();

	if (q == 0) {
		char got[8];
		ssize_t r, w;

		if (drop && (setresgid(1000, 1000, 1000) || setresuid(1000, 1000, 1000)))
			_exit(10);
		r = dmread(target, addr, 8, got);
		if (r == 8 && !memcmp(got, want, 8)) {
			w = dmwrite(target, addr, 8, got);
			_exit(w == 8 ? 0 : 11);
		}
		if (r != -1 || errno != EPERM)
			_exit(12);
		w = dmwrite(target, addr, 8, want);
		_exit(w == -1 && errno == EPERM ? 1 : 13);
	}
	return q < 0 ? 14 : wait_status(q);
}

/*
 * dm* takes ptrace's attach check, so Yama's ptrace_scope rules it like
 * ptrace: at 1 a uid-1000 member reaches a uid-1000 sibling only once the
 * target named an ancestor of the reader with PR_SET_PTRACER (the runtime
 * names the set's creator); at 2 only with CAP_SYS_PTRACE (root); 3 (no
 * attach at all, and not reversible) is not set here.
 */
TEST(yama_ptrace_scope)
{
	unsigned char **slot;
	int scope, r0, r1, r1p, r2, r2root;
	struct chan c;
	pid_t t;

	REQUIRE_HALFPROC();
	if (getuid() != 0)
		SKIP(return, "needs root to set ptrace_scope and drop privileges");
	scope = yama_get();
	if (scope < 0)
		SKIP(return, "no Yama");
	if (scope == 3)
		SKIP(return, "ptrace_scope is 3 (cannot be lowered)");
	slot = shared_slot();
	ASSERT_NE(MAP_FAILED, slot);
	ASSERT_EQ(0, chan_open(&c));
	t = hp_spawn();
	ASSERT_GE(t, 0);
	if (t == 0) {
		static char word[8] = "yamaword";

		/* Same uid as the readers, and dumpable again after the drop. */
		if (setresgid(1000, 1000, 1000) || setresuid(1000, 1000, 1000) ||
		    prctl(PR_SET_DUMPABLE, 1))
			_exit(1);
		*slot = (unsigned char *)word;
		tell_parent(&c, 'r');
		if (from_parent(&c) != 'p' || prctl(PR_SET_PTRACER, getppid()))
			_exit(2);
		tell_parent(&c, 'p');
		from_parent(&c);
		_exit(memcmp(word, "yamaword", 8) ? 3 : 0);
	}
	ASSERT_EQ('r', from_child(&c));
	ASSERT_EQ(0, yama_set(0));
	r0 = sibling_copies(t, *slot, "yamaword", 1);
	ASSERT_EQ(0, yama_set(1));
	r1 = sibling_copies(t, *slot, "yamaword", 1);
	tell_child(&c, 'p');
	ASSERT_EQ('p', from_child(&c));
	r1p = sibling_copies(t, *slot, "yamaword", 1);
	ASSERT_EQ(0, yama_set(2));
	r2 = sibling_copies(t, *slot, "yamaword", 1);
	r2root = sibling_copies(t, *slot, "yamaword", 0);
	EXPECT_EQ(0, yama_set(scope));
	tell_child(&c, 'q');
	EXPECT_EQ(0, wait_status(t));
	TH_LOG("uid-1000 sibling: scope 0 %d, scope 1 %d, scope 1 + PR_SET_PTRACER %d, scope 2 %d; root sibling at scope 2 %d (0 copied, 1 EPERM)",
	       r0, r1, r1p, r2, r2root);
	EXPECT_EQ(0, r0);
	EXPECT_EQ(1, r1);
	EXPECT_EQ(0, r1p);
	EXPECT_EQ(1, r2);
	EXPECT_EQ(0, r2root);
}

/* Copy @src to @dst with mode @mode. */
static int copy_file(const char *src, const char *dst, mode_t mode)
{
	char buf[65536];
	int in = open(src, O_RDONLY), out;
	ssize_t n;

	unlink(dst);
	out = open(dst, O_WRONLY | O_CREAT | O_EXCL, 0700);
	if (in < 0 || out < 0)
		return -1;
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, n) != n)
			return -1;
	close(in);
	return n || fchmod(out, mode) || close(out) ? -1 : 0;
}

/* The start of @pid's first mapping, from /proc/<pid>/maps, or 0. */
static unsigned long first_mapping(pid_t pid)
{
	unsigned long start = 0;
	char path[64];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (fscanf(f, "%lx-", &start) != 1)
		start = 0;
	fclose(f);
	return start;
}

/* Whether /proc/<pid>/comm is @comm. */
static int comm_is(pid_t pid, const char *comm)
{
	char path[64], buf[32] = "";
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/comm", pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = 0;
	fclose(f);
	buf[strcspn(buf, "\n")] = 0;
	return !strcmp(buf, comm);
}

/*
 * A member (uid 1000) execs a program it may read: it stays a member and
 * the root member can read it.  The same program, execute-only: still a
 * member, but not dumpable, so nobody may read it.
 */
TEST(exec_of_unreadable_image)
{
	static const struct { mode_t mode; const char *name; int ok; } cases[] = {
		{ 0755, "hp_bb_readable", 1 },
		{ 0111, "hp_bb_execonly", 0 },
	};

	REQUIRE_HALFPROC();
	if (getuid() != 0)
		SKIP(return, "needs root to drop privileges");
	if (access("/bin/busybox", R_OK))
		SKIP(return, "no /bin/busybox to exec");
	for (int i = 0; i < 2; i++) {
		char path[64], buf[8];
		unsigned long addr = 0;
		ssize_t r;
		pid_t q;

		snprintf(path, sizeof(path), "/tmp/%s", cases[i].name);
		ASSERT_EQ(0, copy_file("/bin/busybox", path, cases[i].mode));
		q = hp_spawn();
		ASSERT_GE(q, 0);
		if (q == 0) {
			if (setresgid(1000, 1000, 1000) || setresuid(1000, 1000, 1000))
				_exit(1);
			/* Dropping uids made it non-dumpable; the exec decides. */
			prctl(PR_SET_DUMPABLE, 1);
			execl(path, "sleep", "30", (char *)NULL);
			_exit(2);
		}
		for (int t = 0; t < 1000 && !comm_is(q, cases[i].name); t++)
			usleep(10000);
		ASSERT_TRUE(comm_is(q, cases[i].name));
		addr = first_mapping(q);
		ASSERT_NE(0, addr);
		errno = 0;
		r = dmread(q, (void *)addr, sizeof(buf), buf);
		TH_LOG("%s (mode %o): dmread %zd, errno %d", cases[i].name,
		       cases[i].mode, r, errno);
		if (cases[i].ok) {
			EXPECT_EQ((ssize_t)sizeof(buf), r);
		} else {
			EXPECT_EQ(-1, r);
			EXPECT_EQ(EPERM, errno);
		}
		kill(q, SIGKILL);
		wait_status(q);
		unlink(path);
	}
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	return test_harness_run(argc, argv);
}
