#!/usr/bin/env bash
# lfm serve (per-call cgroups and Reports) against a bare fork-per-call loop, a cold
# interpreter per call and a ProcessPoolExecutor; and lfm call against lfm run -- python -c.
# Usage: bash bench/serve.sh   (from the repository root; CALLS=N to change the call count)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=target/bench-venv-serve
if [ ! -f "$VENV/.complete" ]; then
  python3 -m venv "$VENV" && "$VENV/bin/pip" install -q pandas==2.2.3 scikit-learn==1.5.2 && touch "$VENV/.complete"
fi
cargo build --release -q
"$VENV/bin/python" bench/serve_bench.py "$PWD/target/release/lfm" "$PWD/$VENV/bin/python"
