#!/usr/bin/env bash
# Real torch under lfm (issue 53): a seeded training step under plain python, `lfm call` and
# `lfm serve` (first and warm call), compared number for number, and the import log's cost on
# `import torch` (the same lfm call with and without the log, and plain python, N turns each,
# back to back). The venv is cached in target/bench-venv-torch (torch for CPU from PyTorch's
# index, or PyPI's wheel where that index is unreachable); tests/imports_invisible.rs runs the
# training step through `lfm call` when it exists.
# Usage: bash bench/torch_import.sh   (from the repository root; N=10 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=target/bench-venv-torch
if [ ! -f "$VENV/.complete" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q torch --index-url https://download.pytorch.org/whl/cpu \
    || "$VENV/bin/pip" install -q torch
  touch "$VENV/.complete"
fi
cargo build --release -q
LFM=$PWD/target/release/lfm PY=$PWD/$VENV/bin/python N=${N:-10} python3 bench/torch_import.py
