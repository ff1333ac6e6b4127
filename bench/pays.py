"""What sizing buys (issue 32): one workflow run through `lfm serve` four ways on one node budget.

The calls follow the bioblast trace (Tovar et al.; ../shared/data/traces/bioblast.csv): every
26th task in file order, 300 tasks, each holding its trace peak (MB / SCALE, in MiB) for HOLD
seconds. The node's budget is NODE_GIB / SCALE GiB, so the ratios are the unscaled node's.

  (a) one call at a time (the whole node per call: --slots 1)
  (b) a fixed allocation, the largest peak of the workflow, for every call
  (c) lfm's default sizing: "auto", from a history that starts empty, with retries
  (d) the oracle: each call its own peak

Each call's memory limit gets HEADROOM MiB over the trace value in (b) and (d) (what the forked
interpreter's own pages add to a call's cgroup). Prints makespan, retries, memory utilisation of
the node (used: sum of each call's peak x wall / (budget x makespan); allocated: the same with
allocations) and the speed-ups, and `lfm simulate`'s prediction of (c) over (b) on the same tasks.

  python bench/pays.py LFM [--calls 300] [--hold 2] [--scale 1] [--node-gib 6] [--modes abcd]
"""
import argparse
import csv
import json
import math
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TRACE = os.path.join(HERE, "..", "..", "shared", "data", "traces", "bioblast.csv")
HEADROOM = 24


def tasks(calls, scale):
    with open(TRACE) as handle:
        rows = list(csv.DictReader(handle))
    step = max(1, len(rows) // calls)
    picked = rows[::step][:calls]
    return [(r["category"], max(1, math.ceil(float(r["memory"]) / scale))) for r in picked]


def requests(mode, work, hold, largest):
    out = []
    for i, (category, mib) in enumerate(work):
        request = {"id": i, "function": "pays_fns.py:hold", "args": [mib, hold],
                   "import_module": True, "category": category}
        if mode == "b":
            request["limits"] = {"memory": f"{largest + HEADROOM}M"}
        elif mode == "c":
            request["auto"] = True
            request["max_retries"] = 5
        elif mode == "d":
            request["limits"] = {"memory": f"{mib + HEADROOM}M"}
        out.append(request)
    return out


def serve(lfm, python, mode, work, args, budget_mib, scratch):
    slots = "1" if mode == "a" else "64"
    history = os.path.join(scratch, f"history-{mode}.sqlite")
    command = [lfm, "serve", "--python", python, "--node-memory", f"{budget_mib}M",
               "--slots", slots, "--history", history, "--cache-dir", os.path.join(scratch, "cache"),
               "--no-learn"]
    largest = max(mib for _, mib in work)
    lines = "".join(json.dumps(r) + "\n" for r in requests(mode, work, args.hold, largest))
    started = time.monotonic()
    done = subprocess.run(command, input=lines, capture_output=True, text=True, cwd=HERE)
    makespan = time.monotonic() - started
    replies = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if len(replies) != len(work):
        sys.exit(f"mode {mode}: {len(replies)} replies for {len(work)} calls\n{done.stderr[-2000:]}")
    return makespan, replies


def figures(mode, makespan, replies, budget_mib):
    failed = [r for r in replies if not r.get("ok")]
    retries = sum(max(0, r.get("attempts", 1) - 1) for r in replies)
    budget = budget_mib << 20
    used = sum(r["report"]["memory"]["peak_bytes"] * r["report"]["wall_time"]
               for r in replies if r.get("report"))
    allocated = sum(r["report"]["allocation"]["memory_bytes"] * r["report"]["wall_time"]
                    for r in replies if r.get("report"))
    waits = sorted(r["report"]["allocation"]["queue_wait_seconds"] for r in replies if r.get("report"))
    return {"mode": mode, "makespan": makespan, "failed": len(failed), "retries": retries,
            "used": used / (budget * makespan), "allocated": allocated / (budget * makespan),
            "wait_p50": waits[len(waits) // 2]}


def simulated_speedup(lfm, work):
    """`lfm simulate`'s throughput of the default strategy against a fixed largest-peak
    allocation on the same tasks, in the same order."""
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as handle:
        writer = csv.writer(handle)
        writer.writerow(["category", "memory"])
        writer.writerows(work)
    out = subprocess.run([lfm, "simulate", "--trace", handle.name, "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    os.unlink(handle.name)
    memory = json.loads(out)["memory"]
    by_name = {row["strategy"]: row for row in memory}
    return by_name["best-so-far"]["throughput"] / by_name["fixed"]["throughput"]


def arguments():
    """The knobs this bench and bench/pays_dask.py share."""
    parser = argparse.ArgumentParser()
    parser.add_argument("lfm")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--hold", type=float, default=2.0)
    parser.add_argument("--scale", type=float, default=1)
    parser.add_argument("--node-gib", type=float, default=6)
    parser.add_argument("--modes", default="abcd")
    return parser


def main():
    parser = arguments()
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    args.lfm = os.path.abspath(args.lfm)
    work = tasks(args.calls, args.scale)
    budget_mib = int(args.node_gib * 1024 / args.scale)
    largest = max(mib for _, mib in work)
    print(f"{len(work)} calls (bioblast, every {7754 // args.calls}th task), peaks / {args.scale:g}: "
          f"largest {largest} MiB, median {sorted(m for _, m in work)[len(work) // 2]} MiB; "
          f"hold {args.hold} s each; node {budget_mib} MiB (= {args.node_gib:g} GiB / {args.scale:g})")
    rows = {}
    measured = None
    with tempfile.TemporaryDirectory(prefix="lfm-pays-") as scratch:
        for mode in args.modes:
            makespan, replies = serve(args.lfm, args.python, mode, work, args, budget_mib, scratch)
            rows[mode] = figures(mode, makespan, replies, budget_mib)
            if mode in "bd":
                measured = replies
    print_rows(rows, args.lfm, work)
    if measured is not None:
        print_schedule(rows, args.lfm, work, measured, args.hold, budget_mib)


def scheduled(lfm, work, replies, hold, budget_mib):
    """`lfm simulate --schedule-memory`'s makespans for these calls on this node (2 cores, 64
    slots): each call's peak and CPU time as a run that gave each call room measured them (the
    forked interpreter's pages and the kernel zeroing the memory are the call's too), then its
    hold. Keyed as the modes."""
    by_id = {r["id"]: r["report"] for r in replies if r.get("report")}
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as handle:
        writer = csv.writer(handle)
        writer.writerow(["category", "memory", "cpu_time", "wall_time"])
        for i, (category, mib) in enumerate(work):
            report = by_id.get(i, {})
            peak = report.get("memory", {}).get("peak_bytes", (mib + HEADROOM) << 20) / (1 << 20)
            cpu = report.get("cpu_time", {}).get("total", 0.0)
            writer.writerow([category, f"{max(peak, mib + HEADROOM):.1f}", f"{cpu:.4f}",
                             f"{cpu + hold:.4f}"])
    out = subprocess.run([lfm, "simulate", "--trace", handle.name, "--strategy", "best-so-far",
                          "--schedule-memory", str(budget_mib), "--schedule-cores", "2",
                          "--schedule-slots", "64", "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    os.unlink(handle.name)
    timelines = json.loads(out)["schedule"]
    return {"a": timelines[0]["makespan"], "b": timelines[1]["makespan"],
            "c": timelines[2]["makespan"], "d": timelines[3]["makespan"]}


def print_schedule(rows, lfm, work, replies, hold, budget_mib):
    predicted = scheduled(lfm, work, replies, hold, budget_mib)
    print("lfm simulate --schedule-memory (the calls in time on the node, CPU shared):")
    for mode, row in rows.items():
        print(f"  ({mode}) predicted {predicted[mode]:7.1f} s, measured {row['makespan']:7.1f} s "
              f"({row['makespan'] / predicted[mode] - 1:+.1%})")
    if "b" in rows and "c" in rows:
        model = predicted["b"] / predicted["c"]
        measured = rows["b"]["makespan"] / rows["c"]["makespan"]
        print(f"  (c) vs (b): predicted {model:.2f}x, measured {measured:.2f}x "
              f"({measured / model - 1:+.1%}; goal within 15%)")


def print_rows(rows, lfm, work):
    names = {"a": "(a) one at a time", "b": "(b) fixed largest peak", "c": "(c) lfm sizing (auto)",
             "d": "(d) oracle"}
    print(f"{'':26} {'makespan s':>10} {'failed':>6} {'retries':>7} {'mem used':>8} "
          f"{'allocated':>9} {'wait p50 s':>10}")
    for mode, row in rows.items():
        print(f"{names[mode]:26} {row['makespan']:10.1f} {row['failed']:6d} {row['retries']:7d} "
              f"{row['used']:8.1%} {row['allocated']:9.1%} {row['wait_p50']:10.2f}")
    if "c" not in rows:
        return
    c = rows["c"]["makespan"]
    for other, goal in (("b", ">= 1.5x"), ("a", ">= 4x")):
        if other in rows:
            print(f"(c) vs {names[other]}: {rows[other]['makespan'] / c:.2f}x faster (goal {goal})")
    if "d" in rows:
        print(f"(c) vs oracle: {c / rows['d']['makespan']:.2f}x the oracle's makespan (goal <= 1.25x)")
    if "b" in rows:
        predicted = simulated_speedup(lfm, work)
        measured = rows["b"]["makespan"] / c
        print(f"lfm simulate predicts (c) {predicted:.2f}x faster than (b); measured {measured:.2f}x "
              f"({measured / predicted - 1:+.1%}; goal within 15%)")


if __name__ == "__main__":
    main()
