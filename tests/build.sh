#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Build the in-guest tests as static binaries:
#   tests/build.sh SRC BUILD OUT
# SRC: kernel source (for kselftest_harness.h and the mm selftests),
# BUILD: kernel build dir (for the sanitized UAPI headers), OUT: output dir.
# Writes OUT/tests/<name> and OUT/tests/mm/<name>.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/../scripts/lib.sh"
SRC="$1" BUILD="$2" OUT="$3"
mkdir -p "$OUT/tests/mm" "$OUT/bench" "$OUT/demo" "$OUT/migrate"
CFLAGS=(-static -pthread -O2 -g0 -Wall -Wno-unused-function -Wno-misleading-indentation -D_GNU_SOURCE
	-isystem "$BUILD/usr/include" -I "$SRC/tools/testing/selftests")

for c in "$here"/guest/*.c; do
	name="$(basename "$c" .c)"
	gcc "${CFLAGS[@]}" -I "$here/lib" -o "$OUT/tests/$name" "$c" ||
		die "building tests/guest/$name.c failed"
done

for d in bench demo migrate; do
	for c in "$here/$d"/*.c; do
		name="$(basename "$c" .c)"
		gcc "${CFLAGS[@]}" -I "$here/lib" -o "$OUT/$d/$name" "$c" ||
			die "building tests/$d/$name.c failed"
	done
done

# A subset of the kernel's own mm selftests, run on the patched kernel with
# the module loaded: normal processes must not notice half-processes.
MM="$SRC/tools/testing/selftests/mm"
MM_TESTS=(map_fixed_noreplace mremap_test mremap_dontunmap mlock2-tests
	map_populate madv_populate mdwe_test mrelease_test cow gup_longterm)
built=()
for t in "${MM_TESTS[@]}"; do
	extra=()
	grep -q 'vm_util.h' "$MM/$t.c" && extra+=("$MM/vm_util.c")
	grep -q 'thp_settings.h' "$MM/$t.c" && extra+=("$MM/thp_settings.c")
	if gcc "${CFLAGS[@]}" -I "$MM" -o "$OUT/tests/mm/$t" "$MM/$t.c" \
		"${extra[@]}" -lm >"$OUT/tests/mm/$t.log" 2>&1; then
		built+=("$t")
		rm -f "$OUT/tests/mm/$t.log"
	else
		info "mm selftest $t does not build statically here; see $OUT/tests/mm/$t.log"
	fi
done
info "mm selftests built: ${built[*]}"
