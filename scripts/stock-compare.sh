#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Normal processes must not notice half-processes: run the kernel's own mm
# selftests (the subset tests/build.sh builds) on the unpatched kernel
# (scripts/kernel.sh stock: the release configuration, no patch series) and
# compare their results with the last patched run (out/debug/test.log from
# scripts/test: debug kernel, module loaded).  A third kernel build, so not
# part of scripts/test.
#   scripts/stock-compare.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/lib.sh"
patched="$HALFPROC_ROOT/out/debug/test.log"
[ -f "$patched" ] || die "no patched run to compare with: run scripts/test first"
"$here/guest.sh" build stock
# loglevel=5: no KERN_INFO line (clocksource...) cutting into a TAP line.
HALFPROC_QUIET=1 HALFPROC_APPEND="loglevel=5" "$here/guest.sh" boot stock mm 900 || true
OUT="$HALFPROC_ROOT/out/stock"
# The mm selftests' TAP lines (timings stripped) from the init.sh run of each.
norm() { awk '/^# halfproc-harness: begin mm\//{on=1} /^# halfproc-harness: end mm\//{on=0} on' "$1" |
	grep -E '^(ok|not ok) ' | sed -e 's/[0-9]*ns$//' | sort; }
norm "$OUT/mm.log" >"$OUT/stock.tap"
norm "$patched" >"$OUT/patched.tap"
[ -s "$OUT/stock.tap" ] || die "the stock run reported no mm selftest result: $OUT/mm.log"
if diff -u "$OUT/stock.tap" "$OUT/patched.tap" >"$OUT/diff.txt"; then
	info "mm selftests: $(wc -l <"$OUT/stock.tap") results, identical on the stock and the patched kernel"
else
	cat "$OUT/diff.txt"
	die "mm selftests differ between the stock and the patched kernel"
fi
