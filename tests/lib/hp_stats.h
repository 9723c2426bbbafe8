/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The module's counters for in-guest tests: debugfs
 * /sys/kernel/debug/halfproc/<set id>/ and total/ (kmod/stats.rs).  The
 * suite runs one program at a time, so a set's counts move only by what
 * the test does.
 */
#ifndef HP_STATS_H
#define HP_STATS_H

#include "halfproc_test.h"
#include <dirent.h>

#define HP_STATS_DIR "/sys/kernel/debug/halfproc/"

/* Skip a kselftest_harness.h test without the module or its counters. */
#define REQUIRE_COUNTERS() do {						\
	if (!hp_supported())						\
		SKIP(return, "halfproc module not loaded");		\
	if (access(HP_STATS_DIR "total/switches", R_OK))		\
		SKIP(return, "no debugfs counters");			\
} while (0)

/* Counter @name of set @set ("total" for the sum), or -1. */
static inline long counter(const char *set, const char *name)
{
	char path[256];

	snprintf(path, sizeof(path), HP_STATS_DIR "%s/%s", set, name);
	return file_long(path);
}

/* The highest set id with a directory: the newest set. */
static inline long newest_set(void)
{
	DIR *d = opendir(HP_STATS_DIR);
	struct dirent *e;
	long id = -1;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] >= '1' && e->d_name[0] <= '9' &&
		    atol(e->d_name) > id)
			id = atol(e->d_name);
	closedir(d);
	return id;
}

#endif /* HP_STATS_H */
