#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# apps/bench.sh [--timelines] [OPTIONS]: the app comparison of issue 13 in
# one command, with the paper's tables.
# Builds libdmi, the dmi launcher and the halfproc command in release mode,
# the apps with -O2 against that libdmi (into out/apps-release), then runs
# `halfproc bench apps` with OPTIONS (default: bench size, 5 runs, 1, 2 and
# 4 nodes; `--yield yes` adds the one-line half-process form APP_yield and
# its HP/MPI ratio; `--help` lists them), which prints the table and writes
# out/bench-apps/apps.{json,svg,png}; then prints Table 2 (apps/table2.py:
# lines changed to make each program reconfigurable, and the one line of
# the half-process form).
# --timelines: also Table 1, the reconfiguration timelines of every app of
# --apps (default all) at --size (small or bench): apps/timeline.sh (the
# reconfigurable form, 1 -> 3 -> 2 nodes) and apps/timeline-yield.sh (the
# half-process form moving between 3 nodes), each printing its table and
# writing out/timeline/APP-SIZE*.{json,svg,log}.
set -euo pipefail
# shellcheck source=../scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
cd "$HALFPROC_ROOT"
target="${CARGO_TARGET_DIR:-$HALFPROC_ROOT/target}"
out="$HALFPROC_ROOT/out/apps-release"

timelines=0 size=bench apps="jacobi,nbody,pagerank,cg" pass=()
while [ $# -gt 0 ]; do
	case "$1" in
	--timelines) timelines=1; shift; continue ;;
	--size) size="${2:-}" ;;
	--apps) apps="${2:-}" ;;
	esac
	pass+=("$1")
	shift
done
if [ "$timelines" = 1 ]; then
	case "$size" in small | bench) ;;
	*) die "--timelines runs at --size small or bench, not '$size'" ;;
	esac
fi
command -v mpicc >/dev/null && command -v mpirun >/dev/null ||
	die "mpicc/mpirun missing (scripts/deps.sh installs them)"
command -v python3 >/dev/null || die "python3 missing (Table 2 and the timelines need it)"
phase "build: libdmi, dmi and halfproc (cargo --release)"
cargo build -q -j2 --release -p dmi -p dmi-cli -p halfproc-cli ||
	die "cargo build --release failed"
done_phase
phase "build: apps (-O2) into $out"
make -s -C apps -j2 O="$out" DMI_LIBDIR="$target/release" all dmi >&2 ||
	die "make -C apps failed"
done_phase
phase "halfproc bench apps ${pass[*]}"
"$target/release/halfproc" bench apps --bin "$out" --dmi "$target/release/dmi" \
	--mpirun "$HALFPROC_ROOT/apps/mpirun.sh" "${pass[@]}"
done_phase
echo
echo "Table 2: lines changed to make each DMI program reconfigurable (apps/table2.py;"
echo "reconf: DMI_main/DMI_rescale form; yield: the half-process form, DMI_yield())"
python3 "$HALFPROC_ROOT/apps/table2.py" || die "apps/table2.py failed"
if [ "$timelines" = 1 ]; then
	IFS=, read -r -a list <<<"$apps"
	for app in "${list[@]}"; do
		echo
		echo "Table 1 ($app, $size): reconfigurable form, 1 -> 3 -> 2 nodes (apps/timeline.sh)"
		"$HALFPROC_ROOT/apps/timeline.sh" "$app" "$size" || die "apps/timeline.sh $app $size failed"
		echo
		echo "Table 1 ($app, $size): half-process form, moves between 3 nodes (apps/timeline-yield.sh)"
		"$HALFPROC_ROOT/apps/timeline-yield.sh" "$app" "$size" ||
			die "apps/timeline-yield.sh $app $size failed"
	done
fi
