#!/usr/bin/env bash
# Where a 100 ms call's time goes in lfm serve, and the CPU each call costs the node
# (bench/serve_latency.py). Usage: bash bench/serve_latency.sh   (from the repository root;
# CALLS=N calls per client, CLIENTS=N clients at once, SLEEP=seconds each call sleeps (0.1);
# each backend this machine has)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q
for backend in ${BACKENDS:-cgroup1 cgroup2 rlimit}; do
  python3 bench/serve_latency.py "$PWD/target/release/lfm" "$backend" 2>/dev/null \
    || echo "$backend: not available here"
done
