/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * Members created from a thread while other threads hammer malloc and
 * stdio: each member must start with consistent libc state (no lock held by
 * a thread that does not exist in it) and see the creator's memory as of
 * the call.  A deadlock is caught by alarm().
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <halfproc.h>

#define MEMBERS 16

static atomic_int stop;
static long *results;			/* shared range */
static char creator_note[64];		/* private, written before each create */

static void *churn(void *arg)
{
	FILE *f = fopen("/dev/null", "w");
	unsigned long n = 0;

	while (!atomic_load(&stop)) {
		char *p = malloc(16 + n % 4096);

		if (!p)
			abort();
		snprintf(p, 16, "%lu", n);
		fprintf(f, "%s %p\n", p, arg);
		free(p);
		n++;
	}
	fclose(f);
	return NULL;
}

static int member(void *arg)
{
	long i = (long)arg;
	char expect[64], *buf = malloc(1 << 20);

	if (!buf)
		return 2;
	snprintf(expect, sizeof(expect), "note %ld", i);
	if (strcmp(creator_note, expect) != 0)
		return 3;	/* not a copy of the creator at create time */
	memset(buf, (int)i, 1 << 20);
	printf("member %ld: malloc and stdio work\n", i);
	fflush(stdout);
	results[i] = i * 10 + buf[12345] - (char)i;
	free(buf);
	return 0;
}

static void *creator(void *arg)
{
	halfproc_t h[MEMBERS];
	int *failed = arg, status;

	for (long i = 0; i < MEMBERS; i++) {
		snprintf(creator_note, sizeof(creator_note), "note %ld", i);
		if (halfproc_create(&h[i], member, (void *)i) != 0) {
			*failed = 1;
			return NULL;
		}
	}
	for (int i = 0; i < MEMBERS; i++)
		if (halfproc_join(h[i], &status) != 0 || status != 0) {
			fprintf(stderr, "member %d: status %#x\n", i, status);
			*failed = 1;
		}
	return NULL;
}

int main(void)
{
	pthread_t churners[3], c;
	int failed = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	alarm(120);
	if (halfproc_init(NULL) != 0)
		return 1;
	results = halfproc_calloc(MEMBERS, sizeof(long));
	if (!results)
		return 1;
	for (int i = 0; i < 3; i++)
		pthread_create(&churners[i], NULL, churn, (void *)(long)i);
	pthread_create(&c, NULL, creator, &failed);
	pthread_join(c, NULL);
	atomic_store(&stop, 1);
	for (int i = 0; i < 3; i++)
		pthread_join(churners[i], NULL);
	for (long i = 0; i < MEMBERS; i++)
		if (results[i] != i * 10)
			failed = 1;
	printf("threads: %d members from a thread beside 3 malloc/stdio threads: %s\n",
	       MEMBERS, failed ? "FAILED" : "ok");
	return failed;
}
