#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Check that every option of the config fragments survived olddefconfig.

    check-config.py .config fragment...

Kconfig silently drops options whose dependencies are missing (CONFIG_RUST
without a usable rustc, say).  Exit 1 listing every option that differs.
Fragments are read in order and a later one overrides an earlier one, as
merge_config.sh merges them (debug.config may turn on what base.config
turns off).
"""
import re
import sys


def parse(path):
    opts = {}
    for line in open(path):
        line = line.strip()
        m = re.match(r"^(CONFIG_[A-Za-z0-9_]+)=(.*)$", line)
        if m:
            opts[m.group(1)] = m.group(2)
            continue
        m = re.match(r"^# (CONFIG_[A-Za-z0-9_]+) is not set$", line)
        if m:
            opts[m.group(1)] = "n"
    return opts


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: check-config.py .config fragment...")
    have = parse(sys.argv[1])
    # As merge_config.sh merges them: a later fragment overrides an earlier.
    wanted = {}
    for frag in sys.argv[2:]:
        for opt, want in parse(frag).items():
            wanted[opt] = (want, frag)
    bad = []
    for opt, (want, frag) in wanted.items():
        got = have.get(opt, "n")
        if got != want:
            bad.append(f"  {opt}: wanted {want}, got {got}  ({frag})")
    if bad:
        print("halfproc: error: config options dropped or changed by olddefconfig:",
              file=sys.stderr)
        print("\n".join(bad), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
