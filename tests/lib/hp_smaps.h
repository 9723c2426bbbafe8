/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Huge pages and reclaim in the range for the guest tests (hp_reclaim,
 * hp_memcg_reclaim, hp_mmstate): the madvise() advice they use, a 2 MiB-aligned
 * piece of a range mapping, and a field of the smaps entry holding an address.
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

/*
 * The value of field @key (e.g. "AnonHugePages:", "ProtectionKey:") of the
 * VMA at @addr in /proc/self/smaps, or for "VmFlags:" whether the flag
 * @flag is listed (1/0); -1 if there is no such VMA or field.
 */
static inline long smaps_field(const void *addr, const char *key, const char *flag)
{
	unsigned long start, end, want = (unsigned long)addr;
	char line[512];
	int in = 0;
	long v = -1;
	FILE *f = fopen("/proc/self/smaps", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx-%lx ", &start, &end) == 2 &&
		    strchr(line, '-') < strchr(line, ' ')) {
			in = start <= want && want < end;
			continue;
		}
		if (!in || strncmp(line, key, strlen(key)))
			continue;
		if (flag) {
			char pat[8];

			snprintf(pat, sizeof(pat), " %s", flag);
			v = strstr(line + strlen(key), pat) != NULL;
		} else {
			v = strtol(line + strlen(key), NULL, 10);
		}
		break;
	}
	fclose(f);
	return v;
}

/* A field (kB) of the /proc/self/smaps entry that holds @addr, or -1. */
static inline long smaps_kb(const void *addr, const char *field)
{
	char key[64];

	snprintf(key, sizeof(key), "%s:", field);
	return smaps_field(addr, key, NULL);
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
