/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * The program a C user writes from halfproc.h alone: shared state allocated
 * after halfproc_init() and kept in a global, a mutex in it, four members
 * that each push 1,000 nodes onto a shared list.  A member starts as a copy
 * of its creator at halfproc_create() time, so it sees the global.
 * Expected output: "counter 4000 nodes 4000".
 */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <halfproc.h>

struct node {
	struct node *next;
	long value;
};

struct state {
	halfproc_mutex_t lock;
	struct node *head;
	long counter;
};

static struct state *S;		/* set after halfproc_init() */

static int worker(void *arg)
{
	long id = (long)arg;

	for (int i = 0; i < 1000; i++) {
		struct node *n = halfproc_malloc(sizeof(*n));

		if (!n)
			return 1;
		n->value = id * 1000 + i;
		halfproc_mutex_lock(&S->lock);
		n->next = S->head;
		S->head = n;
		S->counter++;
		halfproc_mutex_unlock(&S->lock);
	}
	return 0;
}

int main(void)
{
	halfproc_t h[4];
	long nodes = 0, sum = 0;
	int err, status;

	if ((err = halfproc_init(NULL)) != 0) {
		fprintf(stderr, "halfproc_init: %s\n", strerror(err));
		return 1;
	}
	S = halfproc_calloc(1, sizeof(*S));
	if (!S || halfproc_mutex_init(&S->lock))
		return 1;
	for (long i = 0; i < 4; i++)
		if ((err = halfproc_create(&h[i], worker, (void *)i)) != 0) {
			fprintf(stderr, "halfproc_create: %s\n", strerror(err));
			return 1;
		}
	for (int i = 0; i < 4; i++) {
		if ((err = halfproc_join(h[i], &status)) != 0) {
			fprintf(stderr, "halfproc_join: %s\n", strerror(err));
			return 1;
		}
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			fprintf(stderr, "member %d: %s %d\n", i,
				WIFSIGNALED(status) ? "killed by signal" : "exit code",
				WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
			return 1;
		}
	}
	for (struct node *n = S->head; n; n = n->next) {
		nodes++;
		sum += n->value;
	}
	printf("counter %ld nodes %ld\n", S->counter, nodes);
	/* Every value id*1000+i, id 0..3, i 0..999, exactly once. */
	return S->counter == 4000 && nodes == 4000 && sum == 4000L * 3999 / 2 ? 0 : 1;
}
