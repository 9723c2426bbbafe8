/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * A reconfigurable program (dmi.h, Fig. 7) that checks itself; run it as
 * `dmi run -n 1 --grow-at 3:2 --shrink-at 6:1 ./reconf_test`. CELLS
 * counters live in global memory, one page each; in every iteration each
 * thread adds 1 to the counters of its share (cell % pnum == rank) with a
 * GET read and an EXCLUSIVE write (so the counters' pages are owned where
 * they are computed, and move when a node leaves), then all meet at
 * DMI_barrier. At the end every counter must equal ITERS: nothing written
 * was lost over joins and leaves. Node 0 prints the number of threads of
 * each itergroup, what DMI_judge_rescale was asked, and "reconf ok". Bad
 * calls (outside DMI_itergroup, bad addresses, bad init_node_num, unknown
 * modes) must return -1 with a message.
 *
 * Under `dmi run --threads-per-node K` every member node runs K itergroup
 * threads of this process: the per-thread state is thread-local, the
 * failure count atomic, and DMI_judge_rescale checks core_num == K.
 *
 * `reconf_test [ITERS [PAUSE_MS [LINGER_MS]]]`: ITERS iterations (default
 * 10), a pause of PAUSE_MS after each (so that nodes can join from outside
 * while it runs, tools/dmi/tests/join.rs), and node 0 waits LINGER_MS
 * after DMI_rescale returned (printing "rescale returned" first).
 */
#include <dmi_main.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CELLS 24
#define ITERS 10
#define MAX_GROUPS 16

struct data_t {
	int64_t iter;
	int64_t cells;			/* CELLS pages of 64 bytes */
	int64_t groups;
	int64_t iters;
	int64_t pause_ms;
	int64_t pnum[MAX_GROUPS];
	int64_t judged[MAX_GROUPS][3];	/* in, out, cur of the first "yes" */
};

static int failures;	/* atomic: a node may run several itergroup threads */

#define EXPECT(cond, ...)                                                  \
	do {                                                               \
		if (!(cond)) {                                             \
			fprintf(stderr, "reconf_test: node %d: ", DMI_rank()); \
			fprintf(stderr, __VA_ARGS__);                      \
			fprintf(stderr, "\n");                             \
			__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED); \
		}                                                          \
	} while (0)

#define CHECK(call) EXPECT((call) >= 0, "%s: %s", #call, DMI_errmsg())

static _Thread_local int64_t judged[3];

/* Built with -DNO_JUDGE, the program has no DMI_judge_rescale (Fig. 6's
 * programs need none): DMI_check_rescale then ends the itergroup whenever
 * a node joins or leaves, and judged[] stays 0. */
#ifndef NO_JUDGE
/* Itergroup threads per node: dmi run --threads-per-node K. */
static int cores(void)
{
	const char *k = getenv("DMI_THREADS_PER_NODE");

	return k ? atoi(k) : 1;
}

int DMI_judge_rescale(DMI_node_t *in_nodes, DMI_node_t *out_nodes, DMI_node_t *cur_nodes,
		      int in_node_num, int out_node_num, int cur_node_num)
{
	for (int i = 0; i < cur_node_num; i++)
		EXPECT(cur_nodes[i].core_num == cores() && strchr(cur_nodes[i].host, ':'),
		       "node %d: core_num %d (want %d), host %s", cur_nodes[i].id,
		       cur_nodes[i].core_num, cores(), cur_nodes[i].host);
	/* distinct current nodes, whatever the threads per node */
	for (int i = 0; i < cur_node_num; i++)
		for (int j = 0; j < i; j++)
			EXPECT(cur_nodes[i].id != cur_nodes[j].id, "node %d listed twice",
			       cur_nodes[i].id);
	/* a joining node is never a current one; node 0 never leaves */
	for (int i = 0; i < in_node_num; i++)
		for (int j = 0; j < cur_node_num; j++)
			if (in_nodes[i].id == cur_nodes[j].id)
				__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < out_node_num; i++)
		if (out_nodes[i].id == 0)
			__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
	if (in_node_num + out_node_num >= 1) {
		judged[0] = in_node_num;
		judged[1] = out_node_num;
		judged[2] = cur_node_num;
		return 1;
	}
	return 0;
}
#endif

int DMI_itergroup(int rank, int pnum, int64_t addr)
{
	struct data_t d;
	char buf[8];

	CHECK(DMI_read(addr, sizeof(d), &d, GET));
	EXPECT(DMI_read(d.cells, 8, buf, 99) == -1 && strstr(DMI_errmsg(), "read mode"),
	       "an unknown read mode must fail: %s", DMI_errmsg());
	EXPECT(DMI_write(d.cells, 8, buf, GET) == -1 && strstr(DMI_errmsg(), "write mode"),
	       "a read mode for a write must fail: %s", DMI_errmsg());
	EXPECT(DMI_read(d.cells + CELLS * 64, 8, buf, GET) == -1,
	       "a read past the region must fail");
	memset(judged, 0, sizeof(judged));
	while (d.iter < d.iters) {
		int rc = DMI_check_rescale();

		CHECK(rc);
		if (rc == 1)
			break;
		for (int c = rank; c < CELLS; c += pnum) {
			int64_t v;

			CHECK(DMI_read(d.cells + c * 64, 8, &v, GET));
			v++;
			CHECK(DMI_write(d.cells + c * 64, 8, &v, EXCLUSIVE));
		}
		CHECK(DMI_barrier());
		d.iter++;
		if (d.pause_ms > 0)
			usleep(d.pause_ms * 1000);
	}
	if (rank == 0 && d.groups < MAX_GROUPS) {
		d.pnum[d.groups] = pnum;
		memcpy(d.judged[d.groups], judged, sizeof(judged));
		d.groups++;
		CHECK(DMI_write(addr, sizeof(d), &d, PUT));
	}
	return __atomic_load_n(&failures, __ATOMIC_RELAXED) ? 0 : d.iter != d.iters;
}

void DMI_main(int argc, char **argv)
{
	struct data_t d = { 0 };
	int64_t linger_ms = argc > 3 ? atoll(argv[3]) : 0;

	d.iters = argc > 1 ? atoll(argv[1]) : ITERS;
	d.pause_ms = argc > 2 ? atoll(argv[2]) : 0;
	if (d.iters < 1 || d.pause_ms < 0 || linger_ms < 0) {
		fprintf(stderr, "usage: reconf_test [ITERS>0 [PAUSE_MS [LINGER_MS]]]\n");
		exit(2);
	}

	EXPECT(DMI_check_rescale() == -1 && strstr(DMI_errmsg(), "DMI_itergroup"),
	       "DMI_check_rescale outside DMI_itergroup must fail: %s", DMI_errmsg());
	d.cells = DMI_mmap(64, CELLS);
	CHECK(d.cells);
	int64_t addr = DMI_mmap(sizeof(d), 1);

	CHECK(addr);
	CHECK(DMI_write(addr, sizeof(d), &d, PUT));
	EXPECT(DMI_rescale(12345, 1) == -1 && strstr(DMI_errmsg(), "bad address"),
	       "DMI_rescale at a bad address must fail: %s", DMI_errmsg());
	EXPECT(DMI_rescale(addr, 0) == -1 && strstr(DMI_errmsg(), "init_node_num"),
	       "init_node_num 0 must fail: %s", DMI_errmsg());
	EXPECT(DMI_rescale(addr, 99) == -1 && strstr(DMI_errmsg(), "available"),
	       "init_node_num 99 must fail: %s", DMI_errmsg());
	CHECK(DMI_rescale(addr, 1));
	if (linger_ms > 0) {
		printf("rescale returned\n");
		fflush(stdout);
		usleep(linger_ms * 1000);
	}
	CHECK(DMI_read(addr, sizeof(d), &d, GET));
	int64_t bad = 0;

	for (int c = 0; c < CELLS; c++) {
		int64_t v;

		CHECK(DMI_read(d.cells + c * 64, 8, &v, GET));
		bad += v != d.iters;
	}
	EXPECT(bad == 0, "%lld of %d counters are not %lld", (long long)bad, CELLS,
	       (long long)d.iters);
	printf("itergroups");
	for (int g = 0; g < d.groups && g < MAX_GROUPS; g++)
		printf(" %lld(in %lld out %lld cur %lld)", (long long)d.pnum[g],
		       (long long)d.judged[g][0], (long long)d.judged[g][1],
		       (long long)d.judged[g][2]);
	printf("\n");
	if (failures)
		exit(1);
	printf("reconf ok: %d counters at %lld\n", CELLS, (long long)d.iters);
	fflush(stdout);
}
