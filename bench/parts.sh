#!/usr/bin/env bash
# Shared parts on one node (issue 31): 20 functions over numpy/scipy/pandas/scikit-learn
# subsets, shipped as parts, as one pack per function and as the whole environment, in the
# same run: bytes received and stored per node, composing from cached parts, import time.
# Usage: bash bench/parts.sh   (from the repository root; ~10 min on 2 cores; uses the test
# venv target/test-venvs/sci, made by `cargo test --test pack` or here from PyPI once)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q
venv=target/test-venvs/sci
want=$(printf '%s\n' numpy==2.1.3 pandas==2.2.3 scikit-learn==1.5.2)
if [ "$(cat "$venv/.lfm-complete" 2>/dev/null; echo)" != "$want" ]; then
  python3 -m venv --clear "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check numpy==2.1.3 pandas==2.2.3 scikit-learn==1.5.2
  printf '%s' "$want" > "$venv/.lfm-complete"
fi
echo "# venv $venv: $(du -sh "$venv" | cut -f1)"
python3 bench/parts.py "$PWD/target/release/lfm" "$PWD/$venv" "$PWD/target/parts-bench"
