/* Test program for pending signals carried by migration.
 *
 * Blocks SIGUSR1, SIGUSR2, SIGRTMIN+1, SIGRTMIN+3 and SIGRTMIN+5 and has
 * them queued, from itself and from two short-lived children, to its
 * thread's own queue (tgkill, rt_tgsigqueueinfo) and to the process-wide
 * one (kill, sigqueue), several instances of the real-time ones with
 * sigqueue values; SIGRTMIN+5 is sent with kill() while RLIMIT_SIGPENDING
 * is 0, so it is pending with no siginfo. Prints "queued" (the children
 * are reaped by then), computes for a while, then waits: with "wait" for
 * EOF on stdin, with "file PATH" until PATH exists. Then it unblocks them
 * and prints every delivery in order: signal, si_code, value, sender.
 * A SIGCONT handler counts SIGCONTs (none are sent to it).
 *
 * Usage: sigq ITERS wait | sigq ITERS file PATH */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXREC 64

static struct {
	int signo, code, value;
	pid_t pid;
	uid_t uid;
} rec[MAXREC];
static volatile sig_atomic_t nrec, conts;
static pid_t self, kid[2];

static void on_sig(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	if (nrec < MAXREC) {
		rec[nrec].signo = sig;
		rec[nrec].code = si->si_code;
		rec[nrec].value = si->si_value.sival_int;
		rec[nrec].pid = si->si_pid;
		rec[nrec].uid = si->si_uid;
		nrec++;
	}
}

static void on_cont(int sig)
{
	(void)sig;
	conts++;
}

static void die(const char *what)
{
	perror(what);
	exit(90);
}

/* To the thread's own queue of `to` (single-threaded: tid == pid). */
static void queue_thread(pid_t to, int sig, int value)
{
	siginfo_t si;

	memset(&si, 0, sizeof(si));
	si.si_signo = sig;
	si.si_code = SI_QUEUE;
	si.si_pid = getpid();
	si.si_uid = getuid();
	si.si_value.sival_int = value;
	if (syscall(SYS_rt_tgsigqueueinfo, to, to, sig, &si))
		die("rt_tgsigqueueinfo");
}

/* To the process-wide queue. */
static void queue_process(pid_t to, int sig, int value)
{
	union sigval v = { .sival_int = value };

	if (sigqueue(to, sig, v))
		die("sigqueue");
}

static void child(int which)
{
	pid_t p = fork();
	int st;

	if (p < 0)
		die("fork");
	if (p == 0) {
		pid_t pp = getppid();

		if (which == 0) {
			queue_process(pp, SIGRTMIN + 3, 101);
			queue_thread(pp, SIGRTMIN + 3, 102);
			queue_process(pp, SIGRTMIN + 1, 103);
			if (syscall(SYS_tgkill, pp, pp, SIGUSR1))
				die("tgkill");
			if (kill(pp, SIGUSR2))
				die("kill");
		} else {
			queue_process(pp, SIGRTMIN + 1, 201);
			queue_thread(pp, SIGRTMIN + 3, 202);
			queue_process(pp, SIGRTMIN + 3, 203);
		}
		_exit(0);
	}
	kid[which] = p;
	if (waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st))
		die("child");
}

static const char *name(int sig)
{
	static char buf[16];

	if (sig == SIGUSR1)
		return "USR1";
	if (sig == SIGUSR2)
		return "USR2";
	snprintf(buf, sizeof(buf), "RTMIN+%d", sig - SIGRTMIN);
	return buf;
}

static const char *code(int c)
{
	static char buf[16];

	switch (c) {
	case SI_USER:
		return "SI_USER";
	case SI_TKILL:
		return "SI_TKILL";
	case SI_QUEUE:
		return "SI_QUEUE";
	}
	snprintf(buf, sizeof(buf), "%d", c);
	return buf;
}

static const char *sender(pid_t p)
{
	return p == self ? "self" : p == kid[0] ? "child1" : p == kid[1] ? "child2"
		: p == 0 ? "none" : "other";
}

static int blocked(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGUSR1);
	sigaddset(set, SIGUSR2);
	sigaddset(set, SIGRTMIN + 1);
	sigaddset(set, SIGRTMIN + 3);
	sigaddset(set, SIGRTMIN + 5);
	return 0;
}

int main(int argc, char **argv)
{
	long iters = argc > 1 ? atol(argv[1]) : 200;
	int wait_stdin = argc > 2 && !strcmp(argv[2], "wait");
	const char *path = argc > 3 && !strcmp(argv[2], "file") ? argv[3] : NULL;
	struct sigaction sa;
	struct rlimit old, none;
	sigset_t set, pend;
	uint64_t h = 1469598103934665603ULL;
	static unsigned char buf[1 << 16];

	if (!wait_stdin && !path) {
		fprintf(stderr, "usage: sigq ITERS wait | sigq ITERS file PATH\n");
		return 2;
	}
	self = getpid();
	blocked(&set);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sig;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sa.sa_mask = set; /* one handler at a time: runs in dequeue order */
	for (int s = 0; s < 64; s++)
		if (sigismember(&set, s) == 1 && sigaction(s, &sa, NULL))
			die("sigaction");
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_cont;
	sa.sa_flags = SA_RESTART;
	if (sigaction(SIGCONT, &sa, NULL))
		die("sigaction SIGCONT");
	if (sigprocmask(SIG_BLOCK, &set, NULL))
		die("sigprocmask");

	queue_process(self, SIGRTMIN + 3, 1);
	queue_thread(self, SIGRTMIN + 3, 2);
	queue_process(self, SIGRTMIN + 1, 3);
	if (kill(self, SIGUSR1))
		die("kill");
	child(0);
	queue_process(self, SIGRTMIN + 3, 4);
	queue_thread(self, SIGRTMIN + 3, 5);
	queue_thread(self, SIGRTMIN + 1, 6);
	if (raise(SIGUSR2))
		die("raise");
	child(1);
	queue_process(self, SIGRTMIN + 1, 7);
	queue_process(self, SIGRTMIN + 3, 8);
	/* A real-time signal sent with kill() over RLIMIT_SIGPENDING is
	 * pending with no siginfo: delivered as SI_USER from pid 0. */
	if (getrlimit(RLIMIT_SIGPENDING, &old))
		die("RLIMIT_SIGPENDING");
	none = old;
	none.rlim_cur = 0;
	if (setrlimit(RLIMIT_SIGPENDING, &none))
		die("RLIMIT_SIGPENDING");
	if (kill(self, SIGRTMIN + 5))
		die("kill RTMIN+5");
	if (setrlimit(RLIMIT_SIGPENDING, &old))
		die("RLIMIT_SIGPENDING back");
	printf("queued\n");
	fflush(stdout);

	for (long i = 0; i < iters; i++) {
		for (size_t k = 0; k < sizeof(buf); k++) {
			buf[k] ^= (unsigned char)(h >> (k % 56));
			h = (h ^ buf[(k * 7) % sizeof(buf)]) * 1099511628211ULL;
		}
		if (i % 50 == 0)
			printf("work %ld h=%016llx\n", i, (unsigned long long)h);
	}
	if (wait_stdin) {
		while (getchar() != EOF)
			;
	} else {
		struct timespec ms = { 0, 1000000 };

		while (access(path, F_OK)) {
			for (volatile int k = 0; k < 100000; k++)
				;
			nanosleep(&ms, NULL);
		}
	}

	if (sigpending(&pend))
		die("sigpending");
	printf("pending:");
	for (int s = 1; s < 65; s++)
		if (sigismember(&set, s) == 1)
			printf(" %s=%d", name(s), sigismember(&pend, s));
	printf("\n");
	if (sigprocmask(SIG_UNBLOCK, &set, NULL))
		die("sigprocmask unblock");
	for (int i = 0; i < nrec; i++) {
		printf("%2d %-8s %-8s", i, name(rec[i].signo), code(rec[i].code));
		if (rec[i].code == SI_QUEUE)
			printf(" value=%d", rec[i].value);
		printf(" from=%s uid=%s\n", sender(rec[i].pid),
		       rec[i].uid == getuid() ? "mine" : rec[i].uid == 0 ? "0" : "other");
	}
	printf("deliveries=%d sigcont=%d done h=%016llx\n", (int)nrec, (int)conts,
	       (unsigned long long)h);
	return 10 + nrec;
}
