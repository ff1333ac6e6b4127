#!/usr/bin/env bash
# lfm serve at K slots against a bare fork loop from one pandas-loaded parent at K, and
# against K such parents forking at once (the limit when several zygotes fork), for each K.
# Usage: bash bench/serve_scale.sh SLOTS...   (from the repository root; e.g. 2 8 16)
#   CALLS=N calls per way (default 2000); SERVE_ARGS="--zygotes 2" extra serve arguments;
#   BACKEND=rlimit|cgroup1|cgroup2 (default auto). Runs unchanged on any core count.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: bash bench/serve_scale.sh SLOTS..." >&2; exit 2; }
VENV=target/bench-venv-serve
WANT="pandas==2.2.3 scikit-learn==1.5.2 cloudpickle==3.1.2"
if [ "$(cat "$VENV/.complete" 2>/dev/null)" != "$WANT" ]; then
  rm -rf "$VENV"
  python3 -m venv "$VENV" && "$VENV/bin/pip" install -q $WANT && echo "$WANT" > "$VENV/.complete"
fi
cargo build --release -q
"$VENV/bin/python" bench/serve_scale.py "$PWD/target/release/lfm" "$PWD/$VENV/bin/python" "$@"
