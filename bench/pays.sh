#!/usr/bin/env bash
# What sizing buys (issue 32): 300 calls following the bioblast trace's peak memory, each holding
# it while it waits (I/O-bound), through `lfm serve` on a 6 GiB node budget, four ways: one call
# at a time, a fixed allocation (the largest peak), lfm's default sizing ("auto", retries), and
# the oracle (each call its own peak); makespan, retries, node memory use, and `lfm simulate`'s
# prediction on the same tasks. See bench/pays.py for the workload and its knobs.
# Usage: bash bench/pays.sh [--scale 4 --hold 0.5 ...]   (from the repository root; ~15 min)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q
python3 bench/pays.py target/release/lfm "$@"
