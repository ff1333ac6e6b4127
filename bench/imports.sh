#!/usr/bin/env bash
# The import log's cost on `lfm call` of a function that imports pandas and scikit-learn:
# the same call with and without --no-import-log, alternating, N times each.
# Usage: bash bench/imports.sh   (from the repository root; N=15 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=target/bench-venv-serve
if [ ! -f "$VENV/.complete" ]; then
  python3 -m venv "$VENV" && "$VENV/bin/pip" install -q pandas==2.2.3 scikit-learn==1.5.2 && touch "$VENV/.complete"
fi
cargo build --release -q
LFM=$PWD/target/release/lfm PY=$PWD/$VENV/bin/python N=${N:-15} python3 - <<'PY'
import os, statistics, subprocess, time
lfm, py, n = os.environ["LFM"], os.environ["PY"], int(os.environ["N"])
here = os.path.join(os.getcwd(), "bench")
def once(extra):
    t = time.perf_counter()
    subprocess.run([lfm, "call", "--quiet", "--python", py, "--import-module", *extra, "serve_fns.py:heavy_imports"],
                   cwd=here, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t
once([]); once(["--no-import-log"])  # warm the page cache
with_log, without = [], []
for _ in range(n):
    with_log.append(once([]))
    without.append(once(["--no-import-log"]))
a, b = statistics.median(with_log), statistics.median(without)
print(f"lfm call of a pandas+sklearn import, median of {n}: with the import log {a*1e3:.0f} ms, "
      f"without {b*1e3:.0f} ms: {100*(a-b)/b:+.1f}% (goal <= 3%)")
PY
