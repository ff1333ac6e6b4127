#!/usr/bin/env bash
# The closure truth oracle at full size: every source module of real distributions, imported in
# a fresh interpreter, against lfm's import closure of it (bench/closure_truth.py says how).
# Uses the test venvs (target/test-venvs/{real,sci}, made by the tests or here, from PyPI once).
#   bench/closure_truth.sh               # every module: ~3,800 imports, an hour on 2 cores
#   SAMPLE=20 bench/closure_truth.sh     # 20 modules per distribution
#   LFM=target/debug/lfm bench/closure_truth.sh
#   ONLY=functions bench/closure_truth.sh   # the function level alone
# Then the function level: every plain test function of real projects' own suites, called
# through `lfm call` from their sdists (bench/closure_truth_calls.py), ~600 calls, ~10 minutes.
# Prints, per distribution: modules, importable ones, recall (truth distributions covered),
# precision (closure distributions the truth used), misses, and for each missed distribution
# whether the modules still import with it hidden (optional) or fail without it (required); per
# project: plain tests, those that succeeded, calls with modules not in the closure, recall,
# precision, and each miss with its cause (dynamic: the test computes the module's name).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${LFM:-}" ]; then
  cargo build --release --quiet
  LFM=target/release/lfm
fi
venv() { # dir packages...: the venv tests/common/mod.rs makes, reused when complete
  local dir=$1; shift
  local want
  want=$(printf '%s\n' "$@")
  if [ "$(cat "$dir/.lfm-complete" 2>/dev/null; echo)" != "$want" ]; then
    python3 -m venv --clear "$dir"
    "$dir/bin/pip" install --quiet --disable-pip-version-check "$@"
    printf '%s' "$want" > "$dir/.lfm-complete"
  fi
}
# Pinned as in tests/common/mod.rs.
venv target/test-venvs/real PyYAML==6.0.2 python-dateutil==2.9.0.post0 beautifulsoup4==4.12.3 attrs==24.2.0 \
  protobuf==5.28.3 googleapis-common-protos==1.65.0 requests==2.32.3 numpy==2.1.3
venv target/test-venvs/sci numpy==2.1.3 pandas==2.2.3 scikit-learn==1.5.2
oracle() { # venv distributions...
  local python=target/test-venvs/$1/bin/python; shift
  python3 bench/closure_truth.py --python "$python" --lfm "$LFM" --sample "${SAMPLE:-0}" "$@"
}
if [ "${ONLY:-}" != functions ]; then
  echo "# venv real ($(target/test-venvs/real/bin/python -V))"
  oracle real requests urllib3 attrs PyYAML python-dateutil beautifulsoup4 protobuf \
    googleapis-common-protos numpy
  echo "# venv sci"
  oracle sci pandas scikit-learn scipy joblib
fi
# Pinned as in tests/common/mod.rs (calls_oracle_venv).
venv target/closure-oracle/venv pytest==8.3.3 iniconfig==2.3.1 packaging==26.3 pluggy==1.7.0 \
  whatever==0.7 six==1.16.0
echo "# function level: real test suites through lfm call"
python3 bench/closure_truth_calls.py --python target/closure-oracle/venv/bin/python \
  --lfm "$LFM" --cache target/closure-oracle/sdists --sample "${SAMPLE:-0}"
