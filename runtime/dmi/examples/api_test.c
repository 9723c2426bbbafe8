/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * Exercises the C API on any number of nodes (`dmi run -n N ./api_test`):
 * bad input gives -1 and a message (never a crash), a DMI mutex protects a
 * read-modify-write done with plain GET/PUT, the built-in fetch-and-add
 * and a user-defined function run at the owner, asynchronous accesses,
 * every read mode, the split-phase barrier, and DMI_munmap. Node 0 prints "api ok" and the totals.
 */
#include <dmi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ROUNDS 20

static int failures;

#define EXPECT(cond, ...)                                            \
	do {                                                         \
		if (!(cond)) {                                       \
			fprintf(stderr, "api_test: node %d: ", DMI_rank()); \
			fprintf(stderr, __VA_ARGS__);                \
			fprintf(stderr, "\n");                       \
			failures++;                                  \
		}                                                    \
	} while (0)

#define CHECK(call) EXPECT((call) >= 0, "%s: %s", #call, DMI_errmsg())

/* User function: store max(target, arg), return the old value. */
static void max_i64(void *target, int64_t size, const void *arg, int64_t arg_size, void *result)
{
	int64_t t, a;
	(void)size;
	(void)arg_size;
	memcpy(&t, target, 8);
	memcpy(&a, arg, 8);
	memcpy(result, &t, 8);
	if (a > t)
		memcpy(target, &a, 8);
}

int main(void)
{
	EXPECT(DMI_read(DMI_root(), 8, &failures, GET) == -1, "a read before DMI_init must fail");
	int max_id = DMI_rmw_register(max_i64);
	if (DMI_init() < 0) {
		fprintf(stderr, "api_test: DMI_init: %s\n", DMI_errmsg());
		return 1;
	}
	int rank = DMI_rank(), size = DMI_size();
	int64_t a[2];
	/* Reconfiguration calls belong to DMI_main programs (dmi_main.h). */
	EXPECT(DMI_rescale(DMI_root(), 1) == -1 && strstr(DMI_errmsg(), "DMI_main"),
	       "DMI_rescale outside DMI_main must fail: %s", DMI_errmsg());
	EXPECT(DMI_check_rescale() == -1 && strstr(DMI_errmsg(), "DMI_main"),
	       "DMI_check_rescale outside DMI_main must fail: %s", DMI_errmsg());
	if (rank == 0) {
		a[0] = DMI_mmap(64, 4);
		CHECK(a[0]);
		a[1] = DMI_mmap(8, 1);
		CHECK(a[1]);
		CHECK(DMI_write(DMI_root(), sizeof(a), a, PUT));
	}
	CHECK(DMI_barrier());
	CHECK(DMI_read(DMI_root(), sizeof(a), a, GET));
	int64_t base = a[0], spare = a[1];

	/* Bad input. */
	char buf[256];
	EXPECT(DMI_read(12345, 8, buf, GET) == -1, "address outside every region accepted");
	EXPECT(strstr(DMI_errmsg(), "outside") != NULL, "message: %s", DMI_errmsg());
	EXPECT(DMI_read(base + 250, 8, buf, GET) == -1, "read past the region accepted");
	EXPECT(DMI_read(base, 8, buf, 17) == -1, "unknown read mode accepted");
	EXPECT(DMI_write(base, 8, buf, GET) == -1, "read mode accepted for a write");
	EXPECT(DMI_read(base, 8, NULL, GET) == -1, "NULL buffer accepted");
	EXPECT(DMI_mmap(0, 5) == -1, "zero page size accepted");
	EXPECT(DMI_atomic(base + 60, 8, buf, 8, buf, DMI_FETCH_ADD_INT64) == -1, "atomic across pages accepted");
	EXPECT(DMI_atomic(base, 8, buf, 8, buf, 99) == -1, "unknown function accepted");
	EXPECT(DMI_munmap(base + 1) == -1, "munmap inside a region accepted");

	/* A mutex around GET + PUT on page 0. */
	for (int i = 0; i < ROUNDS; i++) {
		int64_t v;
		CHECK(DMI_mutex_lock(base));
		CHECK(DMI_read(base, 8, &v, GET));
		v++;
		CHECK(DMI_write(base, 8, &v, PUT));
		CHECK(DMI_mutex_unlock(base));
	}
	/* Fetch-and-add and a user function on page 1. */
	for (int i = 0; i < ROUNDS; i++) {
		int64_t one = 1, old;
		CHECK(DMI_atomic(base + 64, 8, &one, 8, &old, DMI_FETCH_ADD_INT64));
	}
	int64_t mine = 1000 + rank, old;
	CHECK(DMI_atomic(base + 72, 8, &mine, 8, &old, max_id));
	/* Asynchronous write of page 2 by its node, then reads in every mode. */
	DMI_handle_t h;
	int64_t stamp = 7000 + rank;
	CHECK(DMI_write_async(base + 128 + 8 * rank % 64, 8, &stamp, EXCLUSIVE, &h));
	CHECK(DMI_wait(&h));
	CHECK(DMI_barrier());

	int64_t v[3] = { 0, 0, 0 };
	CHECK(DMI_read(base, 8, &v[0], INVALIDATE));
	CHECK(DMI_read(base + 64, 8, &v[1], UPDATE));
	CHECK(DMI_read_async(base + 72, 8, &v[2], GET, &h));
	CHECK(DMI_wait(&h));
	EXPECT(v[0] == (int64_t)size * ROUNDS, "mutex counter %lld, expected %d", (long long)v[0], size * ROUNDS);
	EXPECT(v[1] == (int64_t)size * ROUNDS, "fetch-add counter %lld, expected %d", (long long)v[1], size * ROUNDS);
	EXPECT(v[2] == 1000 + size - 1, "max %lld, expected %d", (long long)v[2], 1000 + size - 1);
	CHECK(DMI_barrier());

	/* Split-phase barrier: what every node wrote before arriving is
	 * visible once DMI_wait returns, although the last node arrives late. */
	int64_t slots = 0;
	if (rank == 0) {
		slots = DMI_mmap(8, size);
		CHECK(slots);
		CHECK(DMI_write(DMI_root() + 16, 8, &slots, PUT));
	}
	CHECK(DMI_barrier());
	CHECK(DMI_read(DMI_root() + 16, 8, &slots, GET));
	EXPECT(DMI_barrier_async(NULL) == -1, "a barrier with a NULL handle accepted");
	for (int64_t r = 1; r <= 3; r++) {
		if (rank == size - 1)
			usleep(20000);
		CHECK(DMI_write(slots + 8 * rank, 8, &r, PUT));
		CHECK(DMI_barrier_async(&h));
		CHECK(DMI_wait(&h));
		for (int q = 0; q < size; q++) {
			int64_t got = 0;
			CHECK(DMI_read(slots + 8 * q, 8, &got, GET));
			/* r + 1: node q already went on to the next round */
			EXPECT(got == r || got == r + 1, "round %lld: node %d's slot holds %lld", (long long)r, q, (long long)got);
		}
	}
	CHECK(DMI_barrier());
	if (rank == 0) {
		CHECK(DMI_munmap(spare));
		EXPECT(DMI_read(spare, 8, buf, GET) == -1, "read of an unmapped region accepted");
	}
	CHECK(DMI_finalize());
	EXPECT(DMI_barrier() == -1, "a barrier after DMI_finalize must fail");
	if (failures)
		return 1;
	if (rank == 0)
		printf("api ok: %d nodes, mutex counter %lld, fetch-add counter %lld, max %lld\n", size,
		       (long long)v[0], (long long)v[1], (long long)v[2]);
	return 0;
}
