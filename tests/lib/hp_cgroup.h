/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cgroup v2 helpers of the in-guest tests (hp_memcg, hp_oom): the memory
 * controller's files, fresh cgroups under the root, their removal.
 */
#ifndef HP_CGROUP_H
#define HP_CGROUP_H

#include <limits.h>
#include "halfproc_test.h"

#define CG "/sys/fs/cgroup"

/* Whether the cgroup v2 memory controller can be used under @parent (as root). */
static inline int memcg_enable(const char *parent)
{
	char path[PATH_MAX], line[256] = "";
	FILE *f;
	int ok;

	snprintf(path, sizeof(path), "%s/cgroup.controllers", parent);
	f = fopen(path, "r");
	if (!f)
		return 0;
	ok = fgets(line, sizeof(line), f) && strstr(line, "memory");
	fclose(f);
	if (!ok)
		return 0;
	snprintf(path, sizeof(path), "%s/cgroup.subtree_control", parent);
	f = fopen(path, "w");
	if (!f)
		return 0;
	ok = fputs("+memory", f) >= 0;
	return fclose(f) == 0 && ok;
}

static inline int memcg_available(void)
{
	return memcg_enable(CG);
}

static inline int cg_write(const char *cg, const char *file, const char *val)
{
	char path[PATH_MAX];
	int fd, ok;

	snprintf(path, sizeof(path), "%s/%s", cg, file);
	fd = open(path, O_WRONLY);
	if (fd < 0)
		return -1;
	ok = write(fd, val, strlen(val)) == (ssize_t)strlen(val);
	close(fd);
	return ok ? 0 : -1;
}

/* A number from a cgroup file; with @key, the value on the line "key N". */
static inline long cg_read(const char *cg, const char *file, const char *key)
{
	char path[PATH_MAX], name[64];
	long v, r = -1;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", cg, file);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (!key) {
		if (fscanf(f, "%ld", &v) == 1)
			r = v;
	} else {
		while (fscanf(f, "%63s %ld", name, &v) == 2)
			if (!strcmp(name, key))
				r = v;
	}
	fclose(f);
	return r;
}

/* A fresh cgroup @parent/<prefix>_<tag>_<pid>; its path goes to @cg. */
static inline int cg_make_in(char *cg, size_t len, const char *parent,
			     const char *prefix, const char *tag)
{
	snprintf(cg, len, "%s/%s_%s_%d", parent, prefix, tag, getpid());
	rmdir(cg);
	return mkdir(cg, 0755);
}

/* Remove @cg once the tasks in it are gone (their exit is asynchronous). */
static inline void cg_remove(const char *cg)
{
	for (int i = 0; i < 200 && rmdir(cg) && errno == EBUSY; i++)
		usleep(10000);
}

#endif /* HP_CGROUP_H */
