// SPDX-License-Identifier: GPL-2.0
/*
 * Is soft-dirty tracking usable here (pre-copy's dirty-page source)?
 * Writes a page, clears the soft-dirty bits (`echo 4 > clear_refs`), checks
 * that bit 55 of its pagemap entry is 0, writes it again and checks that the
 * bit is 1, while an untouched neighbour stays 0.  Also reports whether
 * userfaultfd exists (the write-protect alternative).  TAP; a kernel without
 * CONFIG_MEM_SOFT_DIRTY fails the second check.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SOFT_DIRTY (1ULL << 55)

static int n, failed;

static void check(int ok, const char *what)
{
	printf("%sok %d %s\n", ok ? "" : "not ", ++n, what);
	failed |= !ok;
}

static uint64_t entry(int fd, const void *p)
{
	uint64_t e = 0;
	off_t off = (uintptr_t)p / 4096 * sizeof(e);

	if (pread(fd, &e, sizeof(e), off) != sizeof(e))
		return ~0ULL;
	return e;
}

static int clear_refs(void)
{
	int fd = open("/proc/self/clear_refs", O_WRONLY);
	int ok = fd >= 0 && write(fd, "4", 1) == 1;

	if (fd >= 0)
		close(fd);
	return ok;
}

int main(void)
{
	char *p = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int fd = open("/proc/self/pagemap", O_RDONLY);
	long uffd;

	printf("TAP version 13\n1..5\n");
	check(p != MAP_FAILED && fd >= 0, "mmap_and_open_pagemap");
	if (p == MAP_FAILED || fd < 0)
		return 1;
	memset(p, 1, 2 * 4096);
	check(clear_refs(), "clear_refs_4_accepted");
	check(!(entry(fd, p) & SOFT_DIRTY), "bit_55_clear_after_clear_refs");
	p[0] = 2;
	check(entry(fd, p) & SOFT_DIRTY && entry(fd, p) != ~0ULL, "bit_55_set_by_a_write");
	check(!(entry(fd, p + 4096) & SOFT_DIRTY), "untouched_page_stays_clean");
	uffd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	printf("# soft-dirty: %s; userfaultfd: %s\n", failed ? "NOT usable" : "usable",
	       uffd >= 0 ? "available" : "not available");
	return failed;
}
