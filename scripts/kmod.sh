#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Build kmod/ (the Rust module) against the kernel of one flavour:
#   scripts/kmod.sh debug|release|distro [--sabotage|--test-modules]
# prints the path of the .ko.  Builds in a copy outside the repository, so
# the tree stays clean.
# --sabotage builds the test-only twin with the member TLB fan-out disabled
# (cfg halfproc_skip_member_flush): hp_tlb must fail on it.
# --test-modules builds tests/guest/kmods (C, test-only) and prints the path
# of hp_mn_test.ko; the others are beside it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/lib.sh"
flavour="$1"
variant="${2:-}"
SRC="$HALFPROC_CACHE/src/linux"
BUILD="$HALFPROC_CACHE/build-$flavour"
SRCDIR="$HALFPROC_ROOT/kmod" KO=halfproc.ko
case "$variant" in
"") DIR="$HALFPROC_CACHE/kmod-$flavour" skip=0 ;;
--sabotage) DIR="$HALFPROC_CACHE/kmod-$flavour-sabotage" skip=1 ;;
--test-modules)
	DIR="$HALFPROC_CACHE/kmod-$flavour-test-modules" skip=0
	SRCDIR="$HALFPROC_ROOT/tests/guest/kmods" KO=hp_mn_test.ko
	;;
*) die "usage: scripts/kmod.sh debug|release|distro [--sabotage|--test-modules]" ;;
esac
[ -f "$BUILD/.halfproc-key" ] || die "kernel ($flavour) is not built: run scripts/kernel.sh $flavour"
mkdir -p "$DIR"
rsync -a --delete --exclude '*.o' --exclude '*.ko' --exclude '.*.cmd' \
	--exclude '*.mod*' --exclude Module.symvers --exclude modules.order \
	"$SRCDIR/" "$DIR/src/"
RUSTUP_TOOLCHAIN="$RUST_TOOLCHAIN"
export RUSTUP_TOOLCHAIN
phase "build kmod ($flavour${variant:+ $variant})"
if ! make -C "$SRC" O="$BUILD" M="$DIR/src" CLIPPY="${CLIPPY:-1}" \
	HALFPROC_SKIP_MEMBER_FLUSH="$skip" modules >"$DIR/build.log" 2>&1; then
	cat "$DIR/build.log" >&2
	die "building ${SRCDIR#"$HALFPROC_ROOT"/} failed"
fi
if grep -E "^(warning|error)" -A8 "$DIR/build.log" >&2; then
	die "building ${SRCDIR#"$HALFPROC_ROOT"/} printed warnings (clippy is a gate)"
fi
done_phase
echo "$DIR/src/$KO"
