#!/usr/bin/env bash
# Arguments and results of 1 MiB to 1 GiB through lfm.Executor against a ProcessPoolExecutor,
# one worker each (issue 29 §3). Usage: bash bench/data.sh   (from the repository root;
# SIZES="1 10 100" and CALLS=N to change the sizes in MiB and the calls per size)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/engines_venv.sh
cargo build --release -q
export LFM_BIN=$PWD/target/release/lfm
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
export XDG_RUNTIME_DIR=$(mktemp -d)
trap 'rm -rf "$XDG_RUNTIME_DIR"' EXIT
"$VENV/bin/python" bench/data_bench.py
