# SPDX-License-Identifier: GPL-2.0
# Shared settings and helpers for the halfproc scripts. Sourced, not run.

HALFPROC_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$HOME/.cargo/bin:$PATH"

# Pinned toolchain. Part of the kernel cache key.
RUST_TOOLCHAIN="${RUST_TOOLCHAIN:-1.95.0}"
BINDGEN_VERSION="${BINDGEN_VERSION:-0.73.2}"
KERNEL_SRC_TARBALL="${KERNEL_SRC_TARBALL:-/usr/src/linux-source-6.12.tar.xz}"

# Everything built lives outside the repository, at stable absolute paths
# (a built tree restored at the same path rebuilds in seconds).
HALFPROC_CACHE="${HALFPROC_CACHE:-/var/cache/halfproc}"
BINDGEN_ROOT="$HALFPROC_CACHE/bindgen-$BINDGEN_VERSION"
export PATH="$BINDGEN_ROOT/bin:$PATH"

_t0=$(date +%s)
_phase_name=""
_phase_t0=0

elapsed() { echo $(($(date +%s) - _t0)); }

phase() {
	_phase_name="$1"
	_phase_t0=$(date +%s)
	printf '[%4ss] ==> %s\n' "$(elapsed)" "$_phase_name" >&2
}

done_phase() {
	printf '[%4ss]     %s: done in %ss\n' "$(elapsed)" "$_phase_name" \
		$(($(date +%s) - _phase_t0)) >&2
}

info() { printf '[%4ss]     %s\n' "$(elapsed)" "$*" >&2; }

die() {
	printf 'halfproc: error: %s\n' "$*" >&2
	exit 1
}

sudo_() {
	if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

apt_ensure() {	# apt_ensure PKG...: install those of them that are not installed
	local p missing=()
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
			missing+=("$p")
	done
	((${#missing[@]})) || return 0
	info "installing: ${missing[*]}"
	sudo_ apt-get update -qq
	DEBIAN_FRONTEND=noninteractive sudo_ apt-get install -y -qq \
		--no-install-recommends "${missing[@]}" >/dev/null
}

