/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * dmi_main.h - main() of a reconfigurable DMI program (dmi.h, docs/dmi-reconf.md).
 * Include it in exactly one file of a program that defines DMI_main and
 * DMI_itergroup; DMI_judge_rescale is optional.
 */
#ifndef DMI_MAIN_H
#define DMI_MAIN_H

#include <dmi.h>

#ifdef __cplusplus
extern "C" {
#endif

#pragma weak DMI_judge_rescale

int main(int argc, char **argv)
{
	return DMI_run(argc, argv, DMI_main, DMI_itergroup, DMI_judge_rescale);
}

#ifdef __cplusplus
}
#endif

#endif /* DMI_MAIN_H */
