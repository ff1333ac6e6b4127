#!/usr/bin/env bash
# Measures lfm run: overhead over a bare start, and accuracy against /usr/bin/time -v and a
# psutil poller (the resource_monitor style: poll the tree's RSS) on stress-ng workloads.
# Usage: bash bench/monitor.sh   (from the repository root; installs stress-ng with apt)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v stress-ng >/dev/null || { apt-get update -qq && apt-get install -y -qq stress-ng >/dev/null; }
[ -x /usr/bin/time ] || { apt-get update -qq && apt-get install -y -qq time >/dev/null; }
TOOLS=target/bench-tools-monitor
if [ ! -f "$TOOLS/.complete" ]; then
  python3 -m venv "$TOOLS" && "$TOOLS/bin/pip" install -q psutil && touch "$TOOLS/.complete"
fi
cargo build --release -q
mkdir -p target/test-workloads
cc -O1 -pthread -o target/test-workloads/workload tests/workloads/workload.c
LFM=$PWD/target/release/lfm
"$TOOLS/bin/python" bench/monitor_bench.py "$LFM"
