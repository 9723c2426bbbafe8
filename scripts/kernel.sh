#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Build the patched kernel for one flavour (debug|release|distro), cached.
#
#   scripts/kernel.sh debug|release|distro|stock [--force]
#
# debug and release start from tinyconfig (small, fast to build, for QEMU);
# distro starts from x86_64_defconfig + kvm_guest.config, a general-purpose
# kernel for bare metal that scripts/distro.sh packages.
# stock: the release configuration without the patch series and without
# CONFIG_HALFPROC/RUST (a base-tree worktree), for scripts/stock-compare.sh.
#
# The build tree is $HALFPROC_CACHE/build-<flavour> (a stable absolute path,
# so a rebuild is incremental).  It is skipped entirely when its key (patches,
# config fragments, toolchain and kernel versions) matches the last build.
# Prints the build directory on stdout.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/lib.sh"

flavour="${1:-}"
force="${2:-}"
case "$flavour" in
debug|release|distro|stock) ;;
*) die "usage: scripts/kernel.sh debug|release|distro|stock [--force]" ;;
esac
CFG="$HALFPROC_ROOT/qemu/config"
BUILD="$HALFPROC_CACHE/build-$flavour"
JOBS="${HALFPROC_JOBS:-$(($(nproc) + 1))}"

"$here/deps.sh"
mkdir -p "$BUILD"
if [ "$flavour" = stock ]; then
	SRC="$("$here/kernel-src.sh" --stock)"
	# The release configuration without what only the patched tree has.
	grep -v -e HALFPROC -e RUST -e MMU_NOTIFIER "$CFG/base.config" >"$BUILD/.halfproc-base.config"
	FRAGMENTS=("$BUILD/.halfproc-base.config" "$CFG/release.config")
	PATCH_FILES=()
else
	SRC="$("$here/kernel-src.sh")"
	FRAGMENTS=("$CFG/base.config" "$CFG/$flavour.config")
	if [ "$flavour" = distro ]; then
		FRAGMENTS=("$CFG/distro.config")
		# The release is exactly 6.12.N-halfproc: set, even empty,
		# LOCALVERSION stops setlocalversion appending "+" for a git tree.
		export LOCALVERSION=
	fi
	PATCH_FILES=("$HALFPROC_ROOT/patches/series" "$HALFPROC_ROOT"/patches/*.patch)
fi

toolchain_id() {
	rustc +"$RUST_TOOLCHAIN" --version
	bindgen --version
	gcc --version | head -1
	basename "$KERNEL_SRC_TARBALL"
	stat -c %s "$KERNEL_SRC_TARBALL"
}
config_key="$( (cat "${FRAGMENTS[@]}"; toolchain_id; echo "LOCALVERSION=${LOCALVERSION-unset}") |
	sha256sum | cut -c1-16)"
key="$( (echo "$config_key"; cat "${PATCH_FILES[@]}" /dev/null) | sha256sum | cut -c1-16)"
if [ -z "$force" ] && [ -f "$BUILD/arch/x86/boot/bzImage" ] &&
	[ "$(cat "$BUILD/.halfproc-key" 2>/dev/null)" = "$key" ]; then
	info "kernel ($flavour) is up to date: cache key $key"
	echo "$BUILD"
	exit 0
fi

# The Rust toolchain must be the pinned one, or CONFIG_RUST silently drops.
export RUSTC="$(rustup which --toolchain "$RUST_TOOLCHAIN" rustc)"
RUSTUP_TOOLCHAIN="$RUST_TOOLCHAIN"
export RUSTUP_TOOLCHAIN
MAKE=(make -C "$SRC" O="$BUILD" -s)

if [ "$(cat "$BUILD/.halfproc-config-key" 2>/dev/null)" != "$config_key" ]; then
	start=tinyconfig
	[ "$flavour" = distro ] && start="x86_64_defconfig kvm_guest.config"
	phase "configure ($flavour): $start + fragments + olddefconfig"
	"${MAKE[@]}" rustavailable >/dev/null ||
		die "the Rust toolchain is not usable by the kernel (make rustavailable)"
	# shellcheck disable=SC2086 # two make targets for distro
	"${MAKE[@]}" $start >/dev/null
	"$SRC/scripts/kconfig/merge_config.sh" -m -O "$BUILD" "$BUILD/.config" \
		"${FRAGMENTS[@]}" >/dev/null
	"${MAKE[@]}" olddefconfig >/dev/null
	python3 "$here/check-config.py" "$BUILD/.config" "${FRAGMENTS[@]}"
	echo "$config_key" >"$BUILD/.halfproc-config-key"
	done_phase
fi

phase "build bzImage ($flavour, -j$JOBS)"
log="$BUILD/.halfproc-build.log"
expected="$(cat "$HALFPROC_CACHE/objects-$flavour" 2>/dev/null || echo 0)"
make -C "$SRC" O="$BUILD" -j"$JOBS" bzImage modules headers >"$log" 2>&1 &
pid=$!
"$here/progress.sh" "$pid" "$log" "$expected" &
ppid=$!
rc=0
wait "$pid" || rc=$?
kill "$ppid" 2>/dev/null || true
wait "$ppid" 2>/dev/null || true
if [ "$rc" != 0 ]; then
	grep -E -B3 -A12 "error(\[E[0-9]+\])?:" "$log" | head -60 >&2 || tail -30 "$log" >&2
	die "kernel build ($flavour) failed; full log: $log"
fi
find "$BUILD" -name '*.o' -newer "$BUILD/.halfproc-config-key" | wc -l \
	>"$HALFPROC_CACHE/objects-$flavour.tmp" || true
if [ "$(cat "$HALFPROC_CACHE/objects-$flavour.tmp")" -gt "$expected" ]; then
	mv "$HALFPROC_CACHE/objects-$flavour.tmp" "$HALFPROC_CACHE/objects-$flavour"
fi
echo "$key" >"$BUILD/.halfproc-key"
done_phase
echo "$BUILD"
