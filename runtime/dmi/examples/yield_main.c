/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * DMI_yield in a reconfigurable program (dmi_main.h): node 0's DMI_main
 * creates one compute instance, which yields 3 times and prints how often
 * it was moved; DMI_main prints what DMI_join said. Such a program's nodes
 * move no DMI_create instance to another node: a move scheduled there
 * (DMI_MOVE_AT=N:0@NODE) must leave the instance where it is.
 *
 *   dmi run -n 2 ./yield_main     instance: 3 yields, moved M
 *                                 join RC
 */
#include <dmi_main.h>
#include <stdio.h>

uint64_t DMI_thread(uint64_t arg_addr)
{
	int moved = 0;

	(void)arg_addr;
	for (int i = 0; i < 3; i++) {
		int r = DMI_yield();
		if (r < 0) {
			fprintf(stderr, "DMI_yield: %s\n", DMI_errmsg());
			return 9;
		}
		moved += r;
	}
	printf("instance: 3 yields, moved %d\n", moved);
	fflush(stdout);
	return 0;
}

int DMI_itergroup(int rank, int pnum, int64_t addr)
{
	(void)rank;
	(void)pnum;
	(void)addr;
	return 0;
}

void DMI_main(int argc, char **argv)
{
	DMI_instance_t h;

	(void)argc;
	(void)argv;
	if (DMI_create(&h, 0)) {
		fprintf(stderr, "DMI_create: %s\n", DMI_errmsg());
		return;
	}
	printf("join %d\n", DMI_join(h));
	fflush(stdout);
}
