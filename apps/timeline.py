#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Table 1 and a Fig. 14-style timeline from one reconfigurable run
(apps/timeline.sh makes the inputs).

Reads the run's output (stdout and stderr of `dmi run ... APP_reconf` with
APPS_TRACE=1: the apps' "trace EVENT ITER SECONDS NODES" lines, the
runtime's "dmi: rescale before itergroup ..." lines and the report) and the
JSON of `dmi bench` from the same command (memcpy and loopback TCP), and
writes OUT.json and OUT.svg and prints Table 1.

Per reconfiguration between itergroups k and k + 1 (times on node 0's
clock, CLOCK_MONOTONIC):
  checkpoint  from the last iteration of k to "end" of k (every thread has
              written its blocks back with EXCLUSIVE and met at a barrier)
  rescale     from "end" of k to "start" of k + 1 (DMI_rescale's
              controller: barriers, the join's epoch change, spawning)
  restore     from "start" to "restored" of k + 1 on node 0: re-making
              its inputs (rows, matrix, masses, out-degrees, the exchange
              plan) and reading its blocks back
  first iteration excess
              the first iteration of k + 1 (from "restored") minus the
              median of the others of k + 1: where the other nodes' longer
              restores (a joining node fetches pages it never had) show
  total       checkpoint + rescale + restore + excess (excess counted when
              positive): the time the iterations stood still
The runtime's own numbers (its log line) are reported as they are: the join
and leave epoch changes, the pages, bytes and owner entries they moved.
A leave's epoch change overlaps the next itergroup (docs/dmi.md), so it is
not part of "total"; its rate is bytes / leave time.

usage: apps/timeline.py LOG BENCH_JSON OUT_PREFIX
"""
import json
import re
import statistics
import sys

RESCALE = re.compile(
    r"dmi: rescale before itergroup (\d+): nodes \[([\d, ]*)\] -> \[([\d, ]*)\]: "
    r"join ([\d.]+) ms \((\d+) entries moved\), leave ([\d.]+) ms \((\d+) pages, (\d+) bytes, "
    r"(\d+) entries moved\), threads paused ([\d.]+) ms \(barrier C to A\), controller ([\d.]+) ms"
)


def parse(log):
    groups, changes, report = [], [], {}
    for line in log.splitlines():
        f = line.split()
        if len(f) == 5 and f[0] == "trace":
            ev, it, t, nodes = f[1], int(f[2]), float(f[3]), int(f[4])
            if ev == "start":
                groups.append({"nodes": nodes, "start": t, "iters": [], "end": None,
                               "restored": None})
            elif not groups:
                sys.exit(f"timeline: trace {ev} before any itergroup start")
            elif ev == "iter":
                groups[-1]["iters"].append((it, t))
            elif ev == "end":
                groups[-1]["end"] = t
            elif ev == "restored":
                groups[-1]["restored"] = t
            continue
        m = RESCALE.search(line)
        if m:
            g = m.groups()
            changes.append(
                {
                    "before_itergroup": int(g[0]),
                    "nodes_before": len(g[1].split(",")) if g[1] else 0,
                    "nodes_after": len(g[2].split(",")) if g[2] else 0,
                    "join_ms": float(g[3]),
                    "join_entries": int(g[4]),
                    "leave_ms": float(g[5]),
                    "leave_pages": int(g[6]),
                    "leave_bytes": int(g[7]),
                    "leave_entries": int(g[8]),
                    "paused_ms": float(g[9]),
                    "controller_ms": float(g[10]),
                }
            )
            continue
        if len(f) >= 2 and f[0] in ("app", "iterations", "checksum", "itergroups", "time_per_iter"):
            report[f[0]] = f[1]
    return groups, changes, report


def iterations(groups):
    """(iteration, seconds, nodes, itergroup) of every iteration."""
    out = []
    for k, g in enumerate(groups):
        prev = g["restored"] if g["restored"] is not None else g["start"]
        for it, t in g["iters"]:
            out.append((it, t - prev, g["nodes"], k + 1))
            prev = t
    return out


def phys(bench):
    """memcpy (largest size) and loopback TCP bandwidths, MB/s (medians)."""
    by = {}
    for s in bench["physical"]:
        if s["op"] not in by or s["size"] > by[s["op"]]["size"]:
            by[s["op"]] = s
    out = {}
    for op, key in (("memcpy", "memcpy"), ("tcp stream", "tcp_stream"),
                    ("tcp request-response", "tcp_request_response")):
        if op in by:
            out[key] = {"size": by[op]["size"], "median_mb_s": by[op]["median_mb_s"],
                        "max_mb_s": by[op]["max_mb_s"]}
    for n in bench.get("dmi", []):
        for s in n["samples"]:
            if s["op"].startswith("read (remote owner)") and s["size"] == by["memcpy"]["size"]:
                out["dmi_get"] = {"size": s["size"], "median_mb_s": s["median_mb_s"],
                                  "max_mb_s": s["max_mb_s"], "nodes": n["nodes"]}
    out["build"] = bench.get("build")
    return out


def reconfigurations(groups, changes):
    out = []
    for k in range(len(groups) - 1):
        a, b = groups[k], groups[k + 1]
        if not a["iters"] or not b["iters"] or a["end"] is None:
            continue
        rest = [t2 - t1 for (_, t1), (_, t2) in zip(b["iters"], b["iters"][1:])]
        med = statistics.median(rest) if rest else 0.0
        ck = a["end"] - a["iters"][-1][1]
        rs = b["start"] - a["end"]
        if b["restored"] is None:
            sys.exit("timeline: an itergroup without a 'restored' trace")
        first = b["iters"][0][1] - b["restored"]
        r = {
            "after_iteration": a["iters"][-1][0],
            "nodes": [a["nodes"], b["nodes"]],
            "checkpoint_s": ck,
            "rescale_s": rs,
            "restore_s": b["restored"] - b["start"],
            "first_iteration_s": first,
            "median_iteration_after_s": med,
            "excess_s": first - med,
        }
        r["total_s"] = r["checkpoint_s"] + r["rescale_s"] + r["restore_s"] + max(r["excess_s"], 0.0)
        rt = [c for c in changes if c["before_itergroup"] == k + 2]
        if rt:
            r["runtime"] = rt[0]
            if rt[0]["leave_bytes"] and rt[0]["leave_ms"] > 0:
                r["leave_rate_mb_s"] = rt[0]["leave_bytes"] / (rt[0]["leave_ms"] * 1e3)
        out.append(r)
    return out


def svg_frame(size, title):
    """The start of every plot of these scripts: the canvas, the title and
    the two axes. size: (W, H, L, R, T, B), the canvas and its margins."""
    W, H, L, R, T, B = size
    return [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
            f'font-family="sans-serif" font-size="12">',
            f'<rect width="{W}" height="{H}" fill="white"/>',
            f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
            f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
            f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>']


def svg(its, recs, title):
    W, H, L, R, T, B = 760, 380, 70, 20, 40, 50
    xs = [i for i, *_ in its]
    ys = [s * 1e3 for _, s, *_ in its]
    x0, x1 = min(xs) - 1, max(xs) + 1
    y1 = max(ys) * 1.1 if ys else 1.0

    def X(x):
        return L + (x - x0) / (x1 - x0) * (W - L - R)

    def Y(y):
        return H - B - y / y1 * (H - T - B)

    colors = {1: "#1f77b4", 2: "#2ca02c", 3: "#d62728", 4: "#9467bd", 5: "#8c564b"}
    o = svg_frame((W, H, L, R, T, B), title) + [
         f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">iteration</text>',
         f'<text x="16" y="{(T + H - B) / 2}" text-anchor="middle" '
         f'transform="rotate(-90 16 {(T + H - B) / 2})">time per iteration [ms]</text>']
    for k in range(6):
        v = y1 * k / 5
        o.append(f'<line x1="{L - 4}" y1="{Y(v):.1f}" x2="{L}" y2="{Y(v):.1f}" stroke="black"/>')
        o.append(f'<text x="{L - 6}" y="{Y(v) + 4:.1f}" text-anchor="end">{v:.3g}</text>')
    step = max(1, round((x1 - x0) / 10))
    for x in range(max(0, int(x0)), int(x1) + 1, step):
        o.append(f'<text x="{X(x):.1f}" y="{H - B + 16}" text-anchor="middle">{x}</text>')
    for r in recs:
        x = r["after_iteration"] + 0.5
        d = r["nodes"][1] - r["nodes"][0]
        lab = f"{'+' if d > 0 else ''}{d} node{'s' if abs(d) != 1 else ''}: " \
              f"{r['total_s'] * 1e3:.0f} ms"
        o.append(f'<line x1="{X(x):.1f}" y1="{T}" x2="{X(x):.1f}" y2="{H - B}" '
                 f'stroke="gray" stroke-dasharray="4,3"/>')
        o.append(f'<text x="{X(x) + 4:.1f}" y="{T + 12}">{lab}</text>')
    pts = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in zip(xs, ys))
    o.append(f'<polyline points="{pts}" fill="none" stroke="#999"/>')
    for (x, s, n, _), y in zip(its, ys):
        o.append(f'<circle cx="{X(x):.1f}" cy="{Y(y):.1f}" r="3" fill="{colors.get(n, "black")}">'
                 f'<title>iteration {x}: {y:.3f} ms on {n} nodes</title></circle>')
    seen = sorted({n for _, _, n, _ in its})
    for i, n in enumerate(seen):
        o.append(f'<circle cx="{W - R - 90}" cy="{T + 28 + 16 * i}" r="4" fill="{colors.get(n, "black")}"/>')
        o.append(f'<text x="{W - R - 80}" y="{T + 32 + 16 * i}">{n} node{"s" if n > 1 else ""}</text>')
    o.append("</svg>")
    return "\n".join(o) + "\n"


def inputs(doc, who):
    """LOG BENCH_JSON PREFIX from the command line: the log's text, the
    bench JSON, the paths (shared with timeline_yield.py)."""
    if len(sys.argv) != 4:
        sys.exit(doc.strip().splitlines()[-1])
    log_path, bench_path, prefix = sys.argv[1:]
    try:
        return open(log_path).read(), json.load(open(bench_path)), log_path, prefix
    except (OSError, ValueError) as e:
        sys.exit(f"{who}: {e}")


def main():
    log, bench, log_path, prefix = inputs(__doc__, "timeline")
    groups, changes, report = parse(log)
    if not groups or "checksum" not in report:
        sys.exit(f"timeline: {log_path}: no trace lines or no report (APPS_TRACE unset, or the run failed)")
    its = iterations(groups)
    recs = reconfigurations(groups, changes)
    limits = phys(bench)
    for r in recs:
        if "leave_rate_mb_s" in r:
            r["leave_rate_vs_memcpy"] = r["leave_rate_mb_s"] / limits["memcpy"]["median_mb_s"]
            r["leave_rate_vs_tcp_stream"] = r["leave_rate_mb_s"] / limits["tcp_stream"]["median_mb_s"]
    app = report.get("app", "?")
    out = {
        "app": app,
        "report": report,
        "iterations": [{"iteration": i, "seconds": s, "nodes": n, "itergroup": g}
                       for i, s, n, g in its],
        "reconfigurations": recs,
        "physical": limits,
    }
    with open(prefix + ".json", "w") as f:
        json.dump(out, f, indent=1)
    with open(prefix + ".svg", "w") as f:
        f.write(svg(its, recs, f"{app}: time per iteration, 1 -> 3 -> 2 nodes"))
    print(f"Table 1 ({app}; times in ms; the runtime's epoch changes as it logs them)")
    hdr = ["change", "after it.", "checkpoint", "rescale", "restore", "excess", "total",
           "join", "leave", "pages", "bytes", "entries", "leave MB/s"]
    print(" | ".join(hdr))
    for r in recs:
        rt = r.get("runtime", {})
        print(" | ".join([
            f"{r['nodes'][0]} -> {r['nodes'][1]}", str(r["after_iteration"]),
            f"{r['checkpoint_s'] * 1e3:.1f}", f"{r['rescale_s'] * 1e3:.1f}",
            f"{r['restore_s'] * 1e3:.1f}", f"{r['excess_s'] * 1e3:.1f}",
            f"{r['total_s'] * 1e3:.1f}",
            f"{rt.get('join_ms', 0):.1f}", f"{rt.get('leave_ms', 0):.1f}",
            str(rt.get("leave_pages", 0)), str(rt.get("leave_bytes", 0)),
            str(rt.get("join_entries", 0) + rt.get("leave_entries", 0)),
            f"{r['leave_rate_mb_s']:.0f}" if "leave_rate_mb_s" in r else "-",
        ]))
    ph = ", ".join(f"{k} {v['median_mb_s']:.0f} MB/s ({v['size']} B)"
                   for k, v in limits.items() if isinstance(v, dict))
    print(f"same run, medians: {ph}; dmi build {limits.get('build')}")
    for r in recs:
        if "leave_rate_mb_s" in r:
            print(f"{r['nodes'][0]} -> {r['nodes'][1]}: leave moved at {r['leave_rate_mb_s']:.0f} MB/s = "
                  f"{r['leave_rate_vs_memcpy']:.4f} x memcpy, {r['leave_rate_vs_tcp_stream']:.3f} x TCP stream")
    print(f"wrote {prefix}.json, {prefix}.svg")


if __name__ == "__main__":
    main()
