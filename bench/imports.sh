#!/usr/bin/env bash
# The import log's cost on `lfm call` of a function that imports pandas and scikit-learn:
# the same call with and without the log (the hidden --no-import-log), alternating, N times
# each; medians of the call's wall time and CPU time (from its Report). On a small shared
# machine both move by several percent from run to run with the load of other work, so where
# valgrind is installed the instructions each call executes (lfm and the interpreter, counted
# by cachegrind) are compared too: a figure the load does not move (V=0 skips it).
# Usage: bash bench/imports.sh   (from the repository root; N=25 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=target/bench-venv-serve
if [ ! -f "$VENV/.complete" ]; then
  python3 -m venv "$VENV" && "$VENV/bin/pip" install -q pandas==2.2.3 scikit-learn==1.5.2 && touch "$VENV/.complete"
fi
cargo build --release -q
LFM=$PWD/target/release/lfm PY=$PWD/$VENV/bin/python N=${N:-25} python3 - <<'PY'
import json, os, shutil, statistics, subprocess, tempfile
lfm, py, n = os.environ["LFM"], os.environ["PY"], int(os.environ["N"])
here = os.path.join(os.getcwd(), "bench")
scratch = tempfile.mkdtemp()
report, history = os.path.join(scratch, "r.json"), os.path.join(scratch, "h.sqlite")
def once(extra):
    subprocess.run([lfm, "call", "--quiet", "--python", py, "--import-module", "--report", report,
                    "--history", history, *extra, "serve_fns.py:heavy_imports"],
                   cwd=here, check=True, stdout=subprocess.DEVNULL)
    with open(report) as handle:
        r = json.load(handle)
    return r["wall_time"], r["cpu_time"]["total"]
once([]); once(["--no-import-log"])  # warm the page cache
runs = {"with": [], "without": []}
for _ in range(n):
    runs["with"].append(once([]))
    runs["without"].append(once(["--no-import-log"]))
for i, what in enumerate(["wall", "cpu"]):
    a = statistics.median(r[i] for r in runs["with"])
    b = statistics.median(r[i] for r in runs["without"])
    # Each pair ran back to back: the median of their differences shrugs off the load's drift.
    paired = statistics.median(w[i] - wo[i] for w, wo in zip(runs["with"], runs["without"]))
    print(f"lfm call of a pandas+sklearn import, median {what} time of {n}: with the import log "
          f"{a*1e3:.0f} ms, without {b*1e3:.0f} ms: {100*(a-b)/b:+.1f}%; median of the paired "
          f"differences {paired*1e3:+.1f} ms = {100*paired/b:+.1f}% (goal <= 3%)")

def instructions(extra):
    """Instructions of the whole call, every process of it, under cachegrind."""
    done = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--trace-children=yes",
                           "--cachegrind-out-file=/dev/null", lfm, "call", "--quiet", "--python", py,
                           "--import-module", "--history", history, *extra, "serve_fns.py:heavy_imports"],
                          cwd=here, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return sum(int(line.split()[-1].replace(",", "")) for line in done.stderr.splitlines() if "I   refs:" in line)

if os.environ.get("V", "1") != "0" and shutil.which("valgrind"):
    a = statistics.median(instructions([]) for _ in range(3))
    b = statistics.median(instructions(["--no-import-log"]) for _ in range(3))
    print(f"instructions (cachegrind, median of 3): with the import log {a/1e9:.3f} G, "
          f"without {b/1e9:.3f} G: {100*(a-b)/b:+.2f}% (goal <= 3%)")
PY
