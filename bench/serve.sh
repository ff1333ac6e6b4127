#!/usr/bin/env bash
# lfm serve (per-call cgroups and Reports) against a bare fork-per-call loop, a cold
# interpreter per call and a ProcessPoolExecutor, at equal concurrency; lfm call against
# lfm run -- python -c; and first/later calls of __main__ and installed-package functions through
# lfm.Executor against a ProcessPoolExecutor (bench/serve_warm.py).
# Usage: bash bench/serve.sh   (from the repository root; CALLS=N to change the call count)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=target/bench-venv-serve
WANT="pandas==2.2.3 scikit-learn==1.5.2 cloudpickle==3.1.2"
if [ "$(cat "$VENV/.complete" 2>/dev/null)" != "$WANT" ]; then
  rm -rf "$VENV"
  python3 -m venv "$VENV" && "$VENV/bin/pip" install -q $WANT && echo "$WANT" > "$VENV/.complete"
fi
cargo build --release -q
"$VENV/bin/python" bench/serve_bench.py "$PWD/target/release/lfm" "$PWD/$VENV/bin/python"
# First and later calls of a __main__ function and an installed package's, through the client.
LFM_BIN=$PWD/target/release/lfm PYTHONPATH=$PWD/python LFM_IDLE_TIMEOUT=2 \
  "$VENV/bin/python" bench/serve_warm.py
