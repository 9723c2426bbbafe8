/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Huge pages and reclaim in the range for the guest tests (hp_reclaim,
 * hp_memcg_reclaim): the madvise() advice they use, a 2 MiB-aligned piece
 * of a range mapping, and a field of the smaps entry holding an address.
 */
#ifndef HP_SMAPS_H
#define HP_SMAPS_H

#include "halfproc_test.h"

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
#define HPAGE (2UL << 20)

/* A field (kB) of the /proc/self/smaps entry that holds @addr, or -1. */
static inline long smaps_kb(const void *addr, const char *field)
{
	char line[512];
	unsigned long a = (unsigned long)addr, s, e;
	int in = 0;
	long v = -1;
	FILE *f = fopen("/proc/self/smaps", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx-%lx ", &s, &e) == 2 && strchr(line, '-') <
		    strchr(line, ' ')) {
			in = a >= s && a < e;
			continue;
		}
		if (in && !strncmp(line, field, strlen(field)) &&
		    line[strlen(field)] == ':') {
			v = strtol(line + strlen(field) + 1, NULL, 10);
			break;
		}
	}
	fclose(f);
	return v;
}

/* A HPAGE-aligned, HPAGE-long piece of a fresh range mapping. */
static inline char *hp_aligned(size_t len)
{
	char *p = hp_anon(len + HPAGE);

	if (p == MAP_FAILED)
		return p;
	return (char *)(((uintptr_t)p + HPAGE - 1) & ~(HPAGE - 1));
}

#endif /* HP_SMAPS_H */
