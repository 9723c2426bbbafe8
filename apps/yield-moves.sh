#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# apps/yield-moves.sh [APP...] [--size small|bench]: what a reconfiguration
# of the one-line forms (dmi/APP_yield.c) costs.  Each app runs as a
# movable run on 3 nodes (`dmi run -n 3 --movable`): rank 1 moves to node 0
# at its first yield, node 2 leaves at yield ITERS/4 (its rank moves to node
# 0) and a spare joins at ITERS/2 (that rank moves there), as apps/test.sh
# checks at the small size.  Prints, per move, the image's bytes and the
# node's own times (checkpoint, stopped, whole move), the move's rate, and
# the run's checksum against the normal form's on 3 nodes (cks-cmp), and
# memcpy and loopback TCP stream bandwidth measured in the same command.
# Release build (DMI_PROFILE=debug for the debug build).  The numbers of the
# 2026-11-24 run are in docs/apps.md ("The one-line forms: cost of a move").
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/../scripts/lib.sh"
. "$here/lib.sh"
size=bench apps=()
while [ $# -gt 0 ]; do
	case "$1" in
	--size) size="${2:?--size needs small or bench}"; shift 2 ;;
	jacobi | nbody | pagerank | cg) apps+=("$1"); shift ;;
	-h | --help) sed -n '3,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument '$1' (apps: jacobi nbody pagerank cg; --size small|bench)" ;;
	esac
done
case "$size" in small | bench) ;; *) die "size '$size': small or bench" ;; esac
((${#apps[@]})) || apps=(jacobi nbody pagerank cg)
apps_build_dmi

phase "memcpy and loopback TCP (dmi bench --nodes 2), the limits a move's rate is compared with"
"$dmi" bench --nodes 2 --sizes 1048576 --reps 10 --json "$build/yield-moves-bench.json" >/dev/null 2>&1 ||
	die "dmi bench failed"
done_phase
python3 - "$build/yield-moves-bench.json" <<'PY'
import json, sys
for s in json.load(open(sys.argv[1]))["physical"]:
    if s["op"] in ("memcpy", "tcp stream"):
        print("# %s: median %.0f MB/s (%d bytes, %d reps)" % (s["op"], s["median_mb_s"], s["size"], s["reps"]))
PY
printf '%-8s %-22s %12s %10s %10s %10s %8s\n' app move bytes "ckpt ms" "stopped ms" "move ms" "MB/s"
bad=0
for app in "${apps[@]}"; do
	# The normal form on 3 nodes: the reference checksum and the number of
	# iterations (one DMI_yield each in the movable form).
	read -r ref iters < <("$dmi" run -n 3 "$build/dmi/$app" "$size" 2>/dev/null </dev/null |
		awk '$1 == "checksum" { c = $2 } $1 == "iterations" { n = $2 } END { print c, n }')
	[ -n "${ref:-}" ] && [ -n "${iters:-}" ] || die "$app: the normal form printed no checksum or iterations"
	shrink=$((iters / 4 > 2 ? iters / 4 : 2))
	grow=$((iters / 2 > shrink + 1 ? iters / 2 : shrink + 1))
	log="$(DMI_MOVE_AT=1:1@0 timeout 600 "$dmi" run -n 3 --movable --shrink-at "$shrink:1" \
		--grow-at "$grow:1" "$build/dmi/${app}_yield" "$size" 2>&1 </dev/null)" ||
		{ printf '%s\n' "$log" | tail -5 >&2; die "$app: the movable run failed"; }
	# dmi: node R: instance I moved at yield Y to node T: pid A -> B (BYTES
	# bytes, checkpoint C us, stopped S us, move M us)
	printf '%s\n' "$log" | sed -n 's/^dmi: node \([0-9]*\): instance \([0-9]*\) moved at yield \([0-9]*\) to node \([0-9]*\): .*(\([0-9]*\) bytes, checkpoint \([0-9]*\) us, stopped \([0-9]*\) us, move \([0-9]*\) us)$/\1 \2 \3 \4 \5 \6 \7 \8/p' |
		while read -r from id y to bytes c s m; do
			awk -v a="$app" -v mv="rank $id: $from -> $to @$y" -v b="$bytes" -v c="$c" -v s="$s" -v m="$m" \
				'BEGIN { printf "%-8s %-22s %12d %10.1f %10.1f %10.1f %8.0f\n", a, mv, b, c / 1e3, s / 1e3, m / 1e3, b / m }'
		done
	val="$(printf '%s\n' "$log" | awk '$1 == "checksum" { print $2 }')"
	moves="$(printf '%s\n' "$log" | grep -c ' moved at yield [0-9]* to node ' || true)"
	if verdict="$("$build/cks-cmp" "$app" "$ref" "${val:-none}" 2>&1)" && ((moves == 3)); then
		echo "# $app: $moves moves; checksum $val, normal form $ref: ${verdict#*: }"
	else
		echo "# $app: FAILED: $moves moves (want 3); checksum ${val:-none}, normal form $ref: ${verdict#*: }"
		bad=1
	fi
done
exit "$bad"
