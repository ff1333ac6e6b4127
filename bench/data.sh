#!/usr/bin/env bash
# Arguments and results of 1 MiB to 1 GiB through lfm.Executor against a ProcessPoolExecutor,
# one worker each (issue 29 §3). Usage: bash bench/data.sh   (from the repository root;
# SIZES="1 10 100" and CALLS=N to change the sizes in MiB and the calls per size)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=target/bench-venv-engines
if [ ! -f "$VENV/.complete" ] || ! cmp -s python/requirements-test.txt "$VENV/.complete"; then
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r python/requirements-test.txt
  cp python/requirements-test.txt "$VENV/.complete"
fi
cargo build --release -q
export LFM_BIN=$PWD/target/release/lfm
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
export XDG_RUNTIME_DIR=$(mktemp -d)
trap 'rm -rf "$XDG_RUNTIME_DIR"' EXIT
"$VENV/bin/python" bench/data_bench.py
