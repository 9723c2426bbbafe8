// SPDX-License-Identifier: GPL-2.0
/*
 * cks-cmp APP REFERENCE VALUE: exit 0 if the two checksums of APP agree
 * within APP's stated tolerance (common/checksum.c), 1 if not, 2 on misuse.
 * Prints the relative difference either way.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "checksum.h"

static int parse(const char *s, double *out)
{
	char *end;

	*out = strtod(s, &end);
	return end != s && *end == '\0';
}

int main(int argc, char **argv)
{
	double ref, val, rtol;

	if (argc != 4 || (rtol = cks_rtol(argv[1])) < 0 ||
	    !parse(argv[2], &ref) || !parse(argv[3], &val)) {
		fprintf(stderr, "usage: cks-cmp jacobi|nbody|pagerank|cg REF VALUE\n");
		return 2;
	}
	double scale = fmax(fabs(ref), fabs(val));
	double rel = scale > 0 ? fabs(ref - val) / scale : 0.0;
	int ok = cks_agree(ref, val, rtol);

	printf("%s: relative difference %.3e, tolerance %.0e: %s\n", argv[1], rel,
	       rtol, ok ? "agree" : "DISAGREE");
	return ok ? 0 : 1;
}
