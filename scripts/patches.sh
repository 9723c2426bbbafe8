#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The edit loop for the C patch series (patches/*.patch + patches/series):
#
#   scripts/patches.sh checkout   a kernel worktree ($HALFPROC_CACHE/src/dev)
#                                 on branch "halfproc": base + one commit per
#                                 patch; edit with git commit --fixup and
#                                 git rebase -i --autosquash base
#   scripts/patches.sh export     write the branch back to patches/ (stable
#                                 output: zero commit ids, no dates of note,
#                                 no signature) and check it
#   scripts/patches.sh check      the kernel's checkpatch.pl --strict on every
#                                 patch; exit 1 on any error or warning
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/lib.sh"
SRC="$HALFPROC_CACHE/src/linux"
DEV="${HALFPROC_DEV_TREE:-$HALFPROC_CACHE/src/dev}"
P="$HALFPROC_ROOT/patches"
git_() { git -C "$1" -c user.name="halfproc developers" -c user.email=halfproc@localhost "${@:2}"; }

check() {
	"$here/kernel-src.sh" >/dev/null
	local bad=0 p out
	while read -r p; do
		case "$p" in ''|'#'*) continue ;; esac
		# Nothing is ignored: each patch that adds a file also adds it to
		# the series' MAINTAINERS entry.
		if ! out="$("$SRC/scripts/checkpatch.pl" --no-tree --strict --quiet \
			"$P/$p" 2>&1)"; then
			printf '%s\n%s\n' "checkpatch: $p" "$out" >&2
			bad=1
		fi
	done <"$P/series"
	[ "$bad" = 0 ] || die "checkpatch found problems in the series"
	info "checkpatch --strict: $(grep -c -v -e '^$' -e '^#' "$P/series") patches clean"
}

case "${1:-}" in
checkout)
	"$here/kernel-src.sh" >/dev/null
	[ -d "$DEV" ] || git_ "$SRC" worktree add -q --detach "$DEV" base
	git_ "$DEV" checkout -q -B halfproc base
	while read -r p; do
		case "$p" in ''|'#'*) continue ;; esac
		git_ "$DEV" am -q "$P/$p" || die "patches/$p does not apply (git -C $DEV am --abort)"
	done <"$P/series"
	info "$DEV: branch halfproc = base + $(git -C "$DEV" rev-list --count base..halfproc) commits"
	;;
export)
	[ -d "$DEV" ] || die "no development tree at $DEV: run scripts/patches.sh checkout"
	rm -f "$P"/*.patch
	git_ "$DEV" format-patch -q --no-signature --zero-commit -o "$P" base..halfproc
	(cd "$P" && ls -1 ./*.patch | sed 's|^\./||' >series)
	info "exported $(wc -l <"$P/series") patches"
	check
	;;
check) check ;;
*) die "usage: scripts/patches.sh checkout|export|check (see the header of the script)" ;;
esac
