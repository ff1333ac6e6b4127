#!/usr/bin/env bash
# The closure truth oracle at full size: every source module of real distributions, imported in
# a fresh interpreter, against lfm's import closure of it (bench/closure_truth.py says how).
# Uses the test venvs (target/test-venvs/{real,sci}, made by the tests or here, from PyPI once).
#   bench/closure_truth.sh               # every module: ~3,800 imports, an hour on 2 cores
#   SAMPLE=20 bench/closure_truth.sh     # 20 modules per distribution
#   LFM=target/debug/lfm bench/closure_truth.sh
# Prints, per distribution: modules, importable ones, recall (truth distributions covered),
# precision (closure distributions the truth used), misses, and for each missed distribution
# whether the modules still import with it hidden (optional) or fail without it (required).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${LFM:-}" ]; then
  cargo build --release --quiet
  LFM=target/release/lfm
fi
venv() { # name packages...: the venv tests/common/mod.rs makes, reused when complete
  local dir=target/test-venvs/$1; shift
  local want
  want=$(printf '%s\n' "$@")
  if [ "$(cat "$dir/.lfm-complete" 2>/dev/null; echo)" != "$want" ]; then
    python3 -m venv --clear "$dir"
    "$dir/bin/pip" install --quiet --disable-pip-version-check "$@"
    printf '%s' "$want" > "$dir/.lfm-complete"
  fi
}
# Pinned as in tests/common/mod.rs.
venv real PyYAML==6.0.2 python-dateutil==2.9.0.post0 beautifulsoup4==4.12.3 attrs==24.2.0 \
  protobuf==5.28.3 googleapis-common-protos==1.65.0 requests==2.32.3 numpy==2.1.3
venv sci numpy==2.1.3 pandas==2.2.3 scikit-learn==1.5.2
oracle() { # venv distributions...
  local python=target/test-venvs/$1/bin/python; shift
  python3 bench/closure_truth.py --python "$python" --lfm "$LFM" --sample "${SAMPLE:-0}" "$@"
}
echo "# venv real ($(target/test-venvs/real/bin/python -V))"
oracle real requests urllib3 attrs PyYAML python-dateutil beautifulsoup4 protobuf \
  googleapis-common-protos numpy
echo "# venv sci"
oracle sci pandas scikit-learn scipy joblib
