#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Print a progress line for a running kernel build every 15 s:
#   progress.sh PID LOG EXPECTED_OBJECTS
# EXPECTED_OBJECTS is the count of the last full build (0: unknown).
pid="$1" log="$2" expected="$3"
t0=$(date +%s)
while kill -0 "$pid" 2>/dev/null; do
	sleep 15
	n=$(grep -cE '^ +(CC|RUSTC|AS|BINDGEN)' "$log" 2>/dev/null || true)
	last=$(grep -E '^ +(CC|RUSTC|AS|LD|BINDGEN)' "$log" 2>/dev/null | tail -1 | awk '{print $NF}')
	el=$(($(date +%s) - t0))
	if [ "$expected" -gt 0 ]; then
		pct=$((n * 100 / expected))
		[ "$pct" -gt 99 ] && pct=99
		bar=$(printf '%*s' $((pct / 4)) '' | tr ' ' '#')
		printf '        [%-25s] %3d%%  %dm%02ds  %s\n' "$bar" "$pct" $((el / 60)) $((el % 60)) "$last" >&2
	else
		printf '        %5d objects  %dm%02ds  %s\n' "$n" $((el / 60)) $((el % 60)) "$last" >&2
	fi
done
