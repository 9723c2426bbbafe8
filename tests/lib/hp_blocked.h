/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Readers killed while blocked on the set mm's lock (hp_mmstate's maps
 * reader, hp_procfs's PROCMAP_QUERY, pagemap and smaps_rollup readers).
 *
 * A member (the looper) runs one long mprotect() of BIG populated bytes of
 * the range per round, which holds the set mm's lock for writing; a reader
 * forked by the test blocks behind it (state D) and is killed; its death
 * must be seen while that same mprotect() still runs.  The verdict is an
 * order of events, not a duration, so a loaded host cannot change it; a
 * round where the reader never blocked before the mprotect() ended says
 * nothing and is not counted.
 *
 * Include after kselftest_harness.h.
 */
#ifndef HP_BLOCKED_H
#define HP_BLOCKED_H

#include <sys/prctl.h>
#include <time.h>

#define BLOCKED_BIG	(512UL << 20)
#define BLOCKED_ROUNDS	3	/* kills that landed on a blocked reader */
#define BLOCKED_TRIES	12	/* rounds at most, per reader */

struct lock_ctl {
	volatile int go;	/* round the looper is asked to run; -1: stop */
	volatile int busy;	/* round whose mprotect() has started */
	volatile int ended;	/* round whose mprotect() has returned */
};

static inline double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The state letter of /proc/<pid>/stat ('D': blocked, killable or not). */
static inline char task_state(pid_t pid)
{
	char path[64], buf[512], *e;
	int fd, n;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return '?';
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return '?';
	buf[n] = 0;
	e = strrchr(buf, ')');
	return e && e[1] == ' ' ? e[2] : '?';
}

/* What the blocked-reader rounds share. */
struct blocked {
	struct lock_ctl *ctl;
	char *p;	/* BLOCKED_BIG bytes in the range, populated */
	double hold_ms;	/* how long one mprotect() of them takes */
	pid_t looper;
};

/*
 * Maps and populates the region (4 KiB pages: a PTE each for mprotect() to
 * change), measures one mprotect() of it and starts the looper.  Returns 0,
 * or 1 when an mprotect() is too short to tell (the caller skips), -1 on
 * error.
 */
static inline int blocked_start(struct blocked *b)
{
	double t0;
	int i;

	b->ctl = hp_anon(PAGE);
	b->p = hp_anon(BLOCKED_BIG);
	if (b->ctl == MAP_FAILED || b->p == MAP_FAILED ||
	    madvise(b->p, BLOCKED_BIG, MADV_NOHUGEPAGE))
		return -1;
	memset(b->p, 1, BLOCKED_BIG);
	b->hold_ms = 0;
	for (i = 0; i < 3; i++) {
		t0 = now_ms();
		if (mprotect(b->p, BLOCKED_BIG, i & 1 ? PROT_READ | PROT_WRITE : PROT_READ))
			return -1;
		b->hold_ms += (now_ms() - t0) / 3;
	}
	if (mprotect(b->p, BLOCKED_BIG, PROT_READ | PROT_WRITE))
		return -1;
	if (b->hold_ms < 40)
		return 1;
	b->looper = hp_spawn();
	if (b->looper < 0)
		return -1;
	if (b->looper == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (int r = 1;; r++) {
			while (b->ctl->go >= 0 && b->ctl->go < r)
				usleep(1000);
			if (b->ctl->go < 0)
				break;
			b->ctl->busy = r;
			mprotect(b->p, BLOCKED_BIG, r & 1 ? PROT_READ : PROT_READ | PROT_WRITE);
			b->ctl->ended = r;
		}
		_exit(0);
	}
	return 0;
}

/*
 * Rounds with readers made by @start_reader(@arg) (a forked process that
 * reads for ever) until BLOCKED_ROUNDS of them were killed while blocked,
 * at most BLOCKED_TRIES; *@counted gets those, *@late those whose death
 * was seen only after their round's mprotect() ended; returns the rounds.
 */
static inline int blocked_rounds(struct blocked *b, pid_t (*start_reader)(void *), void *arg,
				 int *counted, int *late)
{
	struct lock_ctl *ctl = b->ctl;
	int tries, r;
	pid_t reader;
	char st;

	*counted = *late = 0;
	for (tries = 0; tries < BLOCKED_TRIES && *counted < BLOCKED_ROUNDS; tries++) {
		r = ctl->ended + 1;
		reader = start_reader(arg);
		if (reader < 0)
			return -1;
		ctl->go = r;
		while (ctl->busy < r)
			usleep(500);
		/* Until the reader is blocked, or the mprotect() is over. */
		while ((st = task_state(reader)) != 'D' && ctl->ended < r)
			usleep(500);
		kill(reader, SIGKILL);
		waitpid(reader, NULL, 0);
		if (st == 'D') {
			(*counted)++;
			*late += ctl->ended >= r;
		}
		while (ctl->ended < r)
			usleep(1000);
	}
	return tries;
}

/* Stops the looper; its exit status. */
static inline int blocked_stop(struct blocked *b)
{
	b->ctl->go = -1;
	return wait_status(b->looper);
}

#endif /* HP_BLOCKED_H */
