#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# apps/test.sh [SIZE]: build the apps, run each serial reference, its MPI
# version on 1, 2 and 4 ranks and its DMI version on 1, 2, 3 and 4 nodes
# (`dmi run -n N`, loopback) at SIZE (default: small), and check that every
# checksum agrees with the serial one within the app's stated tolerance
# (common/checksum.c); and the reconfigurable forms on 1 node and growing
# 1 -> 3 -> 2 nodes, which must agree with serial and with each other; and
# the movable forms (APP_yield) moving between 3 nodes while one leaves and
# one joins, which must agree with serial; and apps/timeline-test.sh,
# apps/reconf-sweep-test.sh and apps/table2-test.sh.  Exit 1 naming each
# app and rank or node count that disagreed or failed to run.  The DMI part runs `cargo build -p dmi -p
# dmi-cli` first (libdmi and the dmi command in the workspace's
# target/debug; nothing to do when they are up to date); DMI_NODES="1 2"
# changes the node counts.  A failing timeline step prints the last lines
# of its output (apps/timeline-test.sh's stderr) to say why.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
size="${1:-small}"
out="${APPS_OUT:-$here/../out/apps}"
apps=(jacobi nbody pagerank cg)
ranks=(1 2 4)
read -r -a nodes <<<"${DMI_NODES:-1 2 3 4}"
target="${CARGO_TARGET_DIR:-$here/../target}"
dmi="$target/debug/dmi"
per_run=60	# seconds; a small run takes well under 5

command -v mpicc >/dev/null && command -v mpirun >/dev/null ||
	{ echo "apps: mpicc/mpirun missing (scripts/deps.sh installs them)" >&2; exit 1; }
cargo build -q -j2 --manifest-path "$here/../Cargo.toml" -p dmi -p dmi-cli ||
	{ echo "apps: cargo build -p dmi -p dmi-cli failed" >&2; exit 1; }
make -s -C "$here" -j "$(nproc)" O="$out" all dmi >&2 || { echo "apps: build failed" >&2; exit 1; }

passed=0
failed=()
# run NAME COMMAND...: "CHECKSUM ITERATIONS TIME_PER_ITER" as printed, or nothing
run() {
	local name="$1" log rc=0
	shift
	log="$(timeout "$per_run" "$@" 2>&1)" || rc=$?
	if ((rc)); then
		printf '%s\n' "$log" | tail -5 >&2
		echo "apps: $name: exited $rc" >&2
		return 1
	fi
	printf '%s\n' "$log" | awk '{ v[$1] = $2 }
		END { if ("checksum" in v) print v["checksum"], v["iterations"], v["time_per_iter"] }'
}
# check APP IMPL N UNIT COMMAND...: runs it, compares with $ref
check() {
	local app="$1" impl="$2" np="$3" unit="$4" val="" iters secs verdict ok
	shift 4
	read -r val iters secs < <(run "$app $impl $np $unit" "$@")
	if [ -z "$val" ]; then
		failed+=("$app $impl $np $unit: no checksum")
		return
	fi
	verdict="$("$out/cks-cmp" "$app" "$ref" "$val")"
	ok=$?
	printf '%-8s %-13s %4s iterations, %.2e s/iteration; checksum %s; %s\n' \
		"$app" "$impl $np $unit" "$iters" "$secs" "$val" "${verdict#*: }"
	if ((ok == 0)); then
		passed=$((passed + 1))
	else
		failed+=("$app $impl $np $unit: checksum $val, serial $ref")
	fi
}
for app in "${apps[@]}"; do
	read -r ref iters secs < <(run "$app serial" "$out/serial/$app" "$size")
	if [ -z "${ref:-}" ]; then
		failed+=("$app serial: no checksum")
		continue
	fi
	printf '%-8s %-13s %4s iterations, %.2e s/iteration; checksum %s\n' \
		"$app" serial "$iters" "$secs" "$ref"
	for np in "${ranks[@]}"; do
		check "$app" mpi "$np" ranks "$here/mpirun.sh" "$np" "$out/mpi/$app" "$size"
	done
	for np in "${nodes[@]}"; do
		check "$app" dmi "$np" nodes "$dmi" run -n "$np" "$out/dmi/$app" "$size"
	done
done
# The reconfigurable forms (dmi/APP_reconf.c, DMI_main): on 1 node
# throughout (1 itergroup), and growing 1 -> 3 -> 2 nodes while they
# compute (3 itergroups); both must agree with the serial checksum, and the
# resized run with the 1-node one, within the app's tolerance (cks-cmp).
for app in "${apps[@]}"; do
	read -r ref iters _ < <(run "$app serial" "$out/serial/$app" "$size")
	one=""
	for sched in "" "--grow-at $((iters / 4)):2 --shrink-at $((iters * 5 / 8)):1"; do
		want=1
		[ -n "$sched" ] && want=3
		# shellcheck disable=SC2086 # the schedule is several words
		log="$(DMI_QUIET=1 timeout "$per_run" "$dmi" run -n 1 $sched "$out/dmi/${app}_reconf" "$size" 1 2>&1)"
		read -r val groups < <(printf '%s\n' "$log" | awk '{ v[$1] = $2 }
			END { print v["checksum"], v["itergroups"] }')
		verdict="no checksum"
		ok=1
		if [ -n "${ref:-}" ] && [ -n "${val:-}" ] && [ "${groups:-}" = "$want" ]; then
			verdict="$("$out/cks-cmp" "$app" "$ref" "$val")" && ok=0
			verdict="${verdict#*: }"
			if ((ok == 0)) && [ -n "$one" ]; then
				v1="$("$out/cks-cmp" "$app" "$one" "$val")" || ok=1
				verdict="$verdict; against 1 node: ${v1#*: }"
			fi
		fi
		[ -z "$sched" ] && one="${val:-}"
		printf '%-8s %-13s %s: %s itergroups; checksum %s; %s\n' "$app" dmi-reconf \
			"${sched:-1 node}" "${groups:-no}" "${val:-none}" "$verdict"
		if ((ok == 0)); then
			passed=$((passed + 1))
		else
			printf '%s\n' "$log" | tail -5 >&2
			failed+=("$app dmi-reconf ${sched:-1 node}: checksum ${val:-none}, serial ${ref:-none}, ${groups:-no} itergroups (want $want)")
		fi
	done
done
# The movable forms (dmi/APP_yield.c: the normal form plus one DMI_yield()
# per iteration) in movable runs on 3 nodes: rank 1 moves to node 0 at its
# first yield, node 2 leaves at yield ITERS/4 (its rank moves to node 0) and
# a spare joins at ITERS/2 (that rank moves there); the checksum must agree
# with the serial one, and the run must have made the three moves.
for app in "${apps[@]}"; do
	read -r ref iters _ < <(run "$app serial" "$out/serial/$app" "$size")
	[ -n "${ref:-}" ] || continue
	shrink=$((iters / 4 > 2 ? iters / 4 : 2))
	grow=$((iters / 2 > shrink + 1 ? iters / 2 : shrink + 1))
	sched="--shrink-at $shrink:1 --grow-at $grow:1"
	# shellcheck disable=SC2086 # the schedule is several words
	log="$(DMI_MOVE_AT=1:1@0 timeout "$per_run" "$dmi" run -n 3 --movable $sched \
		"$out/dmi/${app}_yield" "$size" 2>&1 </dev/null)"
	val="$(printf '%s\n' "$log" | awk '$1 == "checksum" { print $2 }')"
	moves="$(printf '%s\n' "$log" | grep -c ' moved at yield [0-9]* to node ')"
	verdict="no checksum"
	ok=1
	if [ -n "$val" ]; then
		verdict="$("$out/cks-cmp" "$app" "$ref" "$val")" && ok=0
		verdict="${verdict#*: }"
	fi
	((moves == 3)) || ok=1
	printf '%-8s %-13s %s: %s moves; checksum %s; %s\n' "$app" dmi-yield \
		"3 nodes, $sched" "$moves" "${val:-none}" "$verdict"
	if ((ok == 0)); then
		passed=$((passed + 1))
	else
		printf '%s\n' "$log" | tail -8 >&2
		failed+=("$app dmi-yield $sched: checksum ${val:-none}, serial $ref, $moves moves (want 3)")
	fi
done
# end_to_end NAME SCRIPT WHAT: runs one of the end-to-end test scripts beside
# this one; on failure its last lines, prefixed with NAME, and the last
# error line it printed.
end_to_end() {
	local name="$1" script="$2" what="$3" tlog rc=0
	tlog="$(mktemp)"
	"$here/$script" >"$tlog" 2>&1 || rc=$?
	if ((rc == 0)); then
		passed=$((passed + 1))
		echo "$what"
	else
		tail -20 "$tlog" | sed "s/^/$name: /" >&2
		failed+=("$name: apps/$script exited $rc: $(grep -E 'error:|failed|wrong' "$tlog" | tail -1)")
	fi
	rm -f "$tlog"
}
# Table 1 and the timeline: apps/timeline.sh end to end at the small size.
end_to_end timeline timeline-test.sh \
	"timeline cg small 1 -> 3 -> 2: traced, JSON and SVG written, checksum agrees"
# Reconfiguration time against bytes moved: apps/reconf-sweep.sh end to end
# at a small scale (Jacobi, 3 sizes, 1 repetition), its checker, and the
# checker failing on broken copies of the result.
end_to_end reconf-sweep reconf-sweep-test.sh \
	"reconf-sweep jacobi 16,64,128: swept, checked (sizes, bytes, fits, checksums, SVG); the checker fails on broken copies"
# Table 2 (lines changed to make each program reconfigurable), counted by
# apps/table2.py, and docs/apps.md showing exactly its output.
if "$here/table2-test.sh"; then
	passed=$((passed + 1))
else
	failed+=("table2: apps/table2-test.sh")
fi
echo "apps: ${passed} passed, ${#failed[@]} failed"
if ((${#failed[@]})); then
	printf 'apps: disagree: %s\n' "${failed[@]}" >&2
	exit 1
fi
