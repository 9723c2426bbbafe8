#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# apps/timeline.sh APP [SIZE [GROW SHRINK]]: Table 1 and a Fig. 14-style
# timeline.  Runs APP's reconfigurable form (apps/dmi/APP_reconf.c) at SIZE
# (default: bench) starting on 1 node, adding 2 when DMI_check_rescale has
# been called GROW times and removing 1 at SHRINK (defaults: about a third
# and two thirds of APP's iterations at the bench size), with APPS_TRACE=1
# (per-iteration timestamps); measures memcpy and loopback TCP with
# `dmi bench` in the same command; then apps/timeline.py writes
# out/timeline/APP-SIZE.{json,svg,log} and prints Table 1.  Release build
# of libdmi and dmi (DMI_PROFILE=debug for the debug build);
# TIMELINE_BENCH_SIZES: dmi bench's --sizes (default 65536,1048576).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/../scripts/lib.sh"
. "$here/lib.sh"
app="${1:-}"
size="${2:-bench}"
case "$app" in
jacobi) grow=10 shrink=20 ;;	# 30 iterations
nbody) grow=4 shrink=7 ;;	# 10 steps
pagerank) grow=40 shrink=80 ;;	# 117 iterations at the bench size
cg) grow=60 shrink=120 ;;	# 193-194 iterations
*) die "usage: apps/timeline.sh jacobi|nbody|pagerank|cg [small|bench [GROW SHRINK]]" ;;
esac
case "$size" in small | bench) ;; *) die "size '$size': small or bench" ;; esac
if [ $# -ge 3 ]; then
	[ $# -eq 4 ] || die "give both GROW and SHRINK"
	grow="$3" shrink="$4"
fi
out="$here/../out/timeline"
mkdir -p "$out"
apps_build_dmi

phase "memcpy and loopback TCP (dmi bench --nodes 2)"
"$target/$profile/dmi" bench --nodes 2 --sizes "${TIMELINE_BENCH_SIZES:-65536,1048576}" --reps 10 \
	--json "$out/$app-$size-bench.json" 2>/dev/null || die "dmi bench failed"
done_phase

phase "$app $size: 1 node, +2 at check $grow, -1 at check $shrink"
log="$out/$app-$size.log"
APPS_TRACE=1 "$target/$profile/dmi" run -n 1 --grow-at "$grow:2" --shrink-at "$shrink:1" \
	"$build/dmi/${app}_reconf" "$size" 1 >"$log" 2>&1 || { tail -5 "$log" >&2; die "the run failed (log: $log)"; }
grep -E '^(checksum|itergroups|iterations) ' "$log" | tr '\n' ' ' >&2
echo >&2
done_phase
python3 "$here/timeline.py" "$log" "$out/$app-$size-bench.json" "$out/$app-$size"
