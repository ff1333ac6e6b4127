#!/usr/bin/env bash
# Per-task overhead of lfm inside Parsl HTEX (LfmHighThroughputExecutor vs HighThroughputExecutor)
# and Dask (LfmPlugin's "lfm" executor vs the worker's threads), on noop, 100 ms and typical tasks
# (a __main__ app importing numpy and pandas inside, 100 ms of work),
# 2 workers, in one run. Usage: bash bench/engines.sh   (from the repository root;
# ROUNDS, NOOP_TASKS, SLEEP_TASKS, TYPICAL_TASKS, WORKERS to change the counts, 0 tasks to skip a kind;
# ENGINES="parsl" or "dask" for one engine)
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
"$VENV/bin/python" bench/engines_bench.py
