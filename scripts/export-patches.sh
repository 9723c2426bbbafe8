#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Developer tool: regenerate patches/ from the development branch of the
# kernel tree ($HALFPROC_CACHE/src/dev, a git worktree on branch "halfproc"
# whose history is base + one commit per patch), then run checkpatch on them.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/lib.sh"
DEV="${HALFPROC_DEV_TREE:-$HALFPROC_CACHE/src/dev}"
[ -d "$DEV" ] || die "no development tree at $DEV (git -C $HALFPROC_CACHE/src/linux worktree add ../dev halfproc)"
rm -f "$HALFPROC_ROOT"/patches/*.patch
git -C "$DEV" format-patch -q --no-signature --zero-commit -o "$HALFPROC_ROOT/patches" base..halfproc
(cd "$HALFPROC_ROOT/patches" && ls -1 ./*.patch | sed 's|^\./||' >series)
if [ "${1:-}" != "--no-check" ]; then
	"$DEV/scripts/checkpatch.pl" --no-tree --quiet --ignore FILE_PATH_CHANGES \
		"$HALFPROC_ROOT"/patches/*.patch || die "checkpatch found problems"
fi
info "exported $(wc -l <"$HALFPROC_ROOT/patches/series") patches"
