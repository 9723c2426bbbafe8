#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Build everything the guest needs and boot it:
#   scripts/guest.sh debug|release test|bench|panic|hang|fail [TIMEOUT]
# Results land in out/<flavour>/<mode>.{log,results.json,tap}.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/lib.sh"
flavour="$1" mode="$2" timeout="${3:-900}"
OUT="$HALFPROC_ROOT/out/$flavour"
mkdir -p "$OUT"

BUILD="$("$here/kernel.sh" "$flavour")"
SRC="$HALFPROC_CACHE/src/linux"
python3 "$here/check-config.py" "$BUILD/.config" "$HALFPROC_ROOT/tests/guest/config"
KO="$("$here/kmod.sh" "$flavour")"
phase "build guest tests"
"$HALFPROC_ROOT/tests/build.sh" "$SRC" "$BUILD" "$OUT/guest"
done_phase
phase "build harness"
cargo build -q --release -p halfproc-harness --manifest-path "$HALFPROC_ROOT/Cargo.toml"
HARNESS="$HALFPROC_ROOT/target/release/halfproc-harness"
done_phase
phase "build the runtime for the guest (static)"
# Static glibc binaries: the guest has no shared libraries.
RUSTFLAGS="-C target-feature=+crt-static" cargo build -q --release \
	--manifest-path "$HALFPROC_ROOT/Cargo.toml" --target x86_64-unknown-linux-gnu \
	-p halfproc --example guest_tests --bin halfproc
RT="$HALFPROC_ROOT/target/x86_64-unknown-linux-gnu/release"
done_phase

files=(--file "$KO:/lib/modules/halfproc.ko"
	--file "$RT/examples/guest_tests:/tests/rt/guest_tests"
	--file "$RT/halfproc:/bin/halfproc")
for f in "$OUT"/guest/tests/* "$OUT"/guest/tests/mm/*; do
	[ -f "$f" ] && [ -x "$f" ] || continue
	files+=(--file "$f:/tests/${f#"$OUT"/guest/tests/}")
done
for f in "$OUT"/guest/bench/*; do
	[ -f "$f" ] && [ -x "$f" ] && files+=(--file "$f:/bench/$(basename "$f")")
done
# HALFPROC_GUEST_EXTRA="SRC:DST ...": more files for the initramfs.
for f in ${HALFPROC_GUEST_EXTRA:-}; do
	files+=(--file "$f")
done
# The arguments of the in-guest copy benchmark (bench mode).
printf '%s\n' "${HALFPROC_BENCH_ARGS:---sizes 6..26:2 --reps 3 --placement both}" \
	>"$OUT/bench.args"
files+=(--file "$OUT/bench.args:/etc/bench.args")
"$HARNESS" initramfs --out "$OUT/initramfs-$mode.cpio" --busybox /bin/busybox \
	--init "$HALFPROC_ROOT/tests/guest/init.sh" "${files[@]}"

phase "boot ($flavour, mode $mode, timeout ${timeout}s)"
rc=0
"$HARNESS" run --kernel "$BUILD/arch/x86/boot/bzImage" \
	--initrd "$OUT/initramfs-$mode.cpio" --log "$OUT/$mode.log" \
	--timeout "$timeout" --cpus 2 --memory 4096 ${HALFPROC_SHARE:+--share "$HALFPROC_SHARE"} \
	--append "halfproc.mode=$mode pti=on ${HALFPROC_APPEND:-}" ${HALFPROC_QUIET:+--quiet} || rc=$?
done_phase
exit "$rc"
