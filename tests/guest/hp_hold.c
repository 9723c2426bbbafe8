// SPDX-License-Identifier: GPL-2.0
/*
 * hp_hold SECONDS: start a set of two members and keep it alive for SECONDS
 * (until killed); with 0, check that a set works and exit at once.
 */
#include "../lib/halfproc_test.h"

int main(int argc, char **argv)
{
	int secs = argc > 1 ? atoi(argv[1]) : 0;
	char *p = hp_anon(4096);
	pid_t m;

	if (p == MAP_FAILED || !in_range(p, 4096))
		return 1;
	m = hp_spawn();
	if (m < 0)
		return 2;
	if (m == 0) {
		p[0] = 'm';
		if (secs)
			sleep(secs);
		_exit(0);
	}
	if (!secs)
		return wait_status(m) == 0 && p[0] == 'm' ? 0 : 3;
	sleep(secs);
	kill(m, SIGKILL);
	return 0;
}
