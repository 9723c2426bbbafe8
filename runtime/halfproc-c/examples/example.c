/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * halfproc from C: members increment a counter in the shared range under a
 * halfproc mutex, then the creator reads a member's private memory.
 * Build: cc example.c $(pkg-config --cflags --libs halfproc)
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "halfproc.h"

struct shared {
	halfproc_mutex_t lock;
	halfproc_cond_t cond;
	long counter;
	int done;
};

static int worker(void *arg)
{
	struct shared *s = arg;
	for (int i = 0; i < 1000; i++) {
		if (halfproc_mutex_lock(&s->lock) != 0)
			return 1;
		s->counter++;
		halfproc_mutex_unlock(&s->lock);
	}
	halfproc_mutex_lock(&s->lock);
	s->done++;
	halfproc_cond_broadcast(&s->cond);
	halfproc_mutex_unlock(&s->lock);
	return 0;
}

static const char secret[] = "creator-private";

int main(void)
{
	int err = halfproc_init(NULL);
	if (err) {
		fprintf(stderr, "halfproc_init: %s\n", strerror(err));
		return 1;
	}
	struct shared *s = halfproc_calloc(1, sizeof(*s));
	if (!s)
		return 1;
	halfproc_t m[4];
	for (int i = 0; i < 4; i++)
		if ((err = halfproc_create(&m[i], worker, s)) != 0) {
			fprintf(stderr, "halfproc_create: %s\n", strerror(err));
			return 1;
		}
	halfproc_mutex_lock(&s->lock);
	while (s->done < 4)
		halfproc_cond_wait(&s->cond, &s->lock);
	halfproc_mutex_unlock(&s->lock);
	for (int i = 0; i < 4; i++) {
		int status = -1;
		if (halfproc_join(m[i], &status) != 0 || status != 0)
			return 1;
	}
	if (halfproc_join(m[0], NULL) != ESRCH)
		return 1;
	char buf[sizeof(secret)];
	if (halfproc_dmread(getpid(), secret, sizeof(secret), buf) != (ssize_t)sizeof(secret) ||
	    memcmp(buf, secret, sizeof(secret)) != 0)
		return 1;
	if (halfproc_calloc((size_t)-1, 2) != NULL || errno != ENOMEM)
		return 1;
	printf("backend=%s counter=%ld\n",
	       halfproc_backend_kind() == HALFPROC_BACKEND_KERNEL ? "kernel" : "portable", s->counter);
	halfproc_free(s);
	return 0;
}
