#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Install everything the build needs on a fresh Debian 12 machine.
# Idempotent: every step checks first and does nothing when satisfied.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"
# Entry points run this once and export HALFPROC_DEPS_DONE for their children.
[ -n "${HALFPROC_DEPS_DONE:-}" ] && exit 0

APT_PKGS=(bc bison flex libelf-dev libssl-dev cpio busybox-static libclang-dev
	clang qemu-system-x86 linux-source-6.12 xz-utils python3 make gcc
	kmod rsync libc6-dev pkg-config git openmpi-bin libopenmpi-dev slurm-wlm munge
	gzip bzip2 coreutils stress-ng)

phase "apt packages"
apt_ensure "${APT_PKGS[@]}"
done_phase

phase "rust toolchain $RUST_TOOLCHAIN"
if ! command -v rustup >/dev/null; then
	curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal \
		--default-toolchain none
	export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! rustup run "$RUST_TOOLCHAIN" rustc --version >/dev/null 2>&1 ||
	! rustup component list --toolchain "$RUST_TOOLCHAIN" --installed |
	grep -q '^rust-src'; then
	rustup toolchain install "$RUST_TOOLCHAIN" --profile minimal \
		--component rust-src,clippy,rustfmt
fi
done_phase

phase "bindgen-cli $BINDGEN_VERSION"
if ! "$BINDGEN_ROOT/bin/bindgen" --version 2>/dev/null | grep -q "$BINDGEN_VERSION"; then
	rustup run "$RUST_TOOLCHAIN" cargo install --locked --quiet \
		--root "$BINDGEN_ROOT" bindgen-cli --version "$BINDGEN_VERSION"
fi
done_phase
