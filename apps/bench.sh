#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# apps/bench.sh [OPTIONS]: the app comparison of issue 13 in one command.
# Builds libdmi, the dmi launcher and the halfproc command in release mode,
# the apps with -O2 against that libdmi (into out/apps-release), then runs
# `halfproc bench apps` with OPTIONS (default: bench size, 5 runs, 1, 2 and
# 4 nodes; `--help` lists them), which prints the table and writes
# out/bench-apps/apps.{json,svg,png}.
set -euo pipefail
# shellcheck source=../scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
cd "$HALFPROC_ROOT"
target="${CARGO_TARGET_DIR:-$HALFPROC_ROOT/target}"
out="$HALFPROC_ROOT/out/apps-release"

command -v mpicc >/dev/null && command -v mpirun >/dev/null ||
	die "mpicc/mpirun missing (scripts/deps.sh installs them)"
phase "build: libdmi, dmi and halfproc (cargo --release)"
cargo build -q -j2 --release -p dmi -p dmi-cli -p halfproc-cli ||
	die "cargo build --release failed"
done_phase
phase "build: apps (-O2) into $out"
make -s -C apps -j2 O="$out" DMI_LIBDIR="$target/release" all dmi >&2 ||
	die "make -C apps failed"
done_phase
phase "halfproc bench apps $*"
"$target/release/halfproc" bench apps --bin "$out" --dmi "$target/release/dmi" \
	--mpirun "$HALFPROC_ROOT/apps/mpirun.sh" "$@"
done_phase
