#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# apps/table2-test.sh: the Table 2 counter (apps/table2.py) on a pair of
# files with known changes, its errors, and docs/apps.md against its output
# for the real programs (the table between <!-- table2 --> and
# <!-- /table2 --> must be exactly what `apps/table2.py --markdown` prints).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/../scripts/lib.sh"
tool="$here/table2.py"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# normal: 6 code lines; reconf: a comment, a blank line and a re-indented
# line (none counts), "b" changed, "x" and "y" added, "e" removed.
printf '%s\n' 'int a; /* one */' '  b(1);' 'c("/* not a comment */");' 'd;' 'e;' 'f;' >"$tmp/n.c"
printf '%s\n' '// new comment' 'int a;' '' '  b(2);' '    c("/* not a comment */");' \
	'x;' '/* a' '   block */ y;' 'd;' 'f;' >"$tmp/r.c"
got="$("$tool" --files "$tmp/n.c" "$tmp/r.c" | tail -1 | awk '{ $1 = ""; print }')"
want=" 6 7 2 1 1 4 -"
[ "$got" = "$want" ] || die "table2: known pair: got '$got', want '$want' (normal reconf added changed removed total yield)"
info "table2: known pair counted as normal/reconf/added/changed/removed/total/yield =$got"
# the yield form: the normal one plus one line and a comment (no change)
{ echo '/* moved */'; sed '2a DMI_yield();' "$tmp/n.c"; } >"$tmp/y.c"
got="$("$tool" --files "$tmp/n.c" "$tmp/r.c" "$tmp/y.c" | tail -1 | awk '{ print $NF }')"
[ "$got" = 1 ] || die "table2: known yield form: got '$got' changed lines, want 1"

# the real yield forms: DMI+half-process is one line in every app
"$tool" | awk 'NR > 1 && $NF != 1 { bad = bad " " $1 "=" $NF } END { if (bad) { print bad; exit 1 } }' >"$tmp/bad" ||
	die "table2: yield forms that are not one line from the normal form:$(cat "$tmp/bad")"
info "table2: every APP_yield.c is APP.c plus one line"

# errors name the problem and fail
if err="$("$tool" nosuchapp 2>&1)"; then die "table2: nosuchapp did not fail"; fi
case "$err" in *nosuchapp.c*"No such file"*) ;; *) die "table2: unclear error: $err" ;; esac

# the docs show the tool's output for the real programs
"$tool" --markdown >"$tmp/table"
sed -n '/<!-- table2 -->/,/<!-- \/table2 -->/p' "$here/../docs/apps.md" | sed '1d;$d' |
	grep -v '^$' >"$tmp/docs" || true
if ! diff -u "$tmp/docs" "$tmp/table" >&2; then
	die "table2: docs/apps.md's Table 2 differs from apps/table2.py --markdown (above)"
fi
info "table2: docs/apps.md matches apps/table2.py ($(($(wc -l <"$tmp/table") - 2)) apps)"
