#!/usr/bin/env bash
# Packs that travel to workers that have nothing (issue 27): bytes per node and time to each
# node's first result for per-function packs against the whole environment as one tarball per
# node, on three fresh "nodes" (mount namespaces) of Parsl HTEX workers. bench/ship.py says more.
# Usage: sudo bash bench/ship.sh   (from the repository root; root for the mount namespaces;
# needs target/pytest-venv, made by `cargo test --test python`; ~5 min)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q
[ -x target/pytest-venv/bin/python ] || { echo "run cargo test --test python first (it makes target/pytest-venv)"; exit 1; }
# Twice: from the lean test venv (little beyond what the workflow needs) and from a typical
# scientific environment (bench/ship_env.txt, made once under target/ship-bench-venv).
venv=target/ship-bench-venv
if ! cmp -s bench/ship_env.txt "$venv/lfm-ship-env.txt" 2>/dev/null; then
  rm -rf "$venv" && python3 -m venv "$venv"
  (cd bench && "../$venv/bin/pip" install --quiet --disable-pip-version-check \
     -c ../python/requirements-test.txt -r ship_env.txt)
  cp bench/ship_env.txt "$venv/lfm-ship-env.txt"
fi
for python in target/pytest-venv/bin/python "$venv/bin/python"; do
  echo "== submit side: $(dirname "$(dirname "$python")") ($(du -sh "$(dirname "$(dirname "$python")")" | cut -f1))"
  "$python" bench/ship.py "$PWD/target/release/lfm"
done
