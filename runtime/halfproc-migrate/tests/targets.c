/* Targets for refusal and state tests: `targets MODE [ARG]`.
 * Each mode sets up one resource, then spins until killed (or, for
 * "signals", until SIGUSR1 arrives). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t got;
static volatile sig_atomic_t ticks;
static volatile unsigned long spin;

static void on_alrm(int sig)
{
	(void)sig;
	ticks++;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void on_usr1(int sig)
{
	(void)sig;
	got = 1;
}

static void *thread_main(void *p)
{
	(void)p;
	for (;;)
		pause();
	return NULL;
}

/*
 * A writer child and its reader (us) joined by a pipe, as a shell joins
 * a pipeline: N lines written in bursts of 50, read one at a time, every
 * 100th with a running checksum printed. Halfway the reader waits for the
 * file GO, the writer blocked on the full pipe meanwhile. The output does
 * not depend on timing.
 */
static int pipeline(int n, const char *go)
{
	unsigned long sum = 0;
	int p[2], lines = 0, st;
	char buf[256];
	pid_t w;
	FILE *f;

	if (pipe(p))
		return 1;
	w = fork();
	if (w == 0) {
		close(p[0]);
		f = fdopen(p[1], "w");
		for (int i = 0; i < n; i++) {
			fprintf(f, "line %d of a pipeline\n", i);
			if (i % 50 == 49) {
				fflush(f);
				usleep(1000);
			}
		}
		fclose(f);
		_exit(0);
	}
	close(p[1]);
	f = fdopen(p[0], "r");
	while (fgets(buf, sizeof(buf), f)) {
		for (char *c = buf; *c; c++)
			sum = sum * 31 + (unsigned char)*c;
		if (++lines % 100 == 0)
			printf("%d lines, sum %lu\n", lines, sum);
		while (lines == n / 2 && access(go, F_OK))
			usleep(1000);
		usleep(100);
	}
	waitpid(w, &st, 0);
	printf("done: %d lines, sum %lu, writer status %d\n", lines, sum, st);
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	int fds[2];
	pthread_t t;

	if (!strcmp(mode, "pipeline"))
		return pipeline(atoi(argv[2]), argv[3]);
	if (!strcmp(mode, "bigpipe")) {
		/*
		 * A self-pipe enlarged to 256 KiB holding 100000 unread bytes
		 * (more than a new pipe holds) until the file ARGV[2] exists.
		 */
		static char big[100000];
		unsigned long sum = 0;
		long got = 0, n;

		for (long i = 0; i < (long)sizeof(big); i++)
			big[i] = (char)(i * 7 + i / 4096);
		if (pipe(fds) || fcntl(fds[1], F_SETPIPE_SZ, 256 * 1024) < 0 ||
		    write(fds[1], big, sizeof(big)) != (ssize_t)sizeof(big))
			return 1;
		printf("filled\n");
		fflush(stdout);
		while (access(argv[2], F_OK))
			usleep(1000);
		close(fds[1]);
		while ((n = read(fds[0], big, sizeof(big))) > 0)
			for (long i = 0; i < n; i++, got++)
				sum = sum * 31 + (unsigned char)big[i];
		printf("read %ld bytes, sum %lu\n", got, sum);
		return 0;
	}

	if (!strcmp(mode, "thread")) {
		pthread_create(&t, NULL, thread_main, NULL);
	} else if (!strcmp(mode, "socket")) {
		socketpair(AF_UNIX, SOCK_STREAM, 0, fds);
	} else if (!strcmp(mode, "selfpipe")) {
		/* a pipe to itself with unread data, as xz and event loops use */
		struct sigaction sa;
		char buf[64];
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_usr1;
		sigaction(SIGUSR1, &sa, NULL);
		if (pipe(fds) || dup2(fds[0], 7) < 0 || write(fds[1], "carried", 7) != 7)
			return 1;
		while (!got)
			spin++;
		ssize_t n = read(7, buf, sizeof(buf));
		printf("pipe said %.*s\n", (int)(n > 0 ? n : 0), buf);
		return 3;
	} else if (!strcmp(mode, "device")) {
		if (open("/dev/ptmx", O_RDWR | O_NOCTTY) < 0)
			return 1;
	} else if (!strcmp(mode, "kernelfile")) {
		/* ARGV[2]: a file of procfs or sysfs, opened as fd 3. */
		if (open(argv[2], O_RDONLY) != 3)
			return 1;
	} else if (!strcmp(mode, "shared")) {
		int fd = open(argv[2], O_RDWR | O_CREAT, 0600);
		if (fd < 0 || ftruncate(fd, 4096))
			return 1;
		char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED)
			return 1;
		p[0] = 1;
	} else if (!strcmp(mode, "member")) {
		/* Like a member of a half-process set: a shared memfd range at
		 * argv[2] (hex) of 1 MiB, fd closed; private heap state. Waits
		 * for word 1 of the range (the "mailbox"), then writes into the
		 * range the checksum of its private state plus that word. */
		unsigned long at = strtoul(argv[2], NULL, 16);
		int fd = memfd_create("set", 0);
		if (fd < 0 || ftruncate(fd, 1 << 20))
			return 1;
		volatile unsigned long *w = mmap((void *)at, 1 << 20, PROT_READ | PROT_WRITE,
						 MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
		if (w != (void *)at)
			return 2;
		close(fd);
		unsigned long *heap = malloc(4096 * sizeof(*heap));
		unsigned long sum = 0;
		for (int i = 0; i < 4096; i++) {
			heap[i] = (unsigned long)i * 2654435761u;
			sum += heap[i];
		}
		w[0] = getpid();
		printf("ready %lu\n", sum);
		fflush(stdout);
		while (!w[1])
			spin++;
		unsigned long again = 0;
		for (int i = 0; i < 4096; i++)
			again += heap[i];
		w[2] = again + w[1];
		w[3] = getpid();
		return 9;
	} else if (!strcmp(mode, "layout")) {
		/* VMAs a restore moves pages into (see tests/moved_layout.rs):
		 * full: 16 MiB, every page written; half: 4 MiB, first half
		 * written; ro: 1 MiB written, then read-only. Prints their
		 * addresses, then on SIGUSR1 checks the contents, writes them,
		 * grows full with mremap, and reports. */
		const size_t F = 16 << 20, H = 4 << 20, R = 1 << 20;
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_usr1;
		sigaction(SIGUSR1, &sa, NULL);
		unsigned char *full = mmap(NULL, F, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		unsigned char *half = mmap(NULL, H, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		unsigned char *ro = mmap(NULL, R, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (full == MAP_FAILED || half == MAP_FAILED || ro == MAP_FAILED)
			return 1;
		for (size_t i = 0; i < F; i += 512)
			full[i] = (unsigned char)(i >> 9);
		for (size_t i = 0; i < H / 2; i += 512)
			half[i] = (unsigned char)(i >> 9) ^ 0x5a;
		for (size_t i = 0; i < R; i += 512)
			ro[i] = (unsigned char)(i >> 9) ^ 0xa5;
		mprotect(ro, R, PROT_READ);
		printf("full %lx half %lx ro %lx\n", (unsigned long)full, (unsigned long)half,
		       (unsigned long)ro);
		fflush(stdout);
		while (!got)
			spin++;
		int bad = 0;
		for (size_t i = 0; i < F; i += 512)
			bad += full[i] != (unsigned char)(i >> 9);
		for (size_t i = 0; i < H; i += 512)
			bad += half[i] != (i < H / 2 ? (unsigned char)((i >> 9) ^ 0x5a) : 0);
		for (size_t i = 0; i < R; i += 512)
			bad += ro[i] != (unsigned char)((i >> 9) ^ 0xa5);
		for (size_t i = 0; i < F; i += 4096)
			full[i]++;
		for (size_t i = 0; i < H; i += 4096)
			half[i]++;
		unsigned char *grown = mremap(full, F, 2 * F, MREMAP_MAYMOVE);
		int grew = grown != MAP_FAILED;
		if (grew) {
			grown[2 * F - 1] = 1;
			for (size_t i = 0; i < F; i += 4096)
				bad += grown[i] != (unsigned char)((i >> 9) + 1);
		}
		printf("bad %d grew %d\n", bad, grew);
		return bad ? 1 : 8;
	} else if (!strcmp(mode, "signals")) {
		/* handler, blocked mask, cwd, umask: all must survive a restore */
		struct sigaction sa;
		sigset_t set;
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_usr1;
		sigaction(SIGUSR1, &sa, NULL);
		signal(SIGPIPE, SIG_IGN);
		sigemptyset(&set);
		sigaddset(&set, SIGUSR2);
		sigprocmask(SIG_BLOCK, &set, NULL);
		static char altmem[65536];
		stack_t ss = { .ss_sp = altmem, .ss_size = sizeof(altmem), .ss_flags = 0 };
		if (sigaltstack(&ss, NULL))
			return 1;
		if (chdir(argv[2]))
			return 1;
		umask(027);
		printf("ready\n");
		fflush(stdout);
		while (!got)
			spin++;
		sigset_t cur;
		struct sigaction old;
		char cwd[4096];
		sigprocmask(SIG_BLOCK, NULL, &cur);
		sigaction(SIGPIPE, NULL, &old);
		mode_t m = umask(0);
		stack_t cur_ss;
		struct timespec t1, t2;
		sigaltstack(NULL, &cur_ss);
		/* vdso: glibc calls it through pointers found at startup */
		clock_gettime(CLOCK_MONOTONIC, &t1);
		clock_gettime(CLOCK_MONOTONIC, &t2);
		int clock_ok = t1.tv_sec > 0 && (t2.tv_sec > t1.tv_sec ||
			(t2.tv_sec == t1.tv_sec && t2.tv_nsec >= t1.tv_nsec));
		int vdso_same = 0;
		FILE *maps = fopen("/proc/self/maps", "r");
		char line[512];
		while (maps && fgets(line, sizeof(line), maps))
			if (strstr(line, "[vdso]"))
				vdso_same = strtoul(line, NULL, 16) == getauxval(AT_SYSINFO_EHDR);
		printf("altstack ok=%d; clock ok=%d; vdso at auxv address=%d\n",
		       cur_ss.ss_sp == altmem && cur_ss.ss_size == sizeof(altmem), clock_ok, vdso_same);
		printf("got usr1; usr2 blocked=%d; sigpipe ignored=%d; umask=%03o; cwd=%s\n",
		       sigismember(&cur, SIGUSR2), old.sa_handler == SIG_IGN, (unsigned)m,
		       getcwd(cwd, sizeof(cwd)) ? cwd : "?");
		return 7;
	} else if (!strcmp(mode, "itimers")) {
		/*
		 * Interval timers (setitimer, alarm): a periodic ITIMER_REAL of
		 * 20 ms must keep ticking after the moves, and the virtual and
		 * profiling timers keep their intervals and what is left.
		 */
		struct itimerval real = { { 0, 20000 }, { 0, 20000 } };
		struct itimerval virt = { { 0, 0 }, { 1000, 0 } };
		struct itimerval prof = { { 7, 0 }, { 2000, 0 } };
		struct itimerval r, v, p;
		struct sigaction sa;
		sigset_t alrm;
		/* "blocked": SIGALRM stays pending, so the kernel has not re-armed
		 * the periodic timer when the process is checkpointed */
		int blocked = argc > 2 && !strcmp(argv[2], "blocked");

		sigemptyset(&alrm);
		sigaddset(&alrm, SIGALRM);
		if (blocked)
			sigprocmask(SIG_BLOCK, &alrm, NULL);

		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_usr1;
		sigaction(SIGUSR1, &sa, NULL);
		sa.sa_handler = on_alrm;
		sa.sa_flags = SA_RESTART;
		sigaction(SIGALRM, &sa, NULL);
		if (setitimer(ITIMER_REAL, &real, NULL) || setitimer(ITIMER_VIRTUAL, &virt, NULL) ||
		    setitimer(ITIMER_PROF, &prof, NULL))
			return 1;
		printf("ready\n");
		fflush(stdout);
		while (!got)
			spin++;
		if (blocked)
			sigprocmask(SIG_UNBLOCK, &alrm, NULL);
		/* 5 ticks (100 ms) where the timer survived; none in 5 s where not */
		int before = ticks;
		double end = now_s() + 5;

		while (ticks - before < 5 && now_s() < end)
			spin++;
		getitimer(ITIMER_REAL, &r);
		getitimer(ITIMER_VIRTUAL, &v);
		getitimer(ITIMER_PROF, &p);
		printf("alarm ticking=%d; real interval us=%ld; virtual left in (0,1000]=%d; "
		       "prof interval s=%ld left in (0,2000]=%d\n",
		       ticks - before >= 5, (long)r.it_interval.tv_usec,
		       v.it_value.tv_sec + v.it_value.tv_usec > 0 && v.it_value.tv_sec < 1000,
		       (long)p.it_interval.tv_sec,
		       p.it_value.tv_sec + p.it_value.tv_usec > 0 && p.it_value.tv_sec < 2000);
		return 11;
	} else if (!strcmp(mode, "deadtimer")) {
		/*
		 * A periodic ITIMER_REAL the kernel stopped: it is re-armed only
		 * when its SIGALRM is dequeued, and that one was discarded.
		 * "ignored": SIGALRM ignored when it expired (never queued);
		 * "flushed": pending while blocked, discarded by setting SIG_IGN,
		 * then the handler back and unblocked. getitimer reads it as
		 * { 0, its interval } and it must stay stopped: "rearmed" is
		 * whether getitimer ever read it armed again, "ticks" the SIGALRMs
		 * a handler saw until 300 ms after SIGUSR1.
		 */
		struct itimerval real = { { 0, 100000 }, { 0, 10000 } };
		struct itimerval r;
		struct sigaction sa, ign;
		sigset_t alrm, pend;
		int flushed = argc > 2 && !strcmp(argv[2], "flushed");
		int rearmed = 0;

		sigemptyset(&alrm);
		sigaddset(&alrm, SIGALRM);
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_usr1;
		sigaction(SIGUSR1, &sa, NULL);
		sa.sa_handler = on_alrm;
		memset(&ign, 0, sizeof(ign));
		ign.sa_handler = SIG_IGN;
		if (flushed) {
			sigprocmask(SIG_BLOCK, &alrm, NULL);
			sigaction(SIGALRM, &sa, NULL);
		} else {
			sigaction(SIGALRM, &ign, NULL);
		}
		if (setitimer(ITIMER_REAL, &real, NULL))
			return 1;
		do
			getitimer(ITIMER_REAL, &r);
		while (r.it_value.tv_sec || r.it_value.tv_usec);
		/* 0 also reads with less than 1 us left: let it expire */
		usleep(1000);
		if (flushed) {
			do
				sigpending(&pend);
			while (!sigismember(&pend, SIGALRM));
			sigaction(SIGALRM, &ign, NULL);
			sigaction(SIGALRM, &sa, NULL);
			sigprocmask(SIG_UNBLOCK, &alrm, NULL);
		}
		printf("ready\n");
		fflush(stdout);
		double end = 0;

		while (!end || now_s() < end) {
			if (got && !end) {
				sigaction(SIGALRM, &sa, NULL);
				end = now_s() + 0.3;
			}
			getitimer(ITIMER_REAL, &r);
			if (r.it_value.tv_sec || r.it_value.tv_usec)
				rearmed = 1;
		}
		printf("rearmed=%d; ticks=%d; interval us=%ld\n", rearmed, (int)ticks,
		       (long)r.it_interval.tv_usec);
		return 12;
	} else if (!strcmp(mode, "alarmrace")) {
		/*
		 * A one-shot ITIMER_REAL of 40 ms armed just before "ready": the
		 * test checkpoints at once, so it expires while the 128 MiB below
		 * are being dumped, after the timers were first read and before
		 * the queues were. Its SIGALRM must arrive once ("alarms").
		 */
		size_t len = 128 << 20;
		char *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		struct itimerval once = { { 0, 0 }, { 0, 40000 } };
		struct sigaction sa;

		if (mem == MAP_FAILED)
			return 1;
		for (size_t i = 0; i < len; i += 4096)
			mem[i] = (char)i | 1;
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_usr1;
		sigaction(SIGUSR1, &sa, NULL);
		sa.sa_handler = on_alrm;
		sigaction(SIGALRM, &sa, NULL);
		if (setitimer(ITIMER_REAL, &once, NULL))
			return 1;
		printf("ready\n");
		fflush(stdout);
		while (!got)
			spin++;
		double end = now_s() + 0.2;

		while (now_s() < end)
			spin++;
		printf("alarms=%d\n", (int)ticks);
		return 13;
	} else if (!strcmp(mode, "ignoredalarm")) {
		/*
		 * A periodic ITIMER_REAL (40 ms, then every second) with SIGALRM
		 * ignored, armed just before "ready": the test checkpoints at once
		 * and lets it continue, so it expires while the 128 MiB below are
		 * dumped, its SIGALRM queued (it is traced). An untraced run
		 * discards that SIGALRM and the timer stays stopped: "rearmed" is
		 * whether getitimer read it armed in the 300 ms after SIGUSR1
		 * (sent once the checkpoint let it go).
		 */
		size_t len = 128 << 20;
		char *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		struct itimerval t = { { 1, 0 }, { 0, 40000 } };
		struct itimerval r;
		struct sigaction sa;
		int rearmed = 0;

		if (mem == MAP_FAILED)
			return 1;
		for (size_t i = 0; i < len; i += 4096)
			mem[i] = (char)i | 1;
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_usr1;
		sigaction(SIGUSR1, &sa, NULL);
		sa.sa_handler = SIG_IGN;
		sigaction(SIGALRM, &sa, NULL);
		if (setitimer(ITIMER_REAL, &t, NULL))
			return 1;
		printf("ready\n");
		fflush(stdout);
		while (!got)
			spin++;
		double end = now_s() + 0.3;

		while (now_s() < end) {
			getitimer(ITIMER_REAL, &r);
			if (r.it_value.tv_sec || r.it_value.tv_usec)
				rearmed = 1;
		}
		printf("rearmed=%d; interval us=%ld\n", rearmed,
		       (long)(r.it_interval.tv_sec * 1000000 + r.it_interval.tv_usec));
		return 14;
	} else if (!strcmp(mode, "posixtimer")) {
		timer_t id;
		struct sigevent ev;

		memset(&ev, 0, sizeof(ev));
		ev.sigev_notify = SIGEV_NONE;
		if (timer_create(CLOCK_MONOTONIC, &ev, &id))
			return 1;
	} else if (!strcmp(mode, "limits")) {
		/*
		 * Resource limits and the rseq registration glibc made at
		 * start-up: a second registration of the same area is EBUSY
		 * while the first stands, and succeeds where none does.
		 */
		struct rlimit nofile = { 100, 200 }, core = { 0, 4096 }, got_nofile, got_core;
		struct sigaction sa;
		extern const ptrdiff_t __rseq_offset;
		extern const unsigned int __rseq_size;
		void *area = (char *)__builtin_thread_pointer() + __rseq_offset;

		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_usr1;
		sigaction(SIGUSR1, &sa, NULL);
		if (setrlimit(RLIMIT_NOFILE, &nofile) || setrlimit(RLIMIT_CORE, &core))
			return 1;
		printf("ready\n");
		fflush(stdout);
		while (!got)
			spin++;
		getrlimit(RLIMIT_NOFILE, &got_nofile);
		getrlimit(RLIMIT_CORE, &got_core);
		/* glibc registers at least the original 32-byte struct rseq. */
		long r = syscall(SYS_rseq, area, __rseq_size < 32 ? 32 : __rseq_size, 0, 0x53053053);
		printf("nofile %lu/%lu; core %lu/%lu; rseq registered=%d\n",
		       (unsigned long)got_nofile.rlim_cur, (unsigned long)got_nofile.rlim_max,
		       (unsigned long)got_core.rlim_cur, (unsigned long)got_core.rlim_max,
		       __rseq_size > 0 && r == -1 && errno == EBUSY);
		return 10;
	} else if (!strcmp(mode, "threadstate")) {
		/*
		 * The thread's kernel registrations and the C library's copy of
		 * its id: the robust list and the clear_child_tid address must
		 * be the ones glibc registered at start-up, and a mutex locked
		 * now must record the thread's current id as its owner.
		 */
		struct sigaction sa;
		void *head0, *head1;
		size_t len0, len1;
		int *tid0 = NULL, *tid1 = NULL;
		int has0, has1;

		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_usr1;
		sigaction(SIGUSR1, &sa, NULL);
		if (syscall(SYS_get_robust_list, 0, &head0, &len0))
			return 1;
		has0 = prctl(PR_GET_TID_ADDRESS, &tid0) == 0;
		printf("ready\n");
		fflush(stdout);
		while (!got)
			spin++;
		if (syscall(SYS_get_robust_list, 0, &head1, &len1))
			return 1;
		has1 = prctl(PR_GET_TID_ADDRESS, &tid1) == 0;
		pthread_mutexattr_t a;
		pthread_mutex_t m;
		pthread_mutexattr_init(&a);
		pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
		pthread_mutex_init(&m, &a);
		pthread_mutex_lock(&m);
		int owner_ok = m.__data.__owner == (int)syscall(SYS_gettid);
		int unlock = pthread_mutex_unlock(&m);
		printf("robust list same=%d; tid address same=%d; mutex owner is gettid=%d; unlock=%d\n",
		       head1 == head0 && len1 == len0, has1 == has0 && tid1 == tid0,
		       owner_ok, unlock);
		return 9;
	} else if (!strcmp(mode, "sharedanon")) {
		/*
		 * Lone shared anonymous memory, 3 pages: page 0 written then
		 * dropped from the page tables (MADV_DONTNEED keeps a shared
		 * page's contents), page 1 never touched, page 2 written then
		 * made read-only (one object, two VMAs). After SIGUSR1: the
		 * contents, then a forked child's write into page 1 must be
		 * seen (still shared), kept across MADV_DONTNEED, and seen
		 * through an mremap of page 1 grown over page 2.
		 */
		long pg = sysconf(_SC_PAGESIZE);
		unsigned char *p = mmap(NULL, 3 * pg, PROT_READ | PROT_WRITE,
					MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		struct sigaction sa;
		char line[512];
		int ok = 1, vmas = 0, same = 1;
		unsigned long ino0 = 0;

		if (p == MAP_FAILED)
			return 1;
		for (long i = 0; i < pg; i++) {
			p[i] = (unsigned char)(i * 7 + 1);
			p[2 * pg + i] = (unsigned char)(i * 13 + 5);
		}
		if (madvise(p, pg, MADV_DONTNEED) || mprotect(p + 2 * pg, pg, PROT_READ))
			return 2;
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_usr1;
		sigaction(SIGUSR1, &sa, NULL);
		printf("ready\n");
		fflush(stdout);
		while (!got)
			spin++;
		for (long i = 0; i < pg; i++)
			ok &= p[i] == (unsigned char)(i * 7 + 1) && p[pg + i] == 0 &&
			      p[2 * pg + i] == (unsigned char)(i * 13 + 5);
		FILE *f = fopen("/proc/self/maps", "r");
		while (f && fgets(line, sizeof(line), f)) {
			unsigned long s, e, ino;
			char perms[8];
			if (sscanf(line, "%lx-%lx %7s %*s %*s %lu", &s, &e, perms, &ino) == 4 &&
			    s >= (unsigned long)p && e <= (unsigned long)(p + 3 * pg) &&
			    perms[3] == 's' && strstr(line, "/dev/zero (deleted)")) {
				if (vmas++ == 0)
					ino0 = ino;
				same &= ino == ino0;
			}
		}
		if (f)
			fclose(f);
		pid_t c = fork();
		if (c == 0) {
			memcpy(p + pg, "child was here", 15);
			_exit(0);
		}
		int st;
		waitpid(c, &st, 0);
		int seen = !memcmp(p + pg, "child was here", 15);
		madvise(p, 3 * pg, MADV_DONTNEED);
		int kept = !memcmp(p + pg, "child was here", 15) && p[1] == 8;
		/* page 1 moved and grown over page 2 of the object: its offset
		 * and the object's size (3 pages) are the original's */
		unsigned char *q = mremap(p + pg, pg, 2 * pg, MREMAP_MAYMOVE);
		int moved = q != MAP_FAILED && !memcmp(q, "child was here", 15) &&
			    q[pg + 1] == 13 + 5;
		printf("contents ok=%d; vmas=%d same object=%d; child write seen=%d; "
		       "kept after dontneed=%d; mremap=%d\n", ok, vmas, same, seen, kept, moved);
		return 12;
	} else if (!strcmp(mode, "sharedanonring")) {
		/*
		 * A "magic ring buffer": 2 pages of shared anonymous memory
		 * mapped twice, back to back (mremap with old_size 0 makes a
		 * second mapping of the same pages). After SIGUSR1: both
		 * mappings hold the contents, a write through one is seen
		 * through the other, a forked child's write is seen, and
		 * both are MAP_NORESERVE, as made.
		 */
		long pg = sysconf(_SC_PAGESIZE);
		unsigned char *p = mmap(NULL, 4 * pg, PROT_NONE,
					MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		struct sigaction sa;

		if (p == MAP_FAILED ||
		    mmap(p, 2 * pg, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED ||
		    mremap(p, 0, 2 * pg, MREMAP_MAYMOVE | MREMAP_FIXED, p + 2 * pg) == MAP_FAILED)
			return 1;
		for (long i = 0; i < 2 * pg; i++)
			p[i] = (unsigned char)(i * 11 + 3);
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_usr1;
		sigaction(SIGUSR1, &sa, NULL);
		printf("ready\n");
		fflush(stdout);
		while (!got)
			spin++;
		int ok = 1;
		for (long i = 0; i < 2 * pg; i++)
			ok &= p[i] == (unsigned char)(i * 11 + 3) &&
			      p[2 * pg + i] == (unsigned char)(i * 11 + 3);
		/* across the end of the first mapping: its start and the
		 * second's end show the two halves */
		memcpy(p + 2 * pg - 4, "wrapped!", 8);
		int wrap = !memcmp(p, "ped!", 4) && !memcmp(p + 4 * pg - 4, "wrap", 4);
		pid_t c = fork();
		if (c == 0) {
			memcpy(p + 10, "child", 5);
			_exit(0);
		}
		int st;
		waitpid(c, &st, 0);
		int seen = !memcmp(p + 2 * pg + 10, "child", 5);
		/* both mappings MAP_NORESERVE ("nr" in smaps' VmFlags) */
		char line[512];
		int nr = 0, in = 0;
		FILE *f = fopen("/proc/self/smaps", "r");
		while (f && fgets(line, sizeof(line), f)) {
			unsigned long s, e;
			if (sscanf(line, "%lx-%lx ", &s, &e) == 2 && strchr(line, ' ') > strchr(line, '-'))
				in = s == (unsigned long)p || s == (unsigned long)(p + 2 * pg);
			else if (in && !strncmp(line, "VmFlags:", 8) && strstr(line, " nr"))
				nr++;
		}
		if (f)
			fclose(f);
		printf("ring contents ok=%d; wrap seen=%d; child write seen=%d; noreserve=%d\n", ok,
		       wrap, seen, nr);
		return 13;
	} else if (!strcmp(mode, "sharedanonchild")) {
		/* Shared anonymous memory also mapped by a child (pid printed). */
		char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
			       -1, 0);
		if (p == MAP_FAILED)
			return 1;
		pid_t c = fork();
		if (c == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			for (;;)
				pause();
		}
		printf("child %d\n", c);
		fflush(stdout);
	} else if (!strcmp(mode, "sysvshm")) {
		/* A SysV shared memory segment, removed (freed at detach). */
		int id = shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600);
		void *p = id < 0 ? (void *)-1 : shmat(id, NULL, 0);
		if (p == (void *)-1)
			return 1;
		shmctl(id, IPC_RMID, NULL);
	} else if (!strcmp(mode, "rwlock")) {
		/*
		 * A lock held across the moves: glibc's rwlock records its
		 * writer's thread id, and pthread_rwlock_unlock() takes the
		 * writer's path only if that id is the caller's (what
		 * setlocale() and gettext() do with their lock in xz).
		 */
		static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
		struct sigaction sa;

		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_usr1;
		sigaction(SIGUSR1, &sa, NULL);
		pthread_rwlock_wrlock(&rw);
		printf("locked\n");
		fflush(stdout);
		while (!got)
			spin++;
		pthread_rwlock_unlock(&rw);
		int r = pthread_rwlock_tryrdlock(&rw);
		if (r == 0)
			pthread_rwlock_unlock(&rw);
		printf("tryrdlock after unlock=%d\n", r);
		return 11;
	}
	for (;;)
		spin++;
}
