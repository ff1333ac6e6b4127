"""bench/pays.py's workflow through Dask: one worker process with 64 threads (more than the
node's 2 cores), every task in the node's `lfm serve` through LfmPlugin, which admits them by
their memory allocations on the node budget (LFM_NODE_MEMORY) with LFM_SLOTS=64; (a) runs
with LFM_SLOTS=1. Same modes, figures and knobs as bench/pays.py.

  python bench/pays_dask.py LFM [--calls 300] [--hold 2] [--scale 1] [--node-gib 6]
"""
import os
import sqlite3
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import pays  # noqa: E402


def options(mode, category, mib, largest):
    if mode == "b":
        return {"memory": f"{largest + pays.HEADROOM}M", "category": category}
    if mode == "c":
        return {"auto": True, "max_retries": 5, "category": category}
    if mode == "d":
        return {"memory": f"{mib + pays.HEADROOM}M", "category": category}
    return {"category": category}


def run(mode, work, args, budget_mib, scratch):
    import dask
    from distributed import Client, LocalCluster

    import pays_fns
    from lfm.dask import LfmPlugin, reports

    # A serve of this mode's own: its runtime directory, slots, budget and history.
    runtime = os.path.join(scratch, f"run-{mode}")
    os.makedirs(runtime, mode=0o700)
    history = os.path.join(scratch, f"history-{mode}.sqlite")
    os.environ.update(XDG_RUNTIME_DIR=runtime, LFM_SLOTS="1" if mode == "a" else "64",
                      LFM_NODE_MEMORY=f"{budget_mib}M", LFM_HISTORY=history, LFM_BIN=args.lfm,
                      PYTHONPATH=os.pathsep.join(sys.path[:2]))
    largest = max(mib for _, mib in work)
    cluster = LocalCluster(n_workers=1, threads_per_worker=64, processes=True,
                           dashboard_address=":0")
    with cluster, Client(cluster) as client:
        client.register_plugin(LfmPlugin())
        started = time.monotonic()
        futures = []
        for i, (category, mib) in enumerate(work):
            with dask.annotate(executor="lfm", lfm=options(mode, category, mib, largest)):
                futures.append(client.submit(pays_fns.hold, mib, args.hold, key=f"t{i}"))
        failed = 0
        for future in futures:
            try:
                future.result()
            except Exception:  # a call lfm failed: counted, as in pays.py
                failed += 1
        makespan = time.monotonic() - started
        by_key = reports(client)
    with sqlite3.connect(history) as db:
        attempts = db.execute("SELECT count(*) FROM runs").fetchone()[0]
    replies = [{"ok": True, "id": i, "report": by_key[f"t{i}"]}
               for i in range(len(work)) if by_key.get(f"t{i}")]
    row = pays.figures(mode, makespan, replies, budget_mib)
    row.update(failed=failed, retries=attempts - len(work))
    return row, replies


def main():
    args = pays.arguments().parse_args()
    args.lfm = os.path.abspath(args.lfm)
    work = pays.tasks(args.calls, args.scale)
    budget_mib = int(args.node_gib * 1024 / args.scale)
    print(f"Dask, 1 worker x 64 threads: {len(work)} calls, peaks / {args.scale:g}, hold "
          f"{args.hold} s, node {budget_mib} MiB")
    rows, measured = {}, None
    with tempfile.TemporaryDirectory(prefix="lfm-pays-dask-") as scratch:
        for mode in args.modes:
            rows[mode], replies = run(mode, work, args, budget_mib, scratch)
            if mode in "bd":
                measured = replies
    pays.print_rows(rows, args.lfm, work)
    if measured is not None:
        pays.print_schedule(rows, args.lfm, work, measured, args.hold, budget_mib)


if __name__ == "__main__":
    main()
