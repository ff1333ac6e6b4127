#!/usr/bin/env bash
# Python as users have it (issue 53): every top-level module of the corpus venv
# (bench/ecosystem_venv.sh: >= 100 widely used distributions, torch, jax, tensorflow-cpu, ...)
# imported with plain python, then through `lfm call`, a fresh `lfm serve`'s first and warm
# call, and a pack of the module; prints how many import under python and, per lfm path, how
# many differ (fail, or show another class, loader, file or public names), then the closure
# recall: the distributions each import really loads against `lfm analyze --closure import`.
# Usage: bash bench/ecosystem.sh     (from anywhere; ~1 hour on 2 cores, the pack path most)
#   PATHS=call,serve ONLY=torch,jax JOBS=2 RECALL=0 OUT=report.json bash bench/ecosystem.sh
#   LFM=target/debug/lfm bash bench/ecosystem.sh   (else a release build)
set -euo pipefail
cd "$(dirname "$0")/.."
bash bench/ecosystem_venv.sh
if [ -z "${LFM:-}" ]; then
  cargo build --release --quiet
  LFM=target/release/lfm
fi
LFM=$LFM PY=target/bench-venv-ecosystem/bin/python python3 bench/ecosystem.py
