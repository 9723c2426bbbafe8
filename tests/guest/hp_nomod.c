// SPDX-License-Identifier: GPL-2.0
/*
 * Without the module, the patched kernel refuses the half-process interfaces
 * with EOPNOTSUPP, never silently.  Exit 0 when that holds (or when the
 * module is loaded, which this program then has nothing to check).
 */
#include "../lib/halfproc_test.h"
#include <sys/prctl.h>

int main(void)
{
	char buf[8];
	void *p;

	setvbuf(stdout, NULL, _IONBF, 0);
	if (hp_supported())
		return 0;
	errno = 0;
	if (hp_clone(CLONE_HALFPROC) != -1 || errno != EOPNOTSUPP) {
		printf("# clone3(CLONE_HALFPROC): errno %d, want EOPNOTSUPP\n", errno);
		return 1;
	}
	errno = 0;
	p = hp_anon(4096);
	if (p != MAP_FAILED || errno != EOPNOTSUPP) {
		printf("# mmap(MAP_HALFPROC): %p errno %d, want EOPNOTSUPP\n", p, errno);
		return 2;
	}
	errno = 0;
	if (dmread(getpid(), buf, 4, buf + 4) != -1 || errno != EOPNOTSUPP) {
		printf("# dmread: errno %d, want EOPNOTSUPP\n", errno);
		return 3;
	}
	errno = 0;
	if (prctl(0x48504353 /* PR_HALFPROC */, 3, 0, 0, 0) != -1 || errno != EOPNOTSUPP) {
		printf("# prctl(PR_HALFPROC): errno %d, want EOPNOTSUPP\n", errno);
		return 4;
	}
	return 0;
}
