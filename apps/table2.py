#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Table 2 of the half-process paper, counted from the sources: the lines
added, changed and removed to make each normal DMI program (apps/dmi/APP.c)
reconfigurable (apps/dmi/APP_reconf.c), and to make it movable in a
movable run (apps/dmi/APP_yield.c: the half-process form, DMI_yield()).

The rule: both files lose their comments (/* ... */ and // ..., outside
string and character literals) and blank lines, and each remaining line is
compared with its whitespace collapsed (re-indenting is not a change).  The
two line sequences are diffed (difflib, no junk heuristic); a hunk that
replaces a lines by b lines counts min(a, b) changed lines and the rest as
added (b > a) or removed (a > b); pure insertions are added, pure deletions
removed.  "total" is added + changed + removed; "normal" and "reconf" are the
line counts of the two forms under the same rule.  "yield" is the total of
the same count from APP.c to APP_yield.c (DMI+half-process).

usage: apps/table2.py [--markdown] [APP...]      (default: every pair APP.c,
       APP_reconf.c in apps/dmi)
       apps/table2.py --files NORMAL RECONF [YIELD] (one pair, for the tests)
"""
import argparse
import difflib
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent


def code_lines(text):
    """The lines of C source text without comments and blank lines,
    whitespace collapsed."""
    out, cur, i, n = [], [], 0, len(text)
    in_block = False
    while i < n:
        c = text[i]
        if in_block:
            if text.startswith("*/", i):
                in_block = False
                i += 2
                cur.append(" ")
                continue
            if c == "\n":
                out.append("".join(cur))
                cur = []
            i += 1
            continue
        if text.startswith("/*", i):
            in_block = True
            i += 2
            continue
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            cur.append(text[i : j + 1])
            i = j + 1
            continue
        if c == "\n":
            out.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    out.append("".join(cur))
    lines = (" ".join(line.split()) for line in out)
    return [line for line in lines if line]


def count(normal, reconf):
    a, b = code_lines(normal), code_lines(reconf)
    added = changed = removed = 0
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        na, nb = i2 - i1, j2 - j1
        if op == "replace":
            changed += min(na, nb)
            added += max(nb - na, 0)
            removed += max(na - nb, 0)
        elif op == "insert":
            added += nb
        elif op == "delete":
            removed += na
    return {
        "normal": len(a),
        "reconf": len(b),
        "added": added,
        "changed": changed,
        "removed": removed,
        "total": added + changed + removed,
    }


COLUMNS = ["normal", "reconf", "added", "changed", "removed", "total", "yield"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--markdown", action="store_true", help="a Markdown table")
    ap.add_argument("--files", nargs="+", metavar="FILE", help="NORMAL RECONF [YIELD]")
    ap.add_argument("apps", nargs="*")
    args = ap.parse_args()
    rows = []
    if args.files:
        if args.apps:
            ap.error("--files takes no APP")
        if len(args.files) not in (2, 3):
            ap.error("--files takes NORMAL RECONF [YIELD]")
        files = list(map(pathlib.Path, args.files)) + [None]
        pairs = [(args.files[0], files[0], files[1], files[2])]
    else:
        names = args.apps or sorted(
            p.name[: -len("_reconf.c")]
            for p in (HERE / "dmi").glob("*_reconf.c")
            if (HERE / "dmi" / (p.name[: -len("_reconf.c")] + ".c")).exists()
        )
        d = HERE / "dmi"
        pairs = [(a, d / f"{a}.c", d / f"{a}_reconf.c", d / f"{a}_yield.c") for a in names]
    for name, normal, reconf, moved in pairs:
        try:
            c = count(normal.read_text(), reconf.read_text())
            c["yield"] = "-"
            if moved is not None and (args.files or moved.exists()):
                c["yield"] = count(normal.read_text(), moved.read_text())["total"]
            rows.append((name, c))
        except OSError as e:
            sys.exit(f"table2: {name}: {e.filename}: {e.strerror}")
    if not rows:
        sys.exit("table2: no APP_reconf.c in apps/dmi")
    if args.markdown:
        print("| app | " + " | ".join(COLUMNS) + " |")
        print("|---" * (len(COLUMNS) + 1) + "|")
        for name, c in rows:
            print(f"| {name} | " + " | ".join(str(c[k]) for k in COLUMNS) + " |")
    else:
        print(f"{'app':<10}" + "".join(f"{k:>9}" for k in COLUMNS))
        for name, c in rows:
            print(f"{name:<10}" + "".join(f"{c[k]:>9}" for k in COLUMNS))


if __name__ == "__main__":
    main()
