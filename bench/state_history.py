#!/usr/bin/env python3
"""Soak of the history's retention (issue 34), run by bench/state.sh.

Makes (once, cached) a history of RUNS calls over CATEGORIES categories as `lfm call` records
them: a run row, its whole Report (the Report of a real `lfm run`, plus an import log of 18
modules, ~3 KB), a `calls` row and 18 `call_imports` rows each; one module in a thousand is not
in the closure. The rows are written by SQLite itself into a file lfm made (its schema). Then
copies it and prints: the file's size, `lfm usage` (all, and one category) and `lfm size`
times, `lfm history --prune`, the size after, and whether `lfm usage` answers the same.
"""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time

LFM, DIRECTORY, RUNS, CATEGORIES, REPORT = sys.argv[1:6]
RUNS, CATEGORIES = int(RUNS), int(CATEGORIES)
MODULES = [
    ("numpy", "numpy==2.1.3"), ("numpy.core", "numpy==2.1.3"), ("numpy.linalg", "numpy==2.1.3"),
    ("pandas", "pandas==2.2.3"), ("pandas.core.frame", "pandas==2.2.3"),
    ("pandas.io.parsers", "pandas==2.2.3"), ("dateutil", "python-dateutil==2.9.0.post0"),
    ("dateutil.parser", "python-dateutil==2.9.0.post0"), ("pytz", "pytz==2024.2"),
    ("six", "six==1.16.0"), ("yaml", "PyYAML==6.0.2"), ("json", None), ("csv", None),
    ("workflow", None), ("workflow.helpers", None), ("scipy", "scipy==1.14.1"),
    ("scipy.stats", "scipy==1.14.1"), ("plugins.fast", None),
]


def lfm(*args):
    started = time.perf_counter()
    done = subprocess.run([LFM, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"lfm {' '.join(args)} failed: {done.stderr}")
    return done.stdout, time.perf_counter() - started


def make(path):
    """The history, written by SQLite in one go into a file lfm created."""
    trace = path + ".csv"
    with open(trace, "w") as f:
        f.write("category,cores,memory\nseed,1,1\n")
    lfm("history", "--history", path, "--import", trace)
    os.remove(trace)
    report = json.load(open(REPORT))
    report["imports"] = {"modules": [
        {"name": m, "file": f"/venv/lib/python3.11/site-packages/{m.replace('.', '/')}.py",
         "found": True, **({"distribution": d} if d else {})} for m, d in MODULES]}
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("PRAGMA synchronous=OFF")
    db.execute("DELETE FROM runs")
    db.execute("CREATE TEMP TABLE modules (seq INTEGER, module TEXT, distribution TEXT)")
    db.executemany("INSERT INTO modules VALUES (?, ?, ?)",
                   [(i, m, d) for i, (m, d) in enumerate(MODULES)])
    head, tail = json.dumps(report).split('"wall_time":', 1)
    db.execute(f"""
        WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {RUNS})
        INSERT INTO runs (id, category, time, exit, exceeded, memory_mb, cores, disk_mb,
                          wall_time, memory_limit_mb, sized, report)
        SELECT i, 'c' || (i % {CATEGORIES}), 1.7e9 + i, 'normal', '',
               100 + (i * 7919) % 1000, 1, NULL, 10, NULL, 0, '{{}}'
        FROM n""")
    db.execute("""INSERT INTO reports (run_id, report)
                  SELECT id, ? || '"wall_time":' || (id % 97) || ',' || ? FROM runs""",
               (head, tail.split(",", 1)[1]))
    db.execute("""INSERT INTO calls (run_id, target, mode, closure_id, preloaded)
                  SELECT id, 'workflow.py:f_' || category, 'slice', NULL, '[]' FROM runs""")
    db.execute("""INSERT INTO call_imports (run_id, seq, module, distribution, found, missed)
                  SELECT r.id, m.seq, m.module, m.distribution, 1,
                         m.module = 'plugins.fast' AND r.id % 1000 = 0
                  FROM runs r, modules m""")
    db.commit()
    db.execute("PRAGMA journal_mode=WAL")
    db.close()


def main():
    cached = os.path.join(DIRECTORY, f"imports-{RUNS}-{CATEGORIES}.sqlite")
    if not os.path.exists(cached + ".done"):
        started = time.perf_counter()
        make(cached)
        open(cached + ".done", "w").close()
        print(f"  made in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    path = os.path.join(DIRECTORY, "soak.sqlite")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    shutil.copy(cached, path)
    size = lambda: sum(os.path.getsize(path + s) for s in ("", "-wal") if os.path.exists(path + s))
    one = ["--category", "c7"]
    print(f"# {RUNS:,} calls over {CATEGORIES} categories, 18 import rows each")
    print(f"  history before retention      {size() / 1e6:9.1f} MB")
    # The answers before retention, once per cached history (on a million calls they take
    # minutes: the import rows are what retention folds).
    answers = cached + ".usage.json"
    if not os.path.exists(answers):
        before = {}
        for name, extra in (("all", []), ("c7", one)):
            out, took = lfm("usage", "--history", cached, "--format", "json", *extra)
            before[name] = {"answer": json.loads(out), "ms": took * 1000}
        json.dump(before, open(answers, "w"))
    before = json.load(open(answers))
    for name in ("all", "c7"):
        print(f"  lfm usage {name:<4} before          {before[name]['ms']:9.0f} ms")
    before = {name: value["answer"] for name, value in before.items()}
    _, took = lfm("size", "--history", path, "--category", "c7")
    print(f"  lfm size before               {took * 1000:9.1f} ms")
    out, took = lfm("history", "--history", path, "--prune")
    print(f"  lfm history --prune           {took:9.1f} s   ({out.strip().split(': ', 1)[1]})")
    print(f"  history after retention       {size() / 1e6:9.1f} MB   (goal <= 50 MB)")
    for name, extra in (("all", []), ("c7", one)):
        out, took = lfm("usage", "--history", path, "--format", "json", *extra)
        same = "unchanged" if json.loads(out) == before[name] else "CHANGED"
        print(f"  lfm usage {name:<4} after           {took * 1000:9.0f} ms   answers {same}")
    _, took = lfm("size", "--history", path, "--category", "c7")
    print(f"  lfm size after                {took * 1000:9.1f} ms")


main()
