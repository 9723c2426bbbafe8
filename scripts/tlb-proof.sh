#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Is hp_tlb a reliable detector, both ways?  Boots the debug kernel (built by
# scripts/guest.sh build debug) in each paging mode (5-level: -cpu max;
# 4-level: -cpu max,la57=off) and PTI setting, runs hp_tlb N times in a row
# on the real module (all must pass) and M times on the test-only module
# without member TLB flushes (most must detect stale translations; the line
# says how many did).
#   scripts/tlb-proof.sh [N [M]]   N normal runs (default 50), M sabotaged
#                                  runs (default 20) per configuration;
#                                  about 25 minutes for the defaults
# Prints one line per configuration and exits 0 only if every normal run
# passed and most sabotaged runs failed on detected stale translations.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/lib.sh"
n="${1:-50}"
m="${2:-20}"
OUT="$HALFPROC_ROOT/out/debug"
bad=0
for cpu in max max,la57=off; do
	for pti in on off; do
		for mode in test sabotage; do
			runs="$n"
			[ "$mode" = sabotage ] && runs="$m"
			rc=0
			HALFPROC_QUIET=1 HALFPROC_CPU="$cpu" HALFPROC_PTI="$pti" \
				HALFPROC_APPEND="halfproc.only=hp_tlb halfproc.repeat=$runs" \
				"$here/guest.sh" boot debug "$mode" $((runs * 40 + 120)) >/dev/null 2>&1 || rc=$?
			log="$OUT/$mode.log"
			cp "$log" "$OUT/tlb-proof-$mode-${cpu//[,=]/_}-pti$pti.log"
			if [ "$mode" = test ]; then
				pass="$(grep -c -E '^ok [0-9]+ init\.run_' "$log" || true)"
			else
				pass="$(grep -c -E '^# sabotage run [0-9]+ of [0-9]+: detected' "$log" || true)"
			fi
			levels="$(grep -o -m1 -E '[45]-level paging, pti (on|off)' "$log" || echo 'paging mode unknown')"
			if [ "$mode" = test ]; then what="passed"; else what="detected stale translations"; fi
			printf '%-9s cpu=%-14s pti=%-3s (%s): %s in %s of %s runs; guest rc=%s\n' \
				"$mode" "$cpu" "$pti" "$levels" "$what" "$pass" "$runs" "$rc"
			# Normal runs: every one passes.  Sabotaged: most detect
			# (the guest's own verdict, rc 0, says the same).
			if [ "$mode" = test ]; then
				[ "$pass" = "$runs" ] && [ "$rc" = 0 ] || bad=1
			else
				[ $((2 * pass)) -gt "$runs" ] && [ "$rc" = 0 ] || bad=1
			fi
		done
	done
done
exit "$bad"

