#!/usr/bin/env bash
# Bounded state on long-lived nodes (issue 34): what sizing costs on a history of a million runs.
#   bench/state.sh                  # release build; histories cached in target/bench-state/
#   LFM=target/debug/lfm RUNS=100000 bench/state.sh
# Makes two histories with `lfm history --import` (RUNS runs in one category; RUNS runs over 100
# categories), then prints each file's size and the wall time of sizing decisions against them:
# `lfm size` per strategy (best-so-far, the default, first), and `lfm run --auto` against a plain
# `lfm run` of the same command (the difference is what the decision costs a run), p50 and p99
# over ROUNDS processes each; and in process (sizing/examples/sizing_decision.rs) the default's
# decision with the history open, opening it first, after a run is recorded, a category's
# first decision (no tallies), the decisions after it while its tally catches up with the
# window (16 runs replayed each), a first decision without the window cache either (a
# category only an older lfm recorded), and the first open of a history made before the cache
# (which fills it for every category, once). Sizing writes its tallies and window cache into
# the history: each is sized on a copy in target/state-scratch, the cached file stays as made.
# Then retention on a history of RUNS calls with import rows (bench/state_history.py): size
# before and after `lfm history --prune`, and `lfm usage` answers before and after.
# Goals: a sizing decision <= 5 ms at p99 at any history size; history <= 50 MB after
# retention; `lfm usage` answers unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${LFM:-}" ]; then
  cargo build --release --quiet
  LFM=target/release/lfm
fi
RUNS=${RUNS:-1000000}
ROUNDS=${ROUNDS:-50}
dir=target/bench-state
scratch=target/state-scratch
mkdir -p "$dir" "$scratch"

history() { # name categories: a cached history of RUNS imported runs
  local name=$1 categories=$2 file="$dir/$1-$RUNS.sqlite"
  if [ ! -f "$file.done" ]; then
    rm -f "$file" "$file-wal" "$file-shm"
    python3 - "$RUNS" "$categories" > "$dir/$name.csv" <<'PY'
import random, sys
runs, categories = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(34)
print("category,cores,memory,disk,cpu_time,wall_time")
for i in range(runs):
    c = i % categories
    print(f"c{c},1,{rng.lognormvariate(6 + c % 5, 0.3):.1f},{rng.randint(1, 500)},0,{rng.uniform(1, 600):.1f}")
PY
    local start=$(date +%s.%N)
    LFM_HISTORY=$file "$LFM" history --import "$dir/$name.csv" > /dev/null
    echo "  imported $RUNS runs in $(python3 -c "print(f'{$(date +%s.%N) - $start:.1f}')") s" >&2
    rm -f "$dir/$name.csv"
    touch "$file.done"
  fi
  echo "$file"
}

percentiles() { # command...: p50 and p99 wall time (ms) of ROUNDS runs
  python3 - "$ROUNDS" "$@" <<'PY'
import subprocess, sys, time
rounds, command = int(sys.argv[1]), sys.argv[2:]
times = []
for _ in range(rounds):
    start = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    times.append((time.perf_counter() - start) * 1000)
times.sort()
p99 = times[min(len(times) - 1, int(round(0.99 * (len(times) - 1))))]
print(f"p50 {times[len(times) // 2]:7.2f} ms   p99 {p99:7.2f} ms")
PY
}

for spec in "one-category 1 c0" "100-categories 100 c7"; do
  set -- $spec
  file=$(history "$1" "$2")
  echo "# $RUNS runs, $1: $(du -h "$file" | cut -f1) ($file)"
  copy="$scratch/$1.sqlite"
  cp "$file" "$copy"
  # A history made by an lfm before the window cache gets it filled at its first open, once
  # (~0.3-0.5 s on 100 categories): an upgrade, not a decision.
  "$LFM" size --history "$copy" --category "$3" > /dev/null
  sync "$copy" # else the first sized run pays for writing the copy back (its checkpoint syncs)
  for strategy in best-so-far max-seen greedy-bucketing quantized-bucketing min-waste; do
    printf '  lfm size --strategy %-20s ' "$strategy"
    percentiles "$LFM" size --history "$copy" --category "$3" --strategy "$strategy"
  done
  # In process, without the process start: what a serve pays (history open), what a run with
  # --auto pays (opening it first), the steady state (a run recorded since the last decision),
  # and a category's first decision.
  cargo run --release --quiet -p lfm-sizing --example sizing_decision -- "$copy" "$3" 300 |
    sed 's/^/  /'
  echo "  goal: a sizing decision <= 5 ms at p99 at any history size"
  printf '  lfm run (no sizing)                       '
  percentiles "$LFM" run --backend rlimit -- true
  # A history imported whole was never pruned: the runs recorded next catch retention up, a
  # bounded pass each (what a node upgraded from an lfm without retention goes through once).
  python3 - "$LFM" "$copy" "$3" <<'PY'
import sqlite3, subprocess, sys, time
lfm, history, category = sys.argv[1:]
def runs():
    with sqlite3.connect(history) as db:
        return db.execute("SELECT count(*) FROM runs WHERE category = ?", (category,)).fetchone()[0]
before, times = runs(), []
while runs() > 1500 and len(times) < 100:
    start = time.perf_counter()
    subprocess.run([lfm, "run", "--backend", "rlimit", "--history", history, "--category",
                    category, "--auto", "--", "true"], capture_output=True, check=True)
    times.append(time.perf_counter() - start)
print(f"  retention catching up: {len(times)} runs, {sum(times):.1f} s in all, "
      f"{before:,} -> {runs():,} runs of {category}")
PY
  printf '  lfm run --auto (sized, then recorded)     '
  percentiles "$LFM" run --backend rlimit --history "$copy" --category "$3" --auto -- true
  rm -f "$copy" "$copy-wal" "$copy-shm"
done

# Retention on a history of RUNS calls with their import rows (bench/state_history.py says how);
# RETENTION=0 skips it (it takes ~20 minutes on this VM).
[ "${RETENTION:-1}" = 1 ] || exit 0
report="$dir/report.json"
"$LFM" run --backend rlimit --report "$report" -- true > /dev/null 2>&1
python3 bench/state_history.py "$LFM" "$dir" "$RUNS" 100 "$report"
