#!/usr/bin/env bash
# Closure precision: what each function of a real tree needs, by this lfm and (optionally) an
# older one, on the same files in the same run. Needs network access to PyPI once (the
# networkx 3.4.2 sdist, cached under target/bench-cache/).
#   bench/closures.sh                       # this build only
#   OLD_LFM=/path/to/old/lfm bench/closures.sh
# Prints, per tree: functions, and per function the distinct third-party top-level imports it
# needs (installed or not: each is a distribution to ship), modules, and the JSON size.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
NEW=target/release/lfm
CACHE=target/bench-cache
mkdir -p "$CACHE"
if [ ! -d "$CACHE/networkx-3.4.2" ]; then
  python3 -m pip download --quiet --no-deps --no-binary :all: networkx==3.4.2 -d "$CACHE"
  tar -xzf "$CACHE/networkx-3.4.2.tar.gz" -C "$CACHE"
fi
measure() { # label lfm dir target...
  local label=$1 lfm=$2 dir=$3; shift 3
  (cd "$dir" && "$lfm" analyze --no-cache --format json "$@" 2>/dev/null) | python3 bench/closure_stats.py "$label"
}
run_tree() { # name dir targets...
  local name=$1 dir=$2; shift 2
  echo "== $name"
  measure "new" "$PWD/$NEW" "$dir" "$@"
  if [ -n "${OLD_LFM:-}" ]; then measure "old" "$OLD_LFM" "$dir" "$@"; fi
}
run_tree "samples/workflow" samples/workflow workflow.py
files=$(cd "$CACHE/networkx-3.4.2" && ls networkx/algorithms/shortest_paths/*.py)
# shellcheck disable=SC2086
run_tree "networkx shortest_paths/*.py (a local copy of networkx)" "$CACHE/networkx-3.4.2" $files
run_tree "networkx dijkstra_path" "$CACHE/networkx-3.4.2" networkx/algorithms/shortest_paths/weighted.py:dijkstra_path
