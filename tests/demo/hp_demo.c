// SPDX-License-Identifier: GPL-2.0
/*
 * The half-process demo: what a set of half-processes is, shown step by step
 * with raw system calls on the patched kernel.  Every step checks what it
 * shows, so the demo fails (exit 1) if the kernel does not do what it says.
 *
 *   1. members are processes: globals stay private;
 *   2. semantics II: a list built in the shared range by one member is
 *      walked, pointers and all, by members created before it existed;
 *   3. semantics I: an munmap/mprotect by one member holds for all members
 *      when the call returns;
 *   4. dmread() copies a member's *private* memory; a process outside the
 *      set gets EPERM, root or not.
 */
#include "../lib/halfproc_test.h"

#define NODES		10000
#define WALKERS		2
#define LIST_BYTES	(NODES * sizeof(struct node))

struct node {
	struct node *next;
	long value;
};

/* Set up by the creator before the walkers exist; the list comes later. */
struct board {
	struct node *volatile head;	/* published by the builder */
	volatile long sums[WALKERS];
	volatile int go_unmap;
};

static int failures;
static char secret[64] = "the creator's own secret";	/* private: one copy each */
static int private_counter = 1;

#define STEP(n, fmt, ...) printf("\n[%d/4] " fmt "\n", n, ##__VA_ARGS__)
#define SAY(fmt, ...) printf("      " fmt "\n", ##__VA_ARGS__)
#define CHECK(cond, fmt, ...) do {					\
	if (cond) {							\
		printf("      ok: " fmt "\n", ##__VA_ARGS__);		\
	} else {							\
		printf("      FAILED: " fmt "\n", ##__VA_ARGS__);	\
		failures++;						\
	}								\
} while (0)

static long walk(const struct node *n)
{
	long sum = 0;

	for (; n; n = n->next)
		sum += n->value;
	return sum;
}

static void show_maps_line(pid_t pid)
{
	char path[64], line[256];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	f = fopen(path, "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		if (in_range((void *)(uintptr_t)strtoull(line, NULL, 16), 1))
			printf("      /proc/%d/maps: %s", pid, line);
	fclose(f);
}

int main(void)
{
	struct board *b;
	struct chan to_builder, walker_ch[WALKERS];
	pid_t builder, walkers[WALKERS], stranger;
	long expect = 0;
	char buf[64];
	int st;

	setvbuf(stdout, NULL, _IONBF, 0);
	if (!hp_supported()) {
		printf("halfproc demo: the halfproc module is not loaded (modprobe halfproc)\n");
		return 2;
	}
	printf("halfproc demo: pid %d; the shared range is [0x%llx, 0x%llx) = [2^45, 2^46)\n",
	       getpid(), HALFPROC_RANGE_START, HALFPROC_RANGE_END);

	b = hp_anon(PAGE);
	if (b == MAP_FAILED) {
		perror("mmap(MAP_HALFPROC)");
		return 1;
	}
	SAY("mmap(MAP_HALFPROC) placed the board at %p: the calling process now leads a set", b);

	STEP(1, "members are processes: globals stay private");
	for (int i = 0; i < WALKERS; i++) {
		if (chan_open(&walker_ch[i]))
			return 1;
		walkers[i] = hp_spawn();
		if (walkers[i] < 0) {
			perror("clone3(CLONE_HALFPROC)");
			return 1;
		}
		if (walkers[i] == 0) {
			struct chan *c = &walker_ch[i];

			private_counter = 100 + i;
			snprintf(secret, sizeof(secret), "walker %d's private secret", i);
			tell_parent(c, 'r');		/* ready */
			from_parent(c);			/* the list is built */
			b->sums[i] = walk(b->head);
			tell_parent(c, 'w');
			from_parent(c);			/* the builder unmapped it */
			{
				char v;
				int r = probe_read((char *)b->head, &v);

				tell_parent(c, r ? 'F' : 'R');
			}
			from_parent(c);			/* dmread happened; exit */
			_exit(0);
		}
		from_child(&walker_ch[i]);
	}
	SAY("clone3(CLONE_HALFPROC) created walkers %d and %d (separate pids, separate mms)",
	    walkers[0], walkers[1]);
	SAY("each walker set its own private_counter (100, 101); the creator's is still %d",
	    private_counter);
	CHECK(private_counter == 1, "the creator's global is untouched by its members");

	STEP(2, "semantics II: one member builds a linked list, others walk it");
	if (chan_open(&to_builder))
		return 1;
	builder = hp_spawn();
	if (builder == 0) {
		struct node *nodes = hp_anon(LIST_BYTES);

		if (nodes == MAP_FAILED)
			_exit(1);
		for (long i = 0; i < NODES; i++) {
			nodes[i].value = i * 7 % 1000;
			nodes[i].next = i + 1 < NODES ? &nodes[i + 1] : NULL;
		}
		b->head = nodes;
		tell_parent(&to_builder, 'b');
		from_parent(&to_builder);		/* walkers are done */
		if (munmap(nodes, LIST_BYTES))
			_exit(2);
		tell_parent(&to_builder, 'u');
		from_parent(&to_builder);
		_exit(0);
	}
	from_child(&to_builder);
	for (long i = 0; i < NODES; i++)
		expect += i * 7 % 1000;
	SAY("builder %d mmapped %zu KiB at %p after the walkers were created and linked %d nodes",
	    builder, LIST_BYTES / 1024, (void *)b->head, NODES);
	show_maps_line(walkers[0]);
	for (int i = 0; i < WALKERS; i++) {
		tell_child(&walker_ch[i], 'g');
		from_child(&walker_ch[i]);
		CHECK(b->sums[i] == expect, "walker %d followed %d pointers: sum %ld (expected %ld)",
		      walkers[i], NODES, b->sums[i], expect);
	}

	STEP(3, "semantics I: a meta-operation by one member holds for all");
	tell_child(&to_builder, 'u');
	from_child(&to_builder);
	SAY("builder %d called munmap(%p, %zu) and it returned", builder, (void *)b->head,
	    LIST_BYTES);
	for (int i = 0; i < WALKERS; i++) {
		char r;

		tell_child(&walker_ch[i], 'p');
		r = from_child(&walker_ch[i]);
		CHECK(r == 'F', "walker %d touching the list now faults (SIGSEGV), like a thread would",
		      walkers[i]);
	}
	{
		char *ro = hp_anon(PAGE), v;

		CHECK(ro != MAP_FAILED && mprotect(ro, PAGE, PROT_READ) == 0 &&
		      probe_write(ro, 1) == -1 && probe_read(ro, &v) == 0,
		      "mprotect(PROT_READ) in the range: writes fault, reads work");
	}

	STEP(4, "dmread(): a member's private memory, and nobody else's");
	memset(buf, 0, sizeof(buf));
	{
		ssize_t n = dmread(walkers[0], secret, sizeof(buf), buf);

		SAY("dmread(%d, &secret, %zu, buf) = %zd: \"%s\"", walkers[0], sizeof(buf), n, buf);
		CHECK(n == sizeof(buf) && !strcmp(buf, "walker 0's private secret"),
		      "read the walker's private global, not the creator's (\"%s\")", secret);
	}
	stranger = fork();	/* plain fork(): not a member of any set */
	if (stranger == 0) {
		ssize_t n = dmread(walkers[0], secret, sizeof(buf), buf);

		_exit(n == -1 && errno == EPERM ? 0 : 1);
	}
	CHECK(wait_status(stranger) == 0,
	      "a process outside the set (pid %d, uid %d) gets EPERM from dmread", stranger,
	      getuid());

	tell_child(&to_builder, 'x');
	for (int i = 0; i < WALKERS; i++)
		tell_child(&walker_ch[i], 'x');
	st = wait_status(builder);
	for (int i = 0; i < WALKERS; i++)
		st |= wait_status(walkers[i]);
	CHECK(st == 0, "every member exited cleanly");
	printf("\nhalfproc demo: %s\n", failures ? "FAILED" : "all steps behaved as described");
	return failures ? 1 : 0;
}
