/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * Bad input to every call of the C API, on any number of nodes
 * (`dmi run -n N ./bad_input`): each must return -1 with the documented
 * errno and a message naming the problem, change nothing, and leave the
 * node working. Covers calls before DMI_init and after DMI_finalize,
 * addresses outside every region (0, negative, between regions, past the
 * last byte, an unmapped region), sizes past a region's end (by one byte,
 * by a lot, overflowing int64), negative sizes, unknown modes and
 * functions, NULL buffers and handles, and mmap sizes out of range. At the
 * end every node checks that the data is what the good calls wrote (a bad
 * entry in a group write applied nothing). Node 0 prints
 * "bad input ok: N nodes, K checks".
 */
#include <dmi.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int failures, checks;

/* EXPECT_ERR(call, errno value, substring of the message) */
#define EXPECT_ERR(call, want_errno, want_msg)                                               \
	do {                                                                                 \
		errno = 0;                                                                   \
		long long rc_ = (long long)(call);                                           \
		int e_ = errno;                                                              \
		const char *m_ = DMI_errmsg();                                               \
		checks++;                                                                    \
		if (rc_ != -1 || e_ != (want_errno) || !strstr(m_, (want_msg))) {            \
			fprintf(stderr,                                                      \
				"bad_input: node %d: line %d: %s: returned %lld, errno %d (%s), " \
				"message \"%s\"; expected -1, errno %d, a message with \"%s\"\n", \
				DMI_rank(), __LINE__, #call, rc_, e_, strerror(e_), m_,       \
				(want_errno), (want_msg));                                   \
			failures++;                                                          \
		}                                                                            \
	} while (0)

#define CHECK(call)                                                                           \
	do {                                                                                  \
		checks++;                                                                     \
		if ((call) < 0) {                                                             \
			fprintf(stderr, "bad_input: node %d: line %d: %s: %s\n", DMI_rank(), \
				__LINE__, #call, DMI_errmsg());                               \
			failures++;                                                           \
		}                                                                             \
	} while (0)

#define NOT_INIT "not initialised"

/* Every call before DMI_init (and after DMI_finalize). */
static void uninitialised(void)
{
	char buf[16] = { 0 };
	DMI_access_t acc = { 4096, 8, buf };
	DMI_handle_t h = { 0 };
	int64_t one = 1;

	EXPECT_ERR(DMI_root(), ENOTCONN, NOT_INIT);
	EXPECT_ERR(DMI_mmap(64, 4), ENOTCONN, NOT_INIT);
	EXPECT_ERR(DMI_munmap(1LL << 40), ENOTCONN, NOT_INIT);
	EXPECT_ERR(DMI_read(1LL << 40, 8, buf, GET), ENOTCONN, NOT_INIT);
	EXPECT_ERR(DMI_write(1LL << 40, 8, buf, PUT), ENOTCONN, NOT_INIT);
	EXPECT_ERR(DMI_group_read(&acc, 1, GET), ENOTCONN, NOT_INIT);
	EXPECT_ERR(DMI_group_write(&acc, 1, PUT), ENOTCONN, NOT_INIT);
	EXPECT_ERR(DMI_read_async(1LL << 40, 8, buf, GET, &h), ENOTCONN, NOT_INIT);
	EXPECT_ERR(DMI_write_async(1LL << 40, 8, buf, PUT, &h), ENOTCONN, NOT_INIT);
	EXPECT_ERR(DMI_mutex_lock(1LL << 40), ENOTCONN, NOT_INIT);
	EXPECT_ERR(DMI_mutex_unlock(1LL << 40), ENOTCONN, NOT_INIT);
	EXPECT_ERR(DMI_barrier(), ENOTCONN, NOT_INIT);
	EXPECT_ERR(DMI_atomic(1LL << 40, 8, &one, 8, buf, DMI_FETCH_ADD_INT64), ENOTCONN, NOT_INIT);
	EXPECT_ERR(DMI_finalize(), ENOTCONN, NOT_INIT);
	/* No call touched the handle; a wait on it is an error of its own. */
	EXPECT_ERR(DMI_wait(&h), EINVAL, "no pending access");
	checks++;
	if (DMI_rank() != -1 || DMI_size() != -1) {
		fprintf(stderr, "bad_input: DMI_rank/DMI_size before DMI_init: %d/%d\n", DMI_rank(),
			DMI_size());
		failures++;
	}
}

int main(void)
{
	uninitialised();
	/* The message stays where DMI_errmsg pointed, also after DMI_rank. */
	const char *msg = DMI_errmsg();
	(void)DMI_rank();
	checks++;
	if (msg != DMI_errmsg() || !strstr(msg, "no pending access")) {
		fprintf(stderr, "bad_input: DMI_errmsg moved or changed: \"%s\"\n", msg);
		failures++;
	}
	if (DMI_init() < 0) {
		fprintf(stderr, "bad_input: DMI_init: %s\n", DMI_errmsg());
		return 1;
	}
	int rank = DMI_rank(), size = DMI_size();
	int64_t a[3];
	if (rank == 0) {
		a[0] = DMI_mmap(64, 4);	/* 256 bytes, 4 pages */
		a[1] = DMI_mmap(8, 2);
		a[2] = DMI_mmap(8, 1);	/* unmapped below */
		CHECK(a[0]);
		CHECK(a[1]);
		CHECK(a[2]);
		CHECK(DMI_write(DMI_root(), sizeof(a), a, PUT));
	}
	CHECK(DMI_barrier());
	CHECK(DMI_read(DMI_root(), sizeof(a), a, GET));
	int64_t base = a[0], small = a[1], gone = a[2];
	/* Each node's own 8 bytes in page 1, and a known value in page 0. */
	int64_t mine = base + 64 + 8 * (rank % 8), val = 1000 + rank, zero = 0;
	CHECK(DMI_write(mine, 8, &val, EXCLUSIVE));
	CHECK(DMI_barrier());
	if (rank == 0)
		CHECK(DMI_munmap(gone));
	CHECK(DMI_barrier());

	char buf[512] = { 0 };
	int64_t one = 1;
	DMI_handle_t h = { 0 };

	/* Addresses outside every region. */
	const int64_t outside[] = { 0, -8, 12345, INT64_MIN, INT64_MAX - 7, base + 256,
				    base - 1, small + 16, gone };
	for (unsigned i = 0; i < sizeof(outside) / sizeof(outside[0]); i++) {
		int64_t x = outside[i];
		EXPECT_ERR(DMI_read(x, 8, buf, GET), EFAULT, "bad address");
		EXPECT_ERR(DMI_read(x, 8, buf, INVALIDATE), EFAULT, "bad address");
		EXPECT_ERR(DMI_write(x, 8, buf, PUT), EFAULT, "bad address");
		EXPECT_ERR(DMI_write(x, 8, buf, EXCLUSIVE), EFAULT, "bad address");
		EXPECT_ERR(DMI_atomic(x, 8, &one, 8, buf, DMI_FETCH_ADD_INT64), EFAULT, "bad address");
		EXPECT_ERR(DMI_mutex_lock(x), EFAULT, "bad address");
		EXPECT_ERR(DMI_munmap(x), EFAULT, "");
		/* An asynchronous access starts; its error comes from DMI_wait. */
		CHECK(DMI_read_async(x, 8, buf, UPDATE, &h));
		EXPECT_ERR(DMI_wait(&h), EFAULT, "bad address");
		EXPECT_ERR(DMI_wait(&h), EINVAL, "no pending access");
	}

	/* Sizes past a region's end. */
	EXPECT_ERR(DMI_read(base, 257, buf, GET), ERANGE, "past the end");
	EXPECT_ERR(DMI_read(base + 255, 2, buf, UPDATE), ERANGE, "past the end");
	EXPECT_ERR(DMI_write(base + 200, 57, buf, PUT), ERANGE, "past the end");
	EXPECT_ERR(DMI_write(base + 200, 57, buf, EXCLUSIVE), ERANGE, "past the end");
	EXPECT_ERR(DMI_read(small, 17, buf, GET), ERANGE, "past the end");
	EXPECT_ERR(DMI_read(base + 8, INT64_MAX, buf, GET), ERANGE, "past the end");
	EXPECT_ERR(DMI_write(base, INT64_MAX, buf, PUT), ERANGE, "past the end");
	EXPECT_ERR(DMI_atomic(base + 252, 8, &one, 8, buf, DMI_FETCH_ADD_INT64), ERANGE, "past");
	CHECK(DMI_write_async(base + 250, 8, buf, PUT, &h));
	EXPECT_ERR(DMI_wait(&h), ERANGE, "past the end");
	/* Negative sizes. */
	EXPECT_ERR(DMI_read(base, -1, buf, GET), EINVAL, "negative size");
	EXPECT_ERR(DMI_write(base, -8, buf, PUT), EINVAL, "negative size");
	EXPECT_ERR(DMI_read_async(base, -1, buf, GET, &h), EINVAL, "negative size");
	EXPECT_ERR(DMI_atomic(base, 8, &one, -8, buf, DMI_FETCH_ADD_INT64), EINVAL, "negative");

	/* Unknown modes and functions. */
	const int bad_read[] = { -1, 3, 4, 5, 17, 1 << 30 };
	const int bad_write[] = { -1, 0, 1, 2, 5, 99 };
	for (unsigned i = 0; i < 6; i++) {
		EXPECT_ERR(DMI_read(base, 8, buf, bad_read[i]), EINVAL, "read mode");
		EXPECT_ERR(DMI_write(base, 8, &zero, bad_write[i]), EINVAL, "write mode");
		DMI_access_t g = { base, 8, buf };
		EXPECT_ERR(DMI_group_read(&g, 1, bad_read[i]), EINVAL, "read mode");
		EXPECT_ERR(DMI_group_write(&g, 1, bad_write[i]), EINVAL, "write mode");
		EXPECT_ERR(DMI_write_async(base, 8, &zero, bad_write[i], &h), EINVAL, "write mode");
		EXPECT_ERR(DMI_read_async(base, 8, buf, bad_read[i], &h), EINVAL, "read mode");
	}
	EXPECT_ERR(DMI_atomic(base, 8, &one, 8, buf, 99), EINVAL, "function");
	EXPECT_ERR(DMI_atomic(base, 8, &one, 8, buf, -1), EINVAL, "function");
	EXPECT_ERR(DMI_atomic(base + 60, 8, &one, 8, buf, DMI_FETCH_ADD_INT64), EINVAL, "page");
	EXPECT_ERR(DMI_rmw_register(NULL), EINVAL, "NULL function");

	/* NULL buffers, handles and access lists. */
	EXPECT_ERR(DMI_read(base, 8, NULL, GET), EINVAL, "NULL");
	EXPECT_ERR(DMI_write(base, 8, NULL, PUT), EINVAL, "NULL");
	EXPECT_ERR(DMI_read_async(base, 8, buf, GET, NULL), EINVAL, "handle is NULL");
	EXPECT_ERR(DMI_wait(NULL), EINVAL, "no pending access");
	EXPECT_ERR(DMI_group_read(NULL, 2, GET), EINVAL, "accesses");
	EXPECT_ERR(DMI_group_write(NULL, -1, PUT), EINVAL, "accesses");
	EXPECT_ERR(DMI_atomic(base, 8, NULL, 8, buf, DMI_FETCH_ADD_INT64), EINVAL, "NULL");

	/* A group with one bad entry does nothing, also to its good entries. */
	int64_t junk = -77;
	DMI_access_t gw[2] = { { mine, 8, &junk }, { base + 250, 8, &junk } };
	EXPECT_ERR(DMI_group_write(gw, 2, EXCLUSIVE), ERANGE, "past the end");
	EXPECT_ERR(DMI_group_write(gw, 2, PUT), ERANGE, "past the end");
	gw[1].addr = 99;
	EXPECT_ERR(DMI_group_write(gw, 2, PUT), EFAULT, "bad address");
	gw[1] = (DMI_access_t){ base, -1, &junk };
	EXPECT_ERR(DMI_group_write(gw, 2, PUT), EINVAL, "negative size");
	DMI_access_t gr[2] = { { mine, 8, buf }, { small + 8, 9, buf + 8 } };
	EXPECT_ERR(DMI_group_read(gr, 2, GET), ERANGE, "past the end");

	/* DMI_mmap and DMI_munmap out of range. */
	EXPECT_ERR(DMI_mmap(0, 5), EINVAL, "positive");
	EXPECT_ERR(DMI_mmap(64, 0), EINVAL, "positive");
	EXPECT_ERR(DMI_mmap(-64, 4), EINVAL, "positive");
	EXPECT_ERR(DMI_mmap(1LL << 40, 2), EINVAL, "more than");
	EXPECT_ERR(DMI_mmap(INT64_MAX, INT64_MAX), EINVAL, "more than");
	EXPECT_ERR(DMI_munmap(base + 64), EFAULT, "");
	EXPECT_ERR(DMI_munmap(DMI_root()), EFAULT, "root");

	/* The node still works and nothing was lost. */
	CHECK(DMI_barrier());
	for (int r = 0; r < size; r++) {
		int64_t v = -1;
		CHECK(DMI_read(base + 64 + 8 * (r % 8), 8, &v, r % 2 ? UPDATE : INVALIDATE));
		checks++;
		if (r < 8 && v != 1000 + r) {
			fprintf(stderr, "bad_input: node %d: node %d's value is %lld, not %d\n", rank, r,
				(long long)v, 1000 + r);
			failures++;
		}
	}
	int64_t back[2];
	CHECK(DMI_read(DMI_root(), 16, back, GET));
	checks++;
	if (back[0] != base || back[1] != small) {
		fprintf(stderr, "bad_input: node %d: the root page changed\n", rank);
		failures++;
	}
	CHECK(DMI_finalize());
	uninitialised();
	/* One run per process: a second DMI_init is refused, not half started. */
	EXPECT_ERR(DMI_init(), EINVAL, "DMI_init after DMI_finalize");
	EXPECT_ERR(DMI_barrier(), ENOTCONN, NOT_INIT);
	if (failures) {
		fprintf(stderr, "bad_input: node %d: %d of %d checks failed\n", rank, failures, checks);
		return 1;
	}
	if (rank == 0)
		printf("bad input ok: %d nodes, %d checks\n", size, checks);
	return 0;
}
