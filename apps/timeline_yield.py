#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The timeline of a movable run of an app's one-line form (dmi/APP_yield.c).

Input: the run's output with DMI_TRACE_YIELDS=1 ("dmi: trace yield RANK N
SECONDS" per yield of every rank), the nodes' move lines ("dmi: node F:
instance I moved at yield Y to node T: pid A -> B (BYTES bytes, checkpoint
C us, stopped S us, move M us)") and the app's report; and the `dmi bench`
JSON of the same command (memcpy and loopback TCP). Every rank starts on
the node of its number; the moves say where it runs after each yield.
The apps yield at the top of each iteration and the trace line is printed
before a move, so iteration y (from 1) is the time from yield y to yield
y+1: a move at yield y and iteration y's work; the last iteration, after
the last yield, has no trace that ends it.  Its time = the slowest rank's
(they meet in barriers). Writes PREFIX.json and PREFIX.svg (timeline.py's plot: one
dashed line per yield that moved ranks, labelled with the change in nodes
in use and the longest time a moved rank was stopped).

usage: timeline_yield.py LOG BENCH_JSON PREFIX
"""
import json
import re
import sys

from timeline import inputs, phys, svg

TRACE = re.compile(r"^dmi: trace yield (\d+) (\d+) ([0-9.]+)$")
MOVE = re.compile(r"^dmi: node (\d+): instance (\d+) moved at yield (\d+) to node (\d+): "
                  r".*\((\d+) bytes, checkpoint (\d+) us, stopped (\d+) us, move (\d+) us\)$")


def parse(log):
    yields, moves, report = {}, [], {}
    for line in log.splitlines():
        m = TRACE.match(line)
        if m:
            yields.setdefault(int(m[1]), {})[int(m[2])] = float(m[3])
            continue
        m = MOVE.match(line)
        if m:
            f, i, y, t, b, c, s, mv = map(int, m.groups())
            moves.append({"rank": i, "from": f, "to": t, "yield": y, "bytes": b,
                          "checkpoint_ms": c / 1e3, "stopped_ms": s / 1e3, "move_ms": mv / 1e3,
                          "mb_s": b / mv if mv else 0.0})
            continue
        f = line.split()
        if f and f[0] == "app" and len(f) % 2 == 0:
            report.update(zip(f[::2], f[1::2]))  # app A impl I ranks N size S
        elif len(f) == 2 and f[0] in ("checksum", "iterations", "time_per_iter"):
            report[f[0]] = f[1]
    return yields, moves, report


def placement(ranks, moves, last):
    """Nodes in use after each yield 0..last (every rank starts on its own node)."""
    where = {r: r for r in ranks}
    used = [len(set(where.values()))]
    by_yield = {}
    for m in moves:
        by_yield.setdefault(m["yield"], []).append(m)
    for y in range(1, last + 1):
        for m in by_yield.get(y, []):
            where[m["rank"]] = m["to"]
        used.append(len(set(where.values())))
    return used


def main():
    log, bench, log_path, prefix = inputs(__doc__, "timeline_yield")
    yields, moves, report = parse(log)
    if not yields or "checksum" not in report:
        sys.exit(f"timeline_yield: {log_path}: no yield traces or no report "
                 "(DMI_TRACE_YIELDS unset, or the run failed)")
    last = min(max(ys) for ys in yields.values())
    used = placement(sorted(yields), moves, last)
    # Iteration y runs from yield y to yield y+1, with the placement after yield y.
    its = [(y, max(ys[y + 1] - ys[y] for ys in yields.values()), used[y], 1)
           for y in range(1, last)]
    recs = []
    for y in sorted({m["yield"] for m in moves}):
        at = [m for m in moves if m["yield"] == y]
        recs.append({"at_yield": y, "after_iteration": y - 1, "nodes": [used[y - 1], used[y]],
                     "total_s": max(m["stopped_ms"] for m in at) / 1e3,
                     "moves": at, "bytes": sum(m["bytes"] for m in at)})
    limits = phys(bench)
    app = report.get("app", "?")
    with open(prefix + ".json", "w") as f:
        json.dump({"app": app, "report": report, "moves": moves, "changes": recs,
                   "iterations": [{"iteration": i, "seconds": s, "nodes": n} for i, s, n, _ in its],
                   "physical": limits}, f, indent=1)
    # The placements in order (3 -> 1 -> 3 -> 2): repeats only where they follow each other.
    path = [n for k, n in enumerate(used) if k == 0 or n != used[k - 1]]
    with open(prefix + ".svg", "w") as f:
        f.write(svg(its, recs, f"{app}, one-line form (DMI_yield): time per iteration, "
                    f"{' -> '.join(map(str, path))} nodes"))
    mc, tcp = limits["memcpy"]["median_mb_s"], limits["tcp_stream"]["median_mb_s"]
    print(f"{app}: moves of the one-line form (times in ms; memcpy {mc:.0f} MB/s, "
          f"TCP stream {tcp:.0f} MB/s, medians of the same command)")
    print("yield | rank | node | bytes | checkpoint | stopped | move | MB/s | x memcpy | x TCP")
    for m in moves:
        print(f"{m['yield']} | {m['rank']} | {m['from']} -> {m['to']} | {m['bytes']} | "
              f"{m['checkpoint_ms']:.1f} | {m['stopped_ms']:.1f} | {m['move_ms']:.1f} | "
              f"{m['mb_s']:.0f} | {m['mb_s'] / mc:.3f} | {m['mb_s'] / tcp:.2f}")
    for r in recs:
        per = [s for i, s, *_ in its if i >= r["at_yield"]][:5]
        print(f"at yield {r['at_yield']}: {r['nodes'][0]} -> {r['nodes'][1]} nodes in use, "
              f"{len(r['moves'])} rank(s), {r['bytes']} bytes, longest stop {r['total_s'] * 1e3:.1f} ms; "
              f"next iterations {', '.join(f'{s * 1e3:.1f}' for s in per)} ms")
    print(f"checksum {report['checksum']}; wrote {prefix}.json, {prefix}.svg")


if __name__ == "__main__":
    main()
