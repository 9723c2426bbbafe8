/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * Compute instances (half-process.txt Fig. 11): every node creates NINST
 * instances with DMI_create; each runs ROUNDS rounds of writing its slice
 * and checking its neighbour's between barriers, then writes its slice,
 * meets the others at DMI_barrier, reads the whole array back and checks
 * it; the node's program joins them, reads the array and prints its
 * checksum. Every instance also checks that it is a single-threaded
 * process and that it sees the globals main() set before DMI_create.
 *
 *   dmi run -n N ./instances NINST            checksum
 *   dmi run -n N ./instances NINST slow       the same, created 50 ms apart
 *   dmi run -n N ./instances NINST crash G    instance G is killed (SIGKILL)
 *   dmi run -n 1 ./instances NINST bench      GET latency: instance vs main
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <dmi.h>

#define SLICE 512 /* int64 values per instance */
#define ROUNDS 20 /* barrier rounds before the final write */

static int64_t region; /* set by main() before DMI_create */
static int total;      /* instances on all nodes */
static int crash = -1; /* global index of the instance to kill */
static int bench;
static int slow; /* create instances 50 ms apart */

static int threads(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static int64_t value(int64_t g, int64_t j)
{
	return g * 1000003 + j * 7 + 1;
}

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* Median time of GET reads of `size` bytes (<= 4096) of a page this node
 * owns (no network). */
static double read_latency(int64_t size)
{
	enum { N = 2000 };
	static double t[N];
	static char v[4096];

	for (int i = 0; i < N; i++) {
		double a = now_us();
		if (DMI_read(region, size, v, DMI_GET) != 0)
			return -1;
		t[i] = now_us() - a;
	}
	for (int i = 1; i < N; i++) /* insertion sort: N is small */
		for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
			double x = t[j];
			t[j] = t[j - 1];
			t[j - 1] = x;
		}
	return t[N / 2];
}

static int print_latency(const char *who)
{
	double a = read_latency(8), b = read_latency(4096);

	printf("latency %s 8 B %.2f us 4096 B %.2f us\n", who, a, b);
	return a < 0 || b < 0;
}

uint64_t DMI_thread(uint64_t arg_addr)
{
	int64_t g = (int64_t)arg_addr;
	static int64_t mine[SLICE];
	int64_t *all;
	int n = threads();

	if (n != 1) {
		fprintf(stderr, "instance %" PRId64 ": %d threads, not 1\n", g, n);
		return 2;
	}
	if (bench) {
		return print_latency("instance") ? 3 : 0;
	}
	/* Rounds of: write my slice, barrier, check my neighbour's, barrier. */
	for (int64_t r = 1; r <= ROUNDS; r++) {
		int64_t next = (g + 1) % total, v;

		for (int j = 0; j < SLICE; j++)
			mine[j] = value(g, j) + r * 1000000007;
		if (DMI_write(region + g * SLICE * 8, SLICE * 8, mine, DMI_EXCLUSIVE) != 0 ||
		    DMI_barrier() != 0 ||
		    DMI_read(region + (next * SLICE + r % SLICE) * 8, 8, &v, DMI_GET) != 0 ||
		    DMI_barrier() != 0) {
			fprintf(stderr, "instance %" PRId64 ": round %" PRId64 ": %s\n", g, r,
				DMI_errmsg());
			return 8;
		}
		if (v != value(next, r % SLICE) + r * 1000000007) {
			fprintf(stderr, "instance %" PRId64 ": round %" PRId64 ": read %" PRId64 "\n",
				g, r, v);
			return 9;
		}
	}
	for (int j = 0; j < SLICE; j++)
		mine[j] = value(g, j);
	if (DMI_write(region + g * SLICE * 8, SLICE * 8, mine, DMI_EXCLUSIVE) != 0) {
		fprintf(stderr, "instance %" PRId64 ": write: %s\n", g, DMI_errmsg());
		return 3;
	}
	if (g == crash)
		kill(getpid(), SIGKILL);
	if (DMI_barrier() != 0) {
		fprintf(stderr, "instance %" PRId64 ": barrier: %s\n", g, DMI_errmsg());
		return 4;
	}
	all = malloc((size_t)total * SLICE * 8);
	if (!all || DMI_read(region, (int64_t)total * SLICE * 8, all, DMI_INVALIDATE) != 0) {
		fprintf(stderr, "instance %" PRId64 ": read: %s\n", g, DMI_errmsg());
		return 5;
	}
	for (int64_t k = 0; k < (int64_t)total * SLICE; k++)
		if (all[k] != value(k / SLICE, k % SLICE)) {
			fprintf(stderr, "instance %" PRId64 ": element %" PRId64 " is %" PRId64 "\n",
				g, k, all[k]);
			return 6;
		}
	free(all);
	{ /* an asynchronous read (completed at once in an instance) */
		DMI_handle_t a;

		memset(mine, 0, sizeof(mine));
		if (DMI_read_async(region + g * SLICE * 8, SLICE * 8, mine, DMI_GET, &a) != 0 ||
		    DMI_wait(&a) != 0 || mine[SLICE - 1] != value(g, SLICE - 1)) {
			fprintf(stderr, "instance %" PRId64 ": async read: %s\n", g, DMI_errmsg());
			return 7;
		}
	}
	n = threads();
	if (n != 1) {
		fprintf(stderr, "instance %" PRId64 ": %d threads after the calls\n", g, n);
		return 2;
	}
	return 0;
}

int main(int argc, char **argv)
{
	int ninst = argc > 1 ? atoi(argv[1]) : 0;
	DMI_instance_t h[64];
	int rank, size, bad = 0, linger;

	if (ninst < 1 || ninst > 64) {
		fprintf(stderr, "usage: instances NINST(1-64) [slow | crash G [linger] | bench]\n");
		return 2;
	}
	if (argc > 3 && !strcmp(argv[2], "crash"))
		crash = atoi(argv[3]);
	/* "crash G linger": the node whose instance died goes on for 30 s */
	linger = argc > 4 && !strcmp(argv[4], "linger");
	bench = argc > 2 && !strcmp(argv[2], "bench");
	slow = argc > 2 && !strcmp(argv[2], "slow");
	/* Bad input: clear errors, nothing created. */
	if (DMI_create(&h[0], 0) != -1 || errno != ENOTCONN) {
		fprintf(stderr, "DMI_create before DMI_init: %s\n", DMI_errmsg());
		return 1;
	}
	if (DMI_init() != 0) {
		fprintf(stderr, "DMI_init: %s\n", DMI_errmsg());
		return 1;
	}
	rank = DMI_rank();
	size = DMI_size();
	total = size * ninst;
	if (rank == 0) {
		region = DMI_mmap(SLICE * 8, total);
		if (region < 0 || DMI_write(DMI_root(), 8, &region, DMI_PUT) != 0) {
			fprintf(stderr, "mmap: %s\n", DMI_errmsg());
			return 1;
		}
	}
	if (DMI_barrier() != 0 || DMI_read(DMI_root(), 8, &region, DMI_GET) != 0) {
		fprintf(stderr, "node %d: start: %s\n", rank, DMI_errmsg());
		return 1;
	}
	if (DMI_create(NULL, 0) != -1 || errno != EINVAL ||
	    DMI_create_func(&h[0], NULL, 0) != -1 || errno != EINVAL ||
	    DMI_join((DMI_instance_t){ 999 }) != -1 || errno != EINVAL ||
	    DMI_detach((DMI_instance_t){ -1 }) != -1 || errno != EINVAL) {
		fprintf(stderr, "bad DMI_create/join/detach accepted: %s\n", DMI_errmsg());
		return 1;
	}
	if (rank == 0 && !bench)
		printf("node threads %d\n", threads()); /* the engine runs in its own */
	if (bench)
		print_latency("node");
	fflush(stdout); /* an instance starts with a copy of stdio's buffers */
	for (int i = 0; i < ninst; i++) {
		if (i > 0 && slow)
			usleep(50000); /* the first instances reach the barrier first */
		if (DMI_create(&h[i], rank * ninst + i) != 0) {
			fprintf(stderr, "node %d: DMI_create: %s\n", rank, DMI_errmsg());
			return 1;
		}
	}
	for (int i = 0; i < ninst; i++)
		if (DMI_join(h[i]) != 0) {
			fprintf(stderr, "node %d: DMI_join: %s\n", rank, DMI_errmsg());
			bad = 1;
		}
	if (bad && linger && rank == crash / ninst)
		sleep(30);
	if (bad)
		return 1;
	if (rank == 0 && !bench) {
		int64_t *all = malloc((size_t)total * SLICE * 8);
		uint64_t sum = 0;

		if (!all || DMI_read(region, (int64_t)total * SLICE * 8, all, DMI_GET) != 0) {
			fprintf(stderr, "read: %s\n", DMI_errmsg());
			return 1;
		}
		uint64_t want = 0;

		for (int64_t k = 0; k < (int64_t)total * SLICE; k++) {
			sum = sum * 31 + (uint64_t)all[k];
			want = want * 31 + (uint64_t)value(k / SLICE, k % SLICE);
		}
		printf("checksum %" PRIu64 "\n", sum);
		free(all);
		if (sum != want) {
			fprintf(stderr, "checksum %" PRIu64 ", expected %" PRIu64 "\n", sum, want);
			return 1;
		}
	}
	if (DMI_finalize() != 0) {
		fprintf(stderr, "node %d: DMI_finalize: %s\n", rank, DMI_errmsg());
		return 1;
	}
	return 0;
}
