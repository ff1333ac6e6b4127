#!/usr/bin/env bash
# Issue 57: the analyze cache costs what a run asks of it, not everything it holds.
# Fills a fresh cache directory with an analysis of a whole scientific site-packages, then
# times, in turns, the sample workflow (the README's first command) warm and with --no-cache,
# and the whole site-packages warm: its stored result replayed (json) and its summaries only
# (table: no result is stored). Wall time and each run's own peak RSS (wait4).
# Usage: bash bench/analyze_cache.sh   (from the repository root)
#   BASE=path/to/old/lfm   measures that build too, each with a cache of its own
#   RUNS=N                 turns (default 7)
set -euo pipefail
cd "$(dirname "$0")/.."
# The same venv as bench/analyze.sh builds (reused when it is there).
VENV=target/bench-venv
if [ ! -x "$VENV/bin/python" ] || [ ! -f "$VENV/.complete" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q numpy scipy pandas matplotlib scikit-learn sympy dask distributed parsl
  touch "$VENV/.complete"
fi
if [ -z "${LFM:-}" ]; then
  cargo build --release -q
  LFM=$PWD/target/release/lfm
fi
PY=$PWD/$VENV/bin/python
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
SAMPLE=samples/workflow/workflow.py
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
echo "tree: $SITE ($(find "$SITE" -name '*.py' | wc -l) .py files)"

# fill NAME BINARY: a fresh cache of its own holding one analysis of the whole site-packages,
# then one warm run of each measured command (the sample's summary joins the cache).
fill() {
  local cache=$WORK/cache-$1
  mkdir -p "$cache"
  "$2" analyze --python "$PY" --format json --cache-dir "$cache" "$SITE" > /dev/null
  "$2" analyze --python "$PY" --cache-dir "$cache" "$SAMPLE" > /dev/null
  "$2" analyze --python "$PY" --format table --cache-dir "$cache" "$SITE" > /dev/null
  echo "$1: cache filled: $(du -sh "$cache" | cut -f1) ($(ls -la "$cache"/analyze-summaries.* | awk '{ printf "%s %d MB; ", $NF, $5 / 1e6 }'))"
}

BINARIES=(new "$LFM")
if [ -n "${BASE:-}" ]; then BINARIES+=(base "$BASE"); fi
for ((i = 0; i < ${#BINARIES[@]}; i += 2)); do fill "${BINARIES[i]}" "${BINARIES[i + 1]}"; done

# The commands, one a line: NAME<TAB>command. Each turn runs every command once, in order,
# so that the host's bursts of load fall on all of them alike.
COMMANDS=$WORK/commands
: > "$COMMANDS"
for ((i = 0; i < ${#BINARIES[@]}; i += 2)); do
  name=${BINARIES[i]} bin=${BINARIES[i + 1]} cache=$WORK/cache-${BINARIES[i]}
  printf '%s\t%s\n' \
    "$name sample warm" "$bin analyze --python $PY --cache-dir $cache $SAMPLE" \
    "$name sample --no-cache" "$bin analyze --python $PY --no-cache $SAMPLE" \
    "$name site warm, stored result (json)" "$bin analyze --python $PY --format json --cache-dir $cache $SITE" \
    "$name site warm, summaries (table)" "$bin analyze --python $PY --format table --cache-dir $cache $SITE" \
    >> "$COMMANDS"
done

RUNS=${RUNS:-7} python3 - "$COMMANDS" <<'EOF'
import os, shlex, statistics, subprocess, sys, time

commands = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])]
runs = int(os.environ["RUNS"])
walls = {name: [] for name, _ in commands}
peaks = {name: [] for name, _ in commands}
for _ in range(runs):
    for name, command in commands:
        started = time.perf_counter()
        child = subprocess.Popen(shlex.split(command), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(child.pid, 0)
        walls[name].append(time.perf_counter() - started)
        peaks[name].append(usage.ru_maxrss / 1024)  # KiB -> MiB
        if os.WIFSIGNALED(status):
            sys.exit(f"{name}: killed by signal {os.WTERMSIG(status)}: {command}")

print(f"\n{runs} turns; wall: median (min-max); peak RSS: median")
print(f"| command | wall s | peak RSS MiB |\n|---|---|---|")
for name, _ in commands:
    w = walls[name]
    print(f"| {name} | {statistics.median(w):.3f} ({min(w):.3f}-{max(w):.3f}) "
          f"| {statistics.median(peaks[name]):.0f} |")

def ratio(a, b, values):
    turns = [x / y for x, y in zip(values[a], values[b])]
    return statistics.median(turns), min(turns), max(turns)

print()
for who in sorted({name.split(" ")[0] for name, _ in commands}):
    w = ratio(f"{who} sample warm", f"{who} sample --no-cache", walls)
    r = ratio(f"{who} sample warm", f"{who} sample --no-cache", peaks)
    print(f"{who}: sample warm / --no-cache: wall {w[0]:.2f}x ({w[1]:.2f}-{w[2]:.2f} per turn), "
          f"peak RSS {r[0]:.2f}x")
if any(name.startswith("base ") for name, _ in commands):
    for what in ("site warm, stored result (json)", "site warm, summaries (table)",
                 "sample warm"):
        w = ratio(f"new {what}", f"base {what}", walls)
        r = ratio(f"new {what}", f"base {what}", peaks)
        print(f"new / base, {what}: wall {w[0]:.2f}x ({w[1]:.2f}-{w[2]:.2f}), "
              f"peak RSS {r[0]:.2f}x")
EOF
