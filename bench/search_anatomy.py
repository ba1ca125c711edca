#!/usr/bin/python3
"""Where a search's time went: reads `distir search --log-candidates LOG` (and, optionally,
the search's --json result, for K and the objective's answer) and prints

- the evaluation's thread-seconds by each axis of the strategy (tp, pp, dp, schedule,
  recomputation, ZeRO), and the refinement's per worker;
- by distance of the candidate's step from the best one's;
- how tight the lower bounds were (time bound / step, memory bound / peak), by ZeRO stage
  and recomputation;
- how many of the evaluated candidates exact bounds would have pruned: a candidate outside
  the answer whose optimistic point (its step time or its peak, or both, put in place of its
  bound) ranks after the K-th best point and is dominated by a point of the Pareto set.

The answer here is recomputed from the log's figures for the `time` objective (the figures
the search ranked by: composed estimates where composed). Usage:
    bench/search_anatomy.py LOG [RESULT.json]
"""
import json
import sys
from collections import defaultdict


def load(path):
    points, refines = [], []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                o = json.loads(line)
            except ValueError as e:
                sys.exit("%s:%d: not JSON: %s" % (path, n, e))
            (refines if "refine_s" in o else points).append(o)
    return points, refines


def axes(p):
    """The strategy's axes from its printed form (search_candidate_format)."""
    a = {}
    for tok in p["strategy"].split():
        k, _, v = tok.partition("=")
        a[k] = v if v else "on"
    a["schedule"] = a.get("schedule", "default").split(":")[0]
    for flag in ("sp", "overlap"):
        a.setdefault(flag, "off")
    return a


def table(title, points, key, order=None):
    """Count and thread-seconds per key; most thread-seconds first, or in the given order."""
    groups = defaultdict(lambda: [0, 0.0])
    for p in points:
        g = groups[key(p)]
        g[0] += 1
        g[1] += p["eval_s"]
    print(title)
    print("  %-14s %8s %10s %9s" % ("value", "count", "thread-s", "mean s"))
    rows = sorted(groups.items(), key=lambda kv: -kv[1][1])
    if order is not None:
        rows = sorted(groups.items(), key=lambda kv: order.index(kv[0]))
    for k, (n, t) in rows:
        print("  %-14s %8d %10.1f %9.3f" % (k, n, t, t / n))


def pareto(points):
    """The (step, peak) Pareto set of the fitting points, ties by index (the search's order)."""
    out, least = [], None
    for p in sorted(points, key=lambda p: (p["step_time_s"], p["peak_memory_bytes"], p["index"])):
        if least is None or p["peak_memory_bytes"] < least:
            out.append(p)
            least = p["peak_memory_bytes"]
    return out


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    points, refines = load(sys.argv[1])
    k = 10
    if len(sys.argv) == 3:
        with open(sys.argv[2]) as f:
            k = json.load(f).get("top_k", k)
    ok = [p for p in points if p["status"] == "ok"]
    total = sum(p["eval_s"] for p in points)
    print("evaluated: %d candidates (%d fit, %d composed, %d simulated in full after a failed"
          " composition check), %.1f thread-seconds"
          % (len(points), len(ok), sum(p["composed"] for p in points),
             sum(p.get("unsteady", False) for p in points), total))
    for r in sorted(refines, key=lambda r: r["worker"]):
        print("refined: worker %d, %d points, %.1f s" % (r["worker"], r["refined"], r["refine_s"]))
    if not ok:
        return
    for ax in ("tp", "pp", "dp", "schedule", "recompute", "zero"):
        table("by %s" % ax, points, lambda p, ax=ax: axes(p).get(ax, "-"))
    best = min(p["step_time_s"] for p in ok)

    bins = ["< %g x best" % e for e in (1.05, 1.1, 1.2, 1.5, 2, 4)] + [">= 4 x best"]

    def distance(p):
        x = p["step_time_s"] / best
        for i, edge in enumerate((1.05, 1.1, 1.2, 1.5, 2, 4)):
            if x < edge:
                return bins[i]
        return bins[-1]
    table("by step / best step (best %.4g s)" % best, ok, distance, bins)

    print("bounds (fitting points simulated in full): time bound / step, memory bound / peak")
    tight = defaultdict(list)
    for p in ok:
        if not p["composed"] and p["step_time_s"] > 0 and p["peak_memory_bytes"] > 0:
            a = axes(p)
            tight[(a.get("zero", "0"), a.get("recompute", "none"))].append(
                (p["time_bound_s"] / p["step_time_s"], p["memory_bound_bytes"] / p["peak_memory_bytes"]))
    print("  %-20s %6s %10s %10s %10s %10s" % ("zero, recompute", "count", "time mean", "time min",
                                               "mem mean", "mem min"))
    for key, v in sorted(tight.items()):
        print("  %-20s %6d %10.3f %10.3f %10.3f %10.3f"
              % ("%s, %s" % key, len(v), sum(x[0] for x in v) / len(v), min(x[0] for x in v),
                 sum(x[1] for x in v) / len(v), min(x[1] for x in v)))

    front = pareto(ok)
    top = sorted(ok, key=lambda p: (p["step_time_s"], p["index"]))[:k]
    kth = top[-1]["step_time_s"]
    answer = {p["index"] for p in front} | {p["index"] for p in top}

    def prunable(t, m):
        return t > kth and any(q["step_time_s"] <= t and q["peak_memory_bytes"] <= m for q in front)
    print("the answer: top %d (K-th best %.4g s) and a %d-point Pareto set" % (k, kth, len(front)))
    for name, tm in (("an exact time bound", lambda p: (p["step_time_s"], p["memory_bound_bytes"])),
                     ("an exact memory bound", lambda p: (p["time_bound_s"], p["peak_memory_bytes"])),
                     ("both exact", lambda p: (p["step_time_s"], p["peak_memory_bytes"]))):
        sel = [p for p in points if p["index"] not in answer and p["status"] in ("ok", "out_of_memory")
               and prunable(*tm(p))]
        print("with %s: %d of the %d evaluated candidates prunable (%.1f thread-seconds)"
              % (name, len(sel), len(points), sum(p["eval_s"] for p in sel)))


if __name__ == "__main__":
    main()
