#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Run the kernel's own mm selftests (the subset tests/build.sh builds) on an
# unpatched 6.12 kernel and compare with the last patched run
# (out/debug/test.log, module loaded): normal processes must not notice
# half-processes.  Slow (a second kernel build), so not part of scripts/test.
#   scripts/stock-compare.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/lib.sh"
"$here/deps.sh"
"$here/kernel-src.sh" >/dev/null
REPO="$HALFPROC_CACHE/src/linux"
STOCK="$HALFPROC_CACHE/src/stock"
BUILD="$HALFPROC_CACHE/build-stock"
OUT="$HALFPROC_ROOT/out/stock"
[ -d "$STOCK" ] || git -C "$REPO" worktree add -q --detach "$STOCK" base
mkdir -p "$BUILD" "$OUT"
if [ ! -f "$BUILD/arch/x86/boot/bzImage" ]; then
	phase "build the unpatched kernel"
	frag="$OUT/stock.config"
	grep -v -e HALFPROC -e RUST -e MMU_NOTIFIER "$HALFPROC_ROOT/qemu/config/base.config" >"$frag"
	make -s -C "$STOCK" O="$BUILD" tinyconfig >/dev/null
	"$STOCK/scripts/kconfig/merge_config.sh" -m -O "$BUILD" "$BUILD/.config" \
		"$frag" "$HALFPROC_ROOT/qemu/config/release.config" >/dev/null
	make -s -C "$STOCK" O="$BUILD" olddefconfig >/dev/null
	python3 "$here/check-config.py" "$BUILD/.config" "$frag"
	make -s -C "$STOCK" O="$BUILD" -j"$(($(nproc) + 1))" bzImage headers >"$OUT/build.log" 2>&1 ||
		die "stock kernel build failed: $OUT/build.log"
	done_phase
fi
"$HALFPROC_ROOT/tests/build.sh" "$STOCK" "$BUILD" "$OUT/guest"
cargo build -q --release -p halfproc-harness --manifest-path "$HALFPROC_ROOT/Cargo.toml"
files=()
for f in "$OUT"/guest/tests/mm/*; do
	[ -x "$f" ] && files+=(--file "$f:/tests/mm/$(basename "$f")")
done
cat >"$OUT/init.sh" <<'INIT'
#!/bin/sh
/bin/busybox --install -s
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t tmpfs tmp /tmp
rc=0
echo 0 >/proc/sys/kernel/randomize_va_space
for t in /tests/mm/*; do echo "# running $t"; (cd /tmp && "$t") || rc=1; done
echo "HALFPROC_EXIT=$rc" >/dev/ttyS1
poweroff -f
INIT
H="$HALFPROC_ROOT/target/release/halfproc-harness"
"$H" initramfs --out "$OUT/initramfs.cpio" --busybox /bin/busybox --init "$OUT/init.sh" "${files[@]}"
"$H" run --kernel "$BUILD/arch/x86/boot/bzImage" --initrd "$OUT/initramfs.cpio" \
	--log "$OUT/mm.log" --timeout 900 --cpus 2 --memory 4096 --quiet --append "pti=on" || true
# Compare the mm selftests' TAP lines (timings stripped) between both runs.
norm() { awk '/^# running \/tests\/mm\//{on=1} on' "$1" | grep -E '^(ok|not ok) ' |
	sed -e 's/[0-9]*ns$//' | sort; }
norm "$OUT/mm.log" >"$OUT/stock.tap"
norm "$HALFPROC_ROOT/out/debug/test.log" | grep -v -E ' init\.' >"$OUT/patched.tap"
if diff -u "$OUT/stock.tap" "$OUT/patched.tap" >"$OUT/diff.txt"; then
	info "mm selftests: $(wc -l <"$OUT/stock.tap") results, identical on the stock and the patched kernel"
else
	cat "$OUT/diff.txt"
	die "mm selftests differ between the stock and the patched kernel"
fi
