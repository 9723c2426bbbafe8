/* SPDX-License-Identifier: GPL-2.0 */
/*
 * /proc/<pid>/pagemap for the guest tests: entries read with pread() and
 * the PAGEMAP_SCAN ioctl.
 */
#ifndef HP_PAGEMAP_H
#define HP_PAGEMAP_H

#include <linux/fs.h>
#include <sys/ioctl.h>
#include "halfproc_test.h"

#define PM_PRESENT	(1ULL << 63)
#define PM_PFN_MASK	((1ULL << 55) - 1)

/* @n pagemap entries of @pid from @addr into @pm; 0 or -1. */
static inline int pagemap(pid_t pid, unsigned long addr, __u64 *pm, int n)
{
	char path[64];
	ssize_t r;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/pagemap", pid);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	r = pread(fd, pm, n * sizeof(*pm), addr / PAGE * sizeof(*pm));
	close(fd);
	return r == (ssize_t)(n * sizeof(*pm)) ? 0 : -1;
}

/*
 * PAGEMAP_SCAN of @pid's present pages in [@start, @end) into @r (at most
 * @max regions), @walk_end where it stopped: the number of regions, -1 if
 * the kernel has no such ioctl, -2 on another error.
 */
static inline int pagemap_scan(pid_t pid, unsigned long start, unsigned long end,
			       struct page_region *r, int max, __u64 *walk_end)
{
	struct pm_scan_arg arg = {
		.size = sizeof(arg),
		.start = start,
		.end = end,
		.vec = (unsigned long)r,
		.vec_len = max,
		.category_mask = PAGE_IS_PRESENT,
		.return_mask = PAGE_IS_PRESENT,
	};
	char path[64];
	int fd, n;

	snprintf(path, sizeof(path), "/proc/%d/pagemap", pid);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return -2;
	n = ioctl(fd, PAGEMAP_SCAN, &arg);
	if (n < 0)
		n = errno == ENOTTY ? -1 : -2;
	close(fd);
	*walk_end = arg.walk_end;
	return n;
}

#endif /* HP_PAGEMAP_H */
