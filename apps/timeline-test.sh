#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# apps/timeline-test.sh: apps/timeline.sh (and timeline-yield.sh, below) end to end at the small size on
# the debug build (CG: 1 node, +2 at check 20, -1 at check 50): the JSON
# must show two reconfigurations 1 -> 3 and 3 -> 2 after the right
# iterations, every iteration once with its node count, the leave's bytes,
# memcpy and TCP rates, and the run's checksum must agree with the serial
# one (cks-cmp); the SVG must be well-formed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/../scripts/lib.sh"
out="$here/../out"
DMI_PROFILE=debug TIMELINE_BENCH_SIZES=65536 "$here/timeline.sh" cg small 20 50 >&2 ||
	die "timeline: apps/timeline.sh cg small failed"
make -s -C "$here" O="$out/apps" all >&2
ref="$("$out/apps/serial/cg" small | awk '$1 == "checksum" { print $2 }')"
python3 - "$out/timeline/cg-small.json" "$out/timeline/cg-small.svg" <<'PY' || die "timeline: cg-small.json is wrong (above)"
import json, sys, xml.etree.ElementTree as E
d = json.load(open(sys.argv[1]))
E.parse(sys.argv[2])
its = d["iterations"]
n = int(d["report"]["iterations"])
assert [i["iteration"] for i in its] == list(range(1, n + 1)), "iterations missing or repeated"
r = d["reconfigurations"]
assert [x["nodes"] for x in r] == [[1, 3], [3, 2]], [x["nodes"] for x in r]
# check k happens before iteration k: grow after 19 iterations, shrink after 48 (the 50th call, in the second itergroup, ends it)
assert [x["after_iteration"] for x in r] == [19, 48], [x["after_iteration"] for x in r]
assert {i["nodes"] for i in its if i["iteration"] <= 19} == {1}
assert {i["nodes"] for i in its if 19 < i["iteration"] <= 48} == {3}
assert {i["nodes"] for i in its if i["iteration"] > 48} == {2}
assert r[1]["runtime"]["leave_bytes"] > 0 and r[1]["leave_rate_mb_s"] > 0
assert all(x["total_s"] > 0 for x in r)
assert d["physical"]["memcpy"]["median_mb_s"] > 0 and d["physical"]["tcp_stream"]["median_mb_s"] > 0
PY
got="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["report"]["checksum"])' "$out/timeline/cg-small.json")"
"$out/apps/cks-cmp" cg "$ref" "$got" >&2 || die "timeline: checksum $got, serial $ref"
info "timeline: cg small 1 -> 3 -> 2 traced, JSON and SVG written, checksum agrees"

# The one-line form's timeline (apps/timeline-yield.sh): Jacobi on 1 node
# from yield 1, 3 from yield 13, 2 from yield 26; the script itself checks
# the 5 moves and the checksum against the normal form.
DMI_PROFILE=debug TIMELINE_BENCH_SIZES=65536 "$here/timeline-yield.sh" jacobi small 13 26 >&2 ||
	die "timeline: apps/timeline-yield.sh jacobi small failed"
python3 - "$out/timeline/jacobi-small-yield.json" "$out/timeline/jacobi-small-yield.svg" <<'PY' || die "timeline: jacobi-small-yield.json is wrong (above)"
import json, sys, xml.etree.ElementTree as E
d = json.load(open(sys.argv[1]))
title = E.parse(sys.argv[2]).getroot().find("{http://www.w3.org/2000/svg}text").text
assert title.endswith("3 -> 1 -> 3 -> 2 nodes"), title
its = d["iterations"]
n = int(d["report"]["iterations"])
# iteration y runs from yield y to yield y+1: 1..n-1, each once (the last one ends untraced)
assert [i["iteration"] for i in its] == list(range(1, n)), "iterations missing or repeated"
c = d["changes"]
assert [(x["at_yield"], x["after_iteration"], x["nodes"]) for x in c] == \
    [(1, 0, [3, 1]), (13, 12, [1, 3]), (26, 25, [3, 2])], c
assert {i["nodes"] for i in its if i["iteration"] < 13} == {1}
assert {i["nodes"] for i in its if 13 <= i["iteration"] < 26} == {3}
assert {i["nodes"] for i in its if i["iteration"] >= 26} == {2}
assert len(d["moves"]) == 5 and all(m["bytes"] > 0 and m["stopped_ms"] > 0 for m in d["moves"])
assert d["physical"]["memcpy"]["median_mb_s"] > 0 and d["physical"]["tcp_stream"]["median_mb_s"] > 0
PY
info "timeline: jacobi's one-line form 3 -> 1 -> 3 -> 2 nodes traced, JSON and SVG written, checksum agrees"
