#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Build kmod/ (the Rust module) against the kernel of one flavour:
#   scripts/kmod.sh debug|release     prints the path of halfproc.ko
# Builds in a copy outside the repository, so the tree stays clean.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/lib.sh"
flavour="$1"
SRC="$HALFPROC_CACHE/src/linux"
BUILD="$HALFPROC_CACHE/build-$flavour"
DIR="$HALFPROC_CACHE/kmod-$flavour"
[ -f "$BUILD/.halfproc-key" ] || die "kernel ($flavour) is not built: run scripts/kernel.sh $flavour"
mkdir -p "$DIR"
rsync -a --delete --exclude '*.o' --exclude '*.ko' --exclude '.*.cmd' \
	--exclude '*.mod*' --exclude Module.symvers --exclude modules.order \
	"$HALFPROC_ROOT/kmod/" "$DIR/src/"
RUSTUP_TOOLCHAIN="$RUST_TOOLCHAIN"
export RUSTUP_TOOLCHAIN
phase "build kmod ($flavour)"
if ! make -C "$SRC" O="$BUILD" M="$DIR/src" CLIPPY="${CLIPPY:-1}" modules \
	>"$DIR/build.log" 2>&1; then
	cat "$DIR/build.log" >&2
	die "building kmod/ failed"
fi
grep -E "^(warning|error)" -A8 "$DIR/build.log" >&2 || true
done_phase
echo "$DIR/src/halfproc.ko"
