#!/usr/bin/env bash
# Issue 55's app (bench/context_bench.py): a model loaded on first use into a module global,
# 0.5 s to load, 20 ms a call, 40 calls on 2 workers after 2 warm-ups; plain Parsl HTEX and
# Dask against lfm with the model as a context, model loads counted. Usage:
# bash bench/context.sh   (from the repository root; ROUNDS, CALLS, WORKERS, ENGINES="parsl"
# or "dask", BACKEND=rlimit|cgroup1|cgroup2)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/engines_venv.sh
cargo build --release -q
export LFM_BIN=$PWD/target/release/lfm
# The client from the source tree; Parsl's interchange and worker pool from the venv's bin/.
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
export PATH=$PWD/$VENV/bin:$PATH
# Python's default: forked calls read the bytecode of the task's module (a Dask task pickles
# its function by reference, so each call imports its module) rather than compile it again.
unset PYTHONDONTWRITEBYTECODE
# The bench's own node-local serves, not a user's.
export XDG_RUNTIME_DIR=$(mktemp -d)
trap 'rm -rf "$XDG_RUNTIME_DIR"' EXIT
# BACKEND=rlimit (or cgroup1, cgroup2) to choose how the serve contains calls.
export LFM_BACKEND=${BACKEND:-auto}
"$VENV/bin/python" bench/context_bench.py
