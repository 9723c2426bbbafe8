#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# apps/reconf-sweep-test.sh: apps/reconf-sweep.sh end to end at a small
# scale on the debug build (Jacobi, sizes 16,64,128, 1 repetition, both
# forms), into out/reconf-sweep-test: the sweep's own check must pass
# (apps/reconf_sweep.py check: every size with its runs, each series' bytes
# growing strictly with the size, a positive rate in the fit of each size's
# fastest run, memcpy and the TCP stream there, 1 leave per reconf run and
# 3 moves per yield run, every checksum agreeing with the serial run's
# through cks-cmp, the SVG well-formed); N-body, PageRank and CG's reconf
# forms at a numbered size must agree with serial.  Then the checker must
# reject copies of that result with one size missing, the bytes not
# growing, a wrong checksum, a fit without a positive rate, no TCP
# bandwidth and a truncated SVG, each for the reason it is given; a
# checker that passed any of them would fail this test.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/../scripts/lib.sh"
out="$here/../out/reconf-sweep-test"
sizes=16,64,128
DMI_PROFILE=debug "$here/reconf-sweep.sh" jacobi --sizes "$sizes" --reps 1 --out "$out" >&2 ||
	die "reconf-sweep: apps/reconf-sweep.sh jacobi --sizes $sizes --reps 1 failed (above)"
json="$out/jacobi.json" svg="$out/jacobi.svg" cks="$here/../out/apps-debug/cks-cmp"
python3 "$here/reconf_sweep.py" check "$json" "$svg" "$sizes" 1 "$cks" >&2 ||
	die "reconf-sweep: the check of $json failed"

# The other reconf forms at a numbered size, 1 -> 3 -> 2 nodes, against serial:
# their itergroups on nodes 1 and 2 learn the size's edge from the checkpoint
# (they never parse argv; before that they ran with an edge of 0 and the
# checksums disagreed).
build="$here/../out/apps-debug" dmi="${CARGO_TARGET_DIR:-$here/../target}/debug/dmi"
for a in nbody:10 pagerank:2048 cg:16; do
	app="${a%:*}" size="${a#*:}"
	make -s -C "$here" O="$build" "$build/serial/$app" >&2
	read -r ref iters < <("$build/serial/$app" "$size" |
		awk '$1 == "checksum" { c = $2 } $1 == "iterations" { n = $2 } END { print c, n }')
	val="$(timeout 300 "$dmi" run -n 1 --grow-at "$((iters / 3)):2" --shrink-at "$((iters * 2 / 3)):1" \
		"$build/dmi/${app}_reconf" "$size" 1 2>/dev/null </dev/null | awk '$1 == "checksum" { print $2 }')" || true
	verdict="$("$cks" "$app" "$ref" "${val:-none}" 2>&1)" ||
		die "reconf-sweep: ${app}_reconf $size 1 -> 3 -> 2: checksum ${val:-none}, serial $ref: $verdict"
	info "reconf-sweep: ${app}_reconf $size 1 -> 3 -> 2: ${verdict#*: }"
done

# The checker on broken copies: each must fail, with its reason in the message.
bad="$out/bad"
mkdir -p "$bad"
python3 - "$json" "$svg" "$bad" <<'PY'
import copy, json, sys
d = json.load(open(sys.argv[1]))
svg = open(sys.argv[2]).read()
out = sys.argv[3]


def write(name, doc):
    json.dump(doc, open(f"{out}/{name}.json", "w"))


x = copy.deepcopy(d)          # size 64 gone from the runs and every series
x["runs"] = [r for r in x["runs"] if r["size"] != 64]
for s in x["series"].values():
    s["per_size"] = [p for p in s["per_size"] if p["size"] != 64]
write("missing-size", x)
x = copy.deepcopy(d)          # the leave moved as much at 128 as at 64
ps = x["series"]["reconf_leave"]["per_size"]
ps[2]["bytes_median"] = ps[1]["bytes_median"]
write("bytes-flat", x)
x = copy.deepcopy(d)          # one run's checksum off in the 6th digit
r = x["runs"][-1]
r["checksum"] = repr(float(r["checksum"]) * (1 + 1e-6))
write("checksum", x)
x = copy.deepcopy(d)          # a fit whose time falls with the bytes
x["series"]["yield_stopped"]["fit_of_minima"]["rate_mb_s"] = None
write("no-rate", x)
x = copy.deepcopy(d)
del x["physical"]["tcp_stream"]
write("no-tcp", x)
open(f"{out}/truncated.svg", "w").write(svg[: len(svg) // 2])
PY
expect_fail() {	# NAME SVG REASON
	local msg
	if msg="$(python3 "$here/reconf_sweep.py" check "$bad/$1.json" "$2" "$sizes" 1 "$cks" 2>&1)"; then
		die "reconf-sweep: the checker passed $bad/$1.json (want a failure: $3)"
	fi
	grep -q -- "$3" <<<"$msg" || die "reconf-sweep: $1: the checker failed, but not for '$3': $msg"
	info "reconf-sweep: the checker rejects $1: $(grep -m1 -- "$3" <<<"$msg" | sed 's/.*json: //')"
}
cp "$json" "$bad/good.json"
expect_fail missing-size "$svg" "size 64: 0 runs, want 1"
expect_fail bytes-flat "$svg" "reconf_leave: bytes do not grow strictly"
expect_fail checksum "$svg" "checksum .* against serial"
expect_fail no-rate "$svg" "yield_stopped: no positive rate"
expect_fail no-tcp "$svg" "no tcp_stream bandwidth"
expect_fail good "$bad/truncated.svg" "truncated.svg: "
info "reconf-sweep: jacobi $sizes swept, checked, and the checker fails on 6 broken copies"
