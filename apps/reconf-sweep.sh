#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# apps/reconf-sweep.sh [APP] [--sizes N,N,...] [--reps N] [--forms reconf,yield]
#                      [--out DIR]: is a reconfiguration's time proportional to
# the bytes it moves?  Runs APP (jacobi, the default; nbody, pagerank, cg) at
# each size (a number: the bench size with its edge N, docs/apps.md "Inputs
# and sizes"), REPS times (default 3), in each form:
#   reconf  APP_reconf on 1 -> 3 -> 2 nodes (`dmi run -n 1 --grow-at G:2
#           --shrink-at S:1`, G and S a third and two thirds of the serial
#           run's iterations): the runtime's log of the leave (bytes, pages,
#           ms of its epoch change), parsed by apps/timeline.py
#   yield   APP_yield in a movable run on 3 nodes with apps/yield-moves.sh's
#           3 moves: each move's image bytes, stopped and whole-move ms
# and memcpy and the loopback TCP stream with `dmi bench --nodes 2 --sizes
# 1048576 --reps 10` in the same command.  apps/reconf_sweep.py then fits
# time = fixed + bytes / rate per series over all runs and writes
# DIR/APP.json and DIR/APP.svg (default DIR: out/reconf-sweep; logs in
# DIR/APP/), prints the tables, and checks the result: every size and run
# there, bytes growing with the size, a positive rate (in the fit of each
# size's fastest run), and every checksum agreeing with the serial run's
# (apps/common/cks-cmp); exit 1 otherwise.
# Default sizes: jacobi 32,48,64,96,128,160; nbody 8,10,12,16,20,24;
# pagerank 2048,...,65536 (doubling); cg 20,24,30,36,44,56.  Release build
# (DMI_PROFILE=debug for the debug build).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/../scripts/lib.sh"
. "$here/lib.sh"
app=jacobi sizes="" reps=3 forms=reconf,yield out="$here/../out/reconf-sweep"
need() { [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value (--help)"; }
while [ $# -gt 0 ]; do
	case "$1" in
	--sizes) need "$@"; sizes="$2"; shift 2 ;;
	--reps) need "$@"; reps="$2"; shift 2 ;;
	--forms) need "$@"; forms="$2"; shift 2 ;;
	--out) need "$@"; out="$2"; shift 2 ;;
	jacobi | nbody | pagerank | cg) app="$1"; shift ;;
	-h | --help) sed -n '3,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument '$1' (apps: jacobi nbody pagerank cg; --sizes N,N,... --reps N --forms reconf,yield --out DIR; --help)" ;;
	esac
done
if [ -z "$sizes" ]; then
	case "$app" in
	jacobi) sizes=32,48,64,96,128,160 ;;
	nbody) sizes=8,10,12,16,20,24 ;;
	pagerank) sizes=2048,4096,8192,16384,32768,65536 ;;
	cg) sizes=20,24,30,36,44,56 ;;
	esac
fi
[[ "$reps" =~ ^[1-9][0-9]*$ ]] || die "--reps '$reps': a positive whole number"
[[ "$sizes" =~ ^[0-9]+(,[0-9]+)+$ ]] || die "--sizes '$sizes': two or more numbers, comma-separated"
IFS=, read -r -a size_list <<<"$sizes"
prev=0
for s in "${size_list[@]}"; do
	((10#$s >= 4)) || die "--sizes: size '$s' is under 4"
	((10#$s > prev)) || die "--sizes '$sizes': not increasing at '$s'"
	prev=$((10#$s))
done
IFS=, read -r -a form_list <<<"$forms"
((${#form_list[@]})) || die "--forms '$forms': reconf, yield or both"
for f in "${form_list[@]}"; do
	case "$f" in reconf | yield) ;; *) die "--forms: '$f' is not reconf or yield" ;; esac
done
mkdir -p "$out/$app"
apps_build_dmi
make -s -C "$here" O="$build" "$build/serial/$app" >&2 || die "make $build/serial/$app failed"

phase "memcpy and loopback TCP (dmi bench --nodes 2), the limits the rates are compared with"
"$dmi" bench --nodes 2 --sizes 1048576 --reps 10 --json "$out/$app-bench.json" >/dev/null 2>&1 ||
	die "dmi bench failed"
done_phase

manifest="$out/$app-runs.tsv"
: >"$manifest"
load() { cut -d' ' -f1 /proc/loadavg; }
for size in "${size_list[@]}"; do
	read -r ref iters < <(timeout 900 "$build/serial/$app" "$size" 2>/dev/null |
		awk '$1 == "checksum" { c = $2 } $1 == "iterations" { n = $2 } END { print c, n }')
	[ -n "${ref:-}" ] && [ -n "${iters:-}" ] || die "$app $size: the serial run printed no checksum or iterations"
	((iters >= 8)) || die "$app $size: $iters iterations; the schedules need 8 or more"
	for rep in $(seq 1 "$reps"); do
		for f in "${form_list[@]}"; do
			log="$out/$app/$size-$rep-$f.log"
			l="$(load)"
			if [ "$f" = reconf ]; then
				grow=$((iters / 3)) shrink=$((iters * 2 / 3))
				phase "$app $size rep $rep: ${app}_reconf 1 -> 3 nodes at check $grow, -> 2 at $shrink"
				APPS_TRACE=1 timeout 900 "$dmi" run -n 1 --grow-at "$grow:2" --shrink-at "$shrink:1" \
					"$build/dmi/${app}_reconf" "$size" 1 >"$log" 2>&1 </dev/null ||
					{ tail -5 "$log" >&2; die "$app $size: the reconf run failed (log: $log)"; }
			else
				shrink=$((iters / 4 > 2 ? iters / 4 : 2))
				grow=$((iters / 2 > shrink + 1 ? iters / 2 : shrink + 1))
				phase "$app $size rep $rep: ${app}_yield on 3 nodes, moves at yields 1, $shrink, $grow"
				# appending: a moved rank reopens the log by its path with the original's flags
				: >"$log"
				DMI_MOVE_AT=1:1@0 timeout 900 "$dmi" run -n 3 --movable --shrink-at "$shrink:1" \
					--grow-at "$grow:1" "$build/dmi/${app}_yield" "$size" >>"$log" 2>&1 </dev/null ||
					{ tail -5 "$log" >&2; die "$app $size: the movable run failed (log: $log)"; }
			fi
			done_phase
			printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$f" "$size" "$rep" "$log" "$ref" "$l" >>"$manifest"
		done
	done
done
python3 "$here/reconf_sweep.py" build "$manifest" "$out/$app-bench.json" "$out/$app"
python3 "$here/reconf_sweep.py" check "$out/$app.json" "$out/$app.svg" "$sizes" "$reps" "$build/cks-cmp"
