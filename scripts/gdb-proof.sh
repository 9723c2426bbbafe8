#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# gdb on a half-process member (issue 10, defect 5c): boots the debug kernel
# (built by scripts/guest.sh build debug) with the host's gdb and its
# libraries in the guest and runs tests/guest/hp_debug, whose
# gdb_reads_shared_variable_live_and_from_core test skips in the suite's
# guest (no gdb there) and runs here: gdb attached to a member prints and
# sets a shared variable, and gdb prints it again from the member's core.
#   scripts/gdb-proof.sh
# The gdb is Debian's gdb-minimal (no Python: Debian's full gdb dies at start
# without the Python standard library, too big for the initramfs), fetched
# with apt-get download and unpacked under $HALFPROC_CACHE, not installed.
# The guest's console log is out/debug/gdb-proof.log.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/lib.sh"
OUT="$HALFPROC_ROOT/out/debug"
G="$HALFPROC_CACHE/gdb-minimal"
gdb="$G/root/usr/bin/gdb"
if [ ! -x "$gdb" ]; then
	mkdir -p "$G"
	(cd "$G" && apt-get download gdb-minimal >&2) || die "apt-get download gdb-minimal failed"
	dpkg-deb -x "$(ls "$G"/gdb-minimal_*.deb | tail -1)" "$G/root"
fi
[ -x "$gdb" ] || die "no gdb in $G"
# with_libs (scripts/guest.sh) as SRC:DST words, gdb at /usr/bin/gdb.
extra="$(
	echo "$(readlink -f "$gdb"):/usr/bin/gdb"
	for lib in $(ldd "$gdb" | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p; s/^[[:space:]]*\(\/[^ ]*\) (.*/\1/p'); do
		echo "$(readlink -f "$lib"):$lib"
	done | sort -u
)"
rc=0
HALFPROC_GUEST_EXTRA="$(echo "$extra" | tr '\n' ' ')" \
	HALFPROC_APPEND="halfproc.only=hp_debug" \
	"$here/guest.sh" boot debug test 900 || rc=$?
cp "$OUT/test.log" "$OUT/gdb-proof.log"
grep -E '^# gdb: |gdb_reads_shared_variable' "$OUT/gdb-proof.log" || true
grep -q -E '^ok [0-9]+ global\.gdb_reads_shared_variable_live_and_from_core' "$OUT/gdb-proof.log" ||
	die "gdb did not read the shared variable (see $OUT/gdb-proof.log)"
exit "$rc"
