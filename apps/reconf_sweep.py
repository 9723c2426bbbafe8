#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Reconfiguration time against the bytes moved, over problem sizes
(apps/reconf-sweep.sh makes the inputs).

  reconf_sweep.py build MANIFEST BENCH_JSON PREFIX
      MANIFEST: one line per run, tab-separated: form (reconf or yield),
      size, repetition, the run's log, the serial checksum, the 1-minute
      load average when the run started.  Parses every log with the
      timeline scripts' parsers (timeline.py: the runtime's "dmi: rescale
      before itergroup" lines of an APP_reconf run and its trace; and
      timeline_yield.py: the "dmi: node F: instance I moved at yield Y"
      lines of a movable APP_yield run), fits time = fixed + bytes / rate by
      least squares over all the runs' points of each series, and writes
      PREFIX.json, PREFIX.svg (log-log: points, the fits, memcpy and the
      loopback TCP stream of BENCH_JSON as time = bytes / bandwidth) and
      prints the tables.
  reconf_sweep.py check JSON SVG SIZES REPS CKS_CMP
      Exit 1, naming each problem, unless JSON has every size of SIZES
      (comma-separated) with REPS runs of each form, the bytes of every
      series grow strictly with the size, the fit over each size's fastest
      run has a positive finite rate (the fit over all points: a warning), memcpy and the TCP stream are there, every run's checksum
      agrees with the serial one (CKS_CMP, apps/common/cks-cmp, run on each
      pair), each reconf run left once and each yield run made 3 moves;
      and SVG is well-formed XML with a point per measurement.

The series:
  reconf_leave   APP_reconf, 1 -> 3 -> 2 nodes: the leave's epoch change
                 as the runtime logs it (ms against the bytes of the pages
                 the leaving node owned)
  yield_stopped  APP_yield, 3 moves per run: the time the instance was
                 stopped against its image's bytes
  yield_move     the same moves: the whole move (checkpoint to commit)
"""
import json
import math
import statistics
import subprocess
import sys
import xml.etree.ElementTree as ET

import timeline
import timeline_yield

SERIES = {
    "reconf_leave": ("reconf", "the _reconf form's leave (runtime's epoch change)", "#1f77b4"),
    "yield_stopped": ("yield", "the _yield form's moves: instance stopped", "#d62728"),
    "yield_move": ("yield", "the _yield form's moves: whole move", "#ff7f0e"),
}


def fail(msg):
    sys.exit(f"reconf-sweep: {msg}")


def read_manifest(path):
    runs = []
    for n, line in enumerate(open(path), 1):
        f = line.rstrip("\n").split("\t")
        if len(f) != 6 or f[0] not in ("reconf", "yield"):
            fail(f"{path}:{n}: want 6 tab-separated fields (form size rep log reference load): {line!r}")
        runs.append({"form": f[0], "size": int(f[1]), "rep": int(f[2]), "log": f[3],
                     "reference": f[4], "load_1min": float(f[5])})
    if not runs:
        fail(f"{path}: no runs")
    return runs


def parse_run(r):
    """Adds the run's report and points ({"bytes", "ms"} per series)."""
    try:
        log = open(r["log"]).read()
    except OSError as e:
        fail(str(e))
    r["points"] = {}
    if r["form"] == "reconf":
        groups, changes, report = timeline.parse(log)
        leaves = [c for c in changes if c["nodes_after"] < c["nodes_before"]]
        r["leaves"] = len(leaves)
        r["itergroups"] = report.get("itergroups")
        r["points"]["reconf_leave"] = [{"bytes": c["leave_bytes"], "ms": c["leave_ms"],
                                        "pages": c["leave_pages"]} for c in leaves]
        # the time the iterations stood still at the leave (timeline.py's "total")
        recs = timeline.reconfigurations(groups, changes) if groups else []
        r["standstill_ms"] = [x["total_s"] * 1e3 for x in recs if x["nodes"][1] < x["nodes"][0]]
    else:
        _, moves, report = timeline_yield.parse(log)
        r["moves"] = len(moves)
        r["points"]["yield_stopped"] = [{"bytes": m["bytes"], "ms": m["stopped_ms"],
                                         "yield": m["yield"]} for m in moves]
        r["points"]["yield_move"] = [{"bytes": m["bytes"], "ms": m["move_ms"],
                                      "yield": m["yield"]} for m in moves]
    r["checksum"] = report.get("checksum")
    r["app"] = report.get("app")
    r["iterations"] = report.get("iterations")
    if r["checksum"] is None:
        fail(f"{r['log']}: no checksum (the run failed?)")


def line(xs, ys):
    """Least squares y = a + b x: a, b, R^2."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    b = sxy / sxx
    a = my - b * mx
    ss_res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys))
    ss_tot = sum((y - my) ** 2 for y in ys)
    return a, b, 1.0 - ss_res / ss_tot if ss_tot > 0 else None


def fit(points):
    """Least squares ms = fixed + bytes / rate: fixed ms, rate MB/s, R^2;
    and, as a second look at proportionality, the exponent k of
    ms ~ bytes^k fitted in log-log (k = 1: proportional; under 1: a fixed
    part; over 1: slower per byte as the bytes grow)."""
    xs = [p["bytes"] for p in points]
    ys = [p["ms"] for p in points]
    n = len(xs)
    if n < 2 or len(set(xs)) < 2:
        return None
    a, b, r2 = line(xs, ys)             # b: ms per byte
    f = {"fixed_ms": a, "ms_per_byte": b, "rate_mb_s": 1.0 / (b * 1e3) if b > 0 else None,
         "r2": r2, "points": n}
    if min(xs) > 0 and min(ys) > 0:
        _, k, r2log = line([math.log(x) for x in xs], [math.log(y) for y in ys])
        f["loglog_exponent"], f["loglog_r2"] = k, r2log
    return f


def per_size(points):
    out = []
    for s in sorted({p["size"] for p in points}):
        ps = [p for p in points if p["size"] == s]
        bs = [p["bytes"] for p in ps]
        ts = [p["ms"] for p in ps]
        med_b, med_t = statistics.median(bs), statistics.median(ts)
        fastest = min(ps, key=lambda p: p["ms"])
        out.append({"size": s, "n": len(ps), "bytes_median": med_b, "bytes_min": min(bs),
                    "bytes_at_min": fastest["bytes"],
                    "bytes_max": max(bs), "ms_min": min(ts), "ms_median": med_t,
                    "rate_mb_s": med_b / (med_t * 1e3) if med_t > 0 else None})
    return out


def build(manifest, bench_path, prefix):
    runs = read_manifest(manifest)
    try:
        limits = timeline.phys(json.load(open(bench_path)))
    except (OSError, ValueError, KeyError) as e:
        fail(f"{bench_path}: {e}")
    for r in runs:
        parse_run(r)
    apps = {r["app"] for r in runs}
    if len(apps) != 1:
        fail(f"the logs are of {sorted(map(str, apps))}: want one app")
    app = apps.pop()
    mc, tcp = limits["memcpy"]["median_mb_s"], limits["tcp_stream"]["median_mb_s"]
    series = {}
    for name, (form, _, _) in SERIES.items():
        pts = [dict(p, size=r["size"], rep=r["rep"]) for r in runs if r["form"] == form
               for p in r["points"].get(name, [])]
        if not pts:
            continue
        ps = per_size(pts)
        # all points, and (less disturbed by the other work on the cores)
        # the fastest point of each size
        f = fit(pts)
        fm = fit([{"bytes": p["bytes_at_min"], "ms": p["ms_min"]} for p in ps])
        for x in (f, fm):
            if x and x["rate_mb_s"]:
                x["rate_vs_memcpy"] = x["rate_mb_s"] / mc
                x["rate_vs_tcp_stream"] = x["rate_mb_s"] / tcp
        series[name] = {"form": form, "points": pts, "fit": f, "fit_of_minima": fm, "per_size": ps}
    loads = [r["load_1min"] for r in runs]
    doc = {"app": app, "sizes": sorted({r["size"] for r in runs}),
           "reps": max(r["rep"] for r in runs), "forms": sorted({r["form"] for r in runs}),
           "load_1min": {"min": min(loads), "median": statistics.median(loads), "max": max(loads)},
           "physical": limits, "series": series,
           "runs": [{k: v for k, v in r.items() if k != "points"} for r in runs]}
    with open(prefix + ".json", "w") as f:
        json.dump(doc, f, indent=1)
    with open(prefix + ".svg", "w") as f:
        f.write(svg(doc))
    report(doc)
    print(f"wrote {prefix}.json, {prefix}.svg")


def report(doc):
    ph = doc["physical"]
    mc, tcp = ph["memcpy"]["median_mb_s"], ph["tcp_stream"]["median_mb_s"]
    ld = doc["load_1min"]
    print(f"{doc['app']}: sizes {','.join(map(str, doc['sizes']))}, {doc['reps']} rep(s); "
          f"memcpy {mc:.0f} MB/s, TCP stream {tcp:.0f} MB/s (medians, {ph['memcpy']['size']} B, "
          f"same command); load average (1 min) {ld['min']:.1f}-{ld['max']:.1f}, "
          f"median {ld['median']:.1f}")
    for name, s in doc["series"].items():
        print(f"\n{name}: {SERIES[name][1]} (times in ms)")
        print("size | points | bytes (median) | bytes min-max | min | median | MB/s (median bytes / median time)")
        for p in s["per_size"]:
            rate = f"{p['rate_mb_s']:.0f}" if p["rate_mb_s"] else "-"
            print(f"{p['size']} | {p['n']} | {p['bytes_median']:.0f} | {p['bytes_min']}-{p['bytes_max']} | "
                  f"{p['ms_min']:.2f} | {p['ms_median']:.2f} | {rate}")
        for what, f in (("fit over all points", s["fit"]), ("fit over each size's fastest", s["fit_of_minima"])):
            if not f:
                print(f"{what}: too few distinct byte counts")
                continue
            if not f["rate_mb_s"]:
                print(f"{what}: fixed {f['fixed_ms']:.2f} ms, slope {f['ms_per_byte']:.3g} ms/byte (not positive)")
            else:
                r2 = f"{f['r2']:.4f}" if f["r2"] is not None else "-"
                print(f"{what} ({f['points']}): fixed {f['fixed_ms']:.2f} ms, rate {f['rate_mb_s']:.0f} MB/s "
                      f"(= {f['rate_vs_memcpy']:.4f} x memcpy, {f['rate_vs_tcp_stream']:.3f} x TCP stream), "
                      f"R^2 {r2}")
            if "loglog_exponent" in f:
                print(f"  log-log: time ~ bytes^{f['loglog_exponent']:.2f} (R^2 {f['loglog_r2']:.4f})")


def svg(doc):
    W, H, L, R, T, B = 760, 480, 80, 20, 40, 120
    pts = [p for s in doc["series"].values() for p in s["points"] if p["bytes"] > 0 and p["ms"] > 0]
    if not pts:
        fail("no points to plot (no leaves or moves in the logs)")
    ph = doc["physical"]
    refs = [("memcpy", ph["memcpy"]["median_mb_s"]), ("loopback TCP stream", ph["tcp_stream"]["median_mb_s"])]
    bx = [p["bytes"] for p in pts]
    x0 = math.floor(math.log10(min(bx) / 1.5))
    x1 = math.ceil(math.log10(max(bx) * 1.5))
    ty = [p["ms"] for p in pts]
    y1 = math.ceil(math.log10(max(ty) * 1.5))
    # the references' times at the smallest size set the bottom (clipped at 6 decades)
    yref = min(min(bx) / (bw * 1e3) for _, bw in refs)
    y0 = max(math.floor(math.log10(min(min(ty), yref))), y1 - 6)

    def X(b):
        return L + (math.log10(b) - x0) / (x1 - x0) * (W - L - R)

    def Y(ms):
        v = min(max(math.log10(ms), y0), y1)
        return H - B - (v - y0) / (y1 - y0) * (H - T - B)

    def unit(b):
        for u, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
            if b >= k:
                return f"{b / k:g} {u}"
        return f"{b:g} B"

    title = (f"{doc['app']}: reconfiguration time against bytes moved "
             f"(sizes {','.join(map(str, doc['sizes']))}, {doc['reps']} rep(s))")
    o = timeline.svg_frame((W, H, L, R, T, B), title) + [
         f'<text x="{(L + W - R) / 2}" y="{H - B + 34}" text-anchor="middle">bytes moved (log)</text>',
         f'<text x="16" y="{(T + H - B) / 2}" text-anchor="middle" '
         f'transform="rotate(-90 16 {(T + H - B) / 2})">time [ms] (log)</text>']
    for e in range(x0, x1 + 1):
        o.append(f'<line x1="{X(10 ** e):.1f}" y1="{H - B}" x2="{X(10 ** e):.1f}" y2="{H - B + 4}" stroke="black"/>')
        o.append(f'<text x="{X(10 ** e):.1f}" y="{H - B + 17}" text-anchor="middle">{unit(10 ** e)}</text>')
    for e in range(y0, y1 + 1):
        o.append(f'<line x1="{L - 4}" y1="{Y(10 ** e):.1f}" x2="{L}" y2="{Y(10 ** e):.1f}" stroke="black"/>')
        o.append(f'<line x1="{L}" y1="{Y(10 ** e):.1f}" x2="{W - R}" y2="{Y(10 ** e):.1f}" stroke="#eee"/>')
        o.append(f'<text x="{L - 6}" y="{Y(10 ** e) + 4:.1f}" text-anchor="end">{10.0 ** e:g}</text>')
    grid = [10 ** (x0 + (x1 - x0) * k / 100) for k in range(101)]
    legend = []
    for (name, bw), dash in zip(refs, ("2,3", "8,4")):
        ys = [b / (bw * 1e3) for b in grid]
        keep = [(b, y) for b, y in zip(grid, ys) if 10 ** y0 <= y <= 10 ** y1]
        if len(keep) > 1:
            o.append('<polyline points="' + " ".join(f"{X(b):.1f},{Y(y):.1f}" for b, y in keep) +
                     f'" fill="none" stroke="gray" stroke-dasharray="{dash}"/>')
        legend.append((f"{name}: {bw:.0f} MB/s (bytes / bandwidth)", "gray", dash, False))
    for name, s in doc["series"].items():
        color = SERIES[name][2]
        labs = []
        for key, dash, what in (("fit", "none", "all"), ("fit_of_minima", "5,3", "fastest per size, dashed")):
            f = s.get(key)
            if f and f["rate_mb_s"]:
                keep = [(b, f["fixed_ms"] + b * f["ms_per_byte"]) for b in grid]
                keep = [(b, y) for b, y in keep if 10 ** y0 <= y <= 10 ** y1]
                if len(keep) > 1:
                    o.append('<polyline points="' + " ".join(f"{X(b):.1f},{Y(y):.1f}" for b, y in keep) +
                             f'" fill="none" stroke="{color}" stroke-dasharray="{dash}"/>')
                labs.append(f"{f['fixed_ms']:.1f} ms + bytes / {f['rate_mb_s']:.0f} MB/s ({what})")
            else:
                labs.append(f"no positive rate ({what})")
        lab = f"{name}: " + "; ".join(labs)
        legend.append((lab, color, None, True))
        for p in s["points"]:
            if p["bytes"] > 0 and p["ms"] > 0:
                o.append(f'<circle cx="{X(p["bytes"]):.1f}" cy="{Y(p["ms"]):.1f}" r="3" fill="none" '
                         f'stroke="{color}"><title>{name} size {p["size"]} rep {p["rep"]}: '
                         f'{p["bytes"]} bytes, {p["ms"]:.3f} ms</title></circle>')
    for i, (lab, color, dash, dot) in enumerate(legend):
        y = H - B + 52 + 14 * i
        if dot:
            o.append(f'<circle cx="{L + 10}" cy="{y - 4}" r="3" fill="none" stroke="{color}"/>')
        else:
            o.append(f'<line x1="{L}" y1="{y - 4}" x2="{L + 20}" y2="{y - 4}" stroke="{color}" '
                     f'stroke-dasharray="{dash}"/>')
        o.append(f'<text x="{L + 28}" y="{y}">{lab}</text>')
    o.append("</svg>")
    return "\n".join(o) + "\n"


def check(json_path, svg_path, sizes_arg, reps_arg, cks_cmp):
    errs = []
    try:
        sizes = [int(s) for s in sizes_arg.split(",")]
        reps = int(reps_arg)
    except ValueError:
        fail(f"check: sizes '{sizes_arg}' and reps '{reps_arg}' must be numbers")
    try:
        doc = json.load(open(json_path))
    except (OSError, ValueError) as e:
        fail(f"check: {e}")
    app = doc.get("app")
    runs = doc.get("runs", [])
    for form in doc.get("forms", []):
        for s in sizes:
            n = len([r for r in runs if r["form"] == form and r["size"] == s])
            if n != reps:
                errs.append(f"{form} size {s}: {n} runs, want {reps}")
    if not doc.get("forms"):
        errs.append("no forms (no runs)")
    for r in runs:
        what = f"{r['form']} size {r['size']} rep {r['rep']}"
        if r["form"] == "reconf" and (r.get("leaves") != 1 or str(r.get("itergroups")) != "3"):
            errs.append(f"{what}: {r.get('leaves')} leaves, {r.get('itergroups')} itergroups (want 1, 3)")
        if r["form"] == "yield" and r.get("moves") != 3:
            errs.append(f"{what}: {r.get('moves')} moves (want 3)")
        p = subprocess.run([cks_cmp, str(app), str(r["reference"]), str(r.get("checksum"))],
                           capture_output=True, text=True)
        if p.returncode != 0:
            errs.append(f"{what}: checksum {r.get('checksum')} against serial {r['reference']}: "
                        f"{(p.stdout + p.stderr).strip()}")
    want = {n for n, (form, _, _) in SERIES.items() if form in doc.get("forms", [])}
    series = doc.get("series", {})
    if set(series) != want:
        errs.append(f"series {sorted(series)}, want {sorted(want)}")
    npts = 0
    for name, s in series.items():
        ps = s.get("per_size", [])
        got = [p["size"] for p in ps]
        if got != sizes:
            errs.append(f"{name}: sizes {got}, want {sizes}")
        bs = [p["bytes_median"] for p in ps]
        if any(b <= 0 for b in bs) or any(a >= b for a, b in zip(bs, bs[1:])):
            errs.append(f"{name}: bytes do not grow strictly with the size: {bs}")
        # The fit of each size's fastest run must give a positive rate; one
        # run stalled by the other work on the cores can tip the all-points
        # fit (N-body: a 493 ms stop among 10-25 ms ones), so that is a warning.
        f = s.get("fit_of_minima")
        if not f or not f.get("rate_mb_s") or not math.isfinite(f["rate_mb_s"]) or f["rate_mb_s"] <= 0:
            errs.append(f"{name}: no positive rate in the fit of each size's fastest run: {f}")
        f = s.get("fit")
        if not f or not f.get("rate_mb_s"):
            print(f"reconf-sweep: check: {json_path}: warning: {name}: no positive rate in the fit "
                  f"over all points (stalled runs?): {f}", file=sys.stderr)
        npts += len([p for p in s.get("points", []) if p["bytes"] > 0 and p["ms"] > 0])
    ph = doc.get("physical", {})
    for k in ("memcpy", "tcp_stream"):
        if not ph.get(k, {}).get("median_mb_s", 0) > 0:
            errs.append(f"physical: no {k} bandwidth")
    try:
        root = ET.parse(svg_path).getroot()
        circles = root.findall(".//{http://www.w3.org/2000/svg}circle")
        if len(circles) < npts:
            errs.append(f"{svg_path}: {len(circles)} circles for {npts} points")
    except (OSError, ET.ParseError) as e:
        errs.append(f"{svg_path}: {e}")
    for e in errs:
        print(f"reconf-sweep: check: {json_path}: {e}", file=sys.stderr)
    if errs:
        sys.exit(1)
    print(f"reconf-sweep: check: {json_path}: {len(runs)} runs, sizes {sizes_arg}, "
          f"{len(series)} series, checksums agree, SVG well-formed")


def main():
    a = sys.argv[1:]
    if a and a[0] == "build" and len(a) == 4:
        build(*a[1:])
    elif a and a[0] == "check" and len(a) == 6:
        check(*a[1:])
    else:
        sys.exit("usage: reconf_sweep.py build MANIFEST BENCH_JSON PREFIX | "
                 "check JSON SVG SIZES REPS CKS_CMP")


if __name__ == "__main__":
    main()
