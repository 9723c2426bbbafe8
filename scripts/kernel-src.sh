#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Prepare the kernel source tree: import Debian's linux-source-6.12 into a
# git repository at a stable path once, then move it to "base + patches/series"
# touching only the files whose contents differ, so that unchanged files keep
# their mtimes and an incremental build stays incremental.
#
# Prints the path of the source tree on stdout.
#   scripts/kernel-src.sh            the patched tree
#   scripts/kernel-src.sh --stock    a worktree of the unpatched base
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/lib.sh"

SRC="$HALFPROC_CACHE/src/linux"
STOCK="$HALFPROC_CACHE/src/stock"
PATCHES="${HALFPROC_PATCHES:-$HALFPROC_ROOT/patches}"

git_() { git -C "$SRC" -c user.name=halfproc -c user.email=halfproc@localhost "$@"; }

if ! git_ rev-parse -q --verify refs/tags/base >/dev/null 2>&1; then
	phase "import kernel source"
	[ -f "$KERNEL_SRC_TARBALL" ] || die "missing $KERNEL_SRC_TARBALL (run scripts/deps.sh)"
	rm -rf "$SRC"
	mkdir -p "$SRC"
	tar -xaf "$KERNEL_SRC_TARBALL" -C "$SRC" --strip-components=1
	git_ init -q
	git_ add -f -A .
	git_ commit -q -m "base: $(basename "$KERNEL_SRC_TARBALL")"
	git_ tag base
	done_phase
fi

if [ "${1:-}" = --stock ]; then
	[ -d "$STOCK" ] || git_ worktree add -q --detach "$STOCK" base >&2
	echo "$STOCK"
	exit 0
fi

phase "apply patches/series"
# Build the patched tree in a private index, never touching the work tree,
# so a patch that does not apply leaves the tree as it was.
idx="$(mktemp)"
trap 'rm -f "$idx"' EXIT
export GIT_INDEX_FILE="$idx"
git_ read-tree base
n=0
while read -r p; do
	case "$p" in ''|'#'*) continue ;; esac
	[ -f "$PATCHES/$p" ] || die "patches/series names $p, which does not exist"
	if ! out="$(git_ apply --cached --whitespace=nowarn "$PATCHES/$p" 2>&1)"; then
		printf '%s\n' "$out" >&2
		die "patch does not apply: patches/$p"
	fi
	n=$((n + 1))
done <"$PATCHES/series"
tree="$(git_ write-tree)"
unset GIT_INDEX_FILE
want="$(git_ commit-tree -p base -m "base + $n patches" "$tree")"
if [ "$(git_ rev-parse HEAD^{tree})" != "$tree" ]; then
	info "switching source tree to $n patches (only changed files are rewritten)"
	git_ checkout -q --detach "$want"
else
	info "source tree already has these $n patches"
fi
done_phase
echo "$SRC"
