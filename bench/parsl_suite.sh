#!/usr/bin/env bash
# Parsl's own test suite (the pinned Parsl of python/requirements-test.txt: its directories of
# python apps, error handling, bash apps, regressions, serialization and htex) run twice with
# Parsl's own parsl/tests/configs/htex_local.py: once as it is (HighThroughputExecutor) and once
# with only its executor class swapped for lfm's LfmHighThroughputExecutor (the config is made
# from the installed file by rewriting its import line, nothing else). Prints passed/failed per
# executor, each run's wall time and their ratio, and the tests that fail with lfm only.
# Usage: bash bench/parsl_suite.sh   (from anywhere; LFM_BIN=... to use a given binary instead
# of building the release one; DIRS="test_python_apps ..." for other directories)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/engines_venv.sh
if [ -z "${LFM_BIN:-}" ]; then
  cargo build --release -q
  LFM_BIN=$PWD/target/release/lfm
fi
export LFM_BIN
ROOT=$PWD
# The client from the source tree; Parsl's interchange and worker pool from the venv's bin/.
export PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH}
export PATH=$ROOT/$VENV/bin:$PATH
unset PYTHONDONTWRITEBYTECODE
WORK=$(mktemp -d)
# The bench's own node-local serves and history, not a user's; serves stop soon after.
export XDG_RUNTIME_DIR=$WORK/runtime LFM_HISTORY=$WORK/history.sqlite LFM_IDLE_TIMEOUT=5
mkdir -p "$XDG_RUNTIME_DIR"
stop_serves() {
  for pidfile in "$XDG_RUNTIME_DIR"/lfm/*.pid; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
}
trap 'stop_serves; rm -rf "$WORK"' EXIT
TESTS=$("$VENV/bin/python" -c 'import os, parsl.tests; print(os.path.dirname(parsl.tests.__file__))')
DIRS=${DIRS:-"test_python_apps test_error_handling test_bash_apps test_regression test_serialization test_htex"}
PATHS=()
for dir in $DIRS; do PATHS+=("$TESTS/$dir"); done

CONFIG=$TESTS/configs/htex_local.py
IMPORT='from parsl.executors import HighThroughputExecutor'
grep -qx "$IMPORT" "$CONFIG" || { echo "no line '$IMPORT' in $CONFIG" >&2; exit 1; }
# The same file name for both: Parsl's whitelist/blacklist marks match on the config's path.
mkdir -p "$WORK/htex" "$WORK/lfm"
cp "$CONFIG" "$WORK/htex/htex_local.py"
sed "s/^$IMPORT\$/from lfm.parsl import LfmHighThroughputExecutor as HighThroughputExecutor/" \
  "$CONFIG" > "$WORK/lfm/htex_local.py"
[ "$(diff "$CONFIG" "$WORK/lfm/htex_local.py" | grep -c '^>')" = 1 ]

for executor in htex lfm; do
  # Each run in a directory of its own: the workers start there (a bash app's relative
  # stdout lands there) and Parsl's tests keep their pytest-parsl/ there.
  mkdir -p "$WORK/$executor/cwd"
  start=$(date +%s.%N)
  (cd "$WORK/$executor/cwd" && timeout "${SUITE_TIMEOUT:-1800}" "$ROOT/$VENV/bin/python" -m pytest \
     -q -p no:cacheprovider "${PATHS[@]}" --config "$WORK/$executor/htex_local.py" \
     --junitxml "$WORK/$executor.xml" > "$WORK/$executor.log" 2>&1) || true
  end=$(date +%s.%N)
  echo "$start $end" > "$WORK/$executor.wall"
  tail -1 "$WORK/$executor.log" | sed "s/^/$executor: /"
  if [ "$executor" = lfm ]; then
    echo "lfm: serves started $(cat "$XDG_RUNTIME_DIR"/lfm/*.log 2>/dev/null | grep -c 'starts lfm serve' || true)," \
      "by: $(cat "$XDG_RUNTIME_DIR"/lfm/*.log 2>/dev/null | sed -n 's/^--- .* \([^ ]*\) (pid [0-9]*) starts lfm serve$/\1/p' | sort | uniq -c | xargs)"
  fi
  stop_serves
done
"$VENV/bin/python" bench/parsl_suite_compare.py "$WORK"
