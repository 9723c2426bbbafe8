#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# apps/timeline-yield.sh APP [SIZE [GROW SHRINK]]: the Fig. 14-style
# timeline of APP's one-line form (apps/dmi/APP_yield.c: the normal program
# plus one DMI_yield() per iteration) in a movable run on 3 nodes (`dmi run
# -n 3 --movable`): ranks 1 and 2 move to node 0 at the first yield (the
# program runs on 1 node), back to nodes 1 and 2 at yield GROW (3 nodes),
# and rank 2 to node 1 at yield SHRINK (2 nodes); defaults: a third and
# two thirds of the iterations.  DMI_TRACE_YIELDS=1 timestamps every yield;
# `dmi bench` measures memcpy and loopback TCP in the same command; then
# apps/timeline_yield.py writes out/timeline/APP-SIZE-yield.{json,svg,log}
# and prints each move (bytes, times, rate against memcpy and TCP) and the
# checksum, which must agree with the normal form's (apps/common/cks-cmp).
# Release build of libdmi and dmi (DMI_PROFILE=debug for the debug build).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/../scripts/lib.sh"
. "$here/lib.sh"
app="${1:-}"
size="${2:-bench}"
case "$app" in jacobi | nbody | pagerank | cg) ;;
*) die "usage: apps/timeline-yield.sh jacobi|nbody|pagerank|cg [small|bench [GROW SHRINK]]" ;;
esac
case "$size" in small | bench) ;; *) die "size '$size': small or bench" ;; esac
out="$here/../out/timeline"
mkdir -p "$out"
apps_build_dmi

phase "the normal form on 3 nodes: reference checksum and iterations"
read -r ref iters < <("$dmi" run -n 3 "$build/dmi/$app" "$size" 2>/dev/null </dev/null |
	awk '$1 == "checksum" { c = $2 } $1 == "iterations" { n = $2 } END { print c, n }')
[ -n "${ref:-}" ] && [ -n "${iters:-}" ] || die "$app: the normal form printed no checksum or iterations"
grow="${3:-$((iters / 3 > 2 ? iters / 3 : 2))}"
shrink="${4:-$((iters * 2 / 3 > grow ? iters * 2 / 3 : grow + 1))}"
((grow > 1 && shrink > grow && shrink < iters)) ||
	die "GROW $grow and SHRINK $shrink: need 1 < GROW < SHRINK < $iters (the iterations)"
done_phase

phase "memcpy and loopback TCP (dmi bench --nodes 2)"
"$dmi" bench --nodes 2 --sizes "${TIMELINE_BENCH_SIZES:-65536,1048576}" --reps 10 \
	--json "$out/$app-$size-yield-bench.json" 2>/dev/null || die "dmi bench failed"
done_phase

phase "$app $size, one-line form: 1 node, 3 at yield $grow, 2 at yield $shrink"
log="$out/$app-$size-yield.log"
# Appending: a moved rank's copy reopens the log by its path with the
# original's flags; without O_APPEND it would write over the others' lines.
: >"$log"
DMI_TRACE_YIELDS=1 DMI_MOVE_AT="1:1@0,1:2@0,$grow:1@1,$grow:2@2,$shrink:2@1" \
	timeout 900 "$dmi" run -n 3 --movable "$build/dmi/${app}_yield" "$size" >>"$log" 2>&1 </dev/null ||
	{ tail -5 "$log" >&2; die "the movable run failed (log: $log)"; }
done_phase
python3 "$here/timeline_yield.py" "$log" "$out/$app-$size-yield-bench.json" "$out/$app-$size-yield"
moves="$(grep -c ' moved at yield [0-9]* to node ' "$log" || true)"
val="$(awk '$1 == "checksum" { print $2 }' "$log")"
verdict="$("$build/cks-cmp" "$app" "$ref" "${val:-none}")" && ((moves == 5)) ||
	die "$app: $moves moves (want 5); checksum ${val:-none} against the normal form's $ref: ${verdict#*: }"
info "$app: 5 moves; checksum $val, normal form $ref: ${verdict#*: }"
