#!/usr/bin/env bash
# Builds the corpus venv of issue 53 (target/bench-venv-ecosystem): >= 100 widely used
# distributions with their dependencies, torch (PyPI's default wheel, runs on CPU), jax,
# tensorflow-cpu and the rest of bench/ecosystem_top.txt, at the versions pinned in
# bench/ecosystem_requirements.txt. Skips when the venv is complete; pip uses its own cache where
# it has one (this machine has none: a rebuild downloads ~4 GB again). Needs ~10 GB of disk.
# Usage: bash bench/ecosystem_venv.sh   (from anywhere; PYTHON=python3 by default)
#        FREEZE=1 bash bench/ecosystem_venv.sh   re-resolves ecosystem_top.txt and rewrites the pins
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=target/bench-venv-ecosystem
PINS=bench/ecosystem_requirements.txt
# A venv is not relocatable: its scripts' shebangs name the directory it was made in (a venv
# moved from a worktree starts Parsl's interchange.py with a python that is gone).
moved_from() {
  local interpreter
  interpreter=$(head -n1 "$VENV/bin/pip" 2>/dev/null || true)
  interpreter=${interpreter#\#!}
  [ "$(dirname "$interpreter")" = "$(cd "$VENV" && pwd)/bin" ] || echo "$interpreter"
}
if [ -f "$VENV/.complete" ] && [ -z "${FREEZE:-}" ]; then
  moved=$(moved_from)
  if [ -z "$moved" ]; then
    echo "ecosystem venv: $VENV is complete"; exit 0
  fi
  echo "ecosystem venv: $VENV was made elsewhere (its scripts start $moved); rebuilding" >&2
fi
free_gb=$(df -BG --output=avail . | tail -1 | tr -dc 0-9)
if [ "$free_gb" -lt 25 ]; then
  echo "ecosystem venv: only ${free_gb} GB free; it needs ~10 GB and 15 GB must stay free" >&2
  exit 1
fi
rm -rf "$VENV"
"${PYTHON:-python3}" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
if [ -n "${FREEZE:-}" ]; then
  "$VENV/bin/pip" install -r bench/ecosystem_top.txt
  { echo "# pip freeze of target/bench-venv-ecosystem, resolved from bench/ecosystem_top.txt"
    echo "# (FREEZE=1 bash bench/ecosystem_venv.sh rewrites it)"
    "$VENV/bin/pip" freeze --all | grep -v '^pip=='; } > "$PINS"
else
  "$VENV/bin/pip" install -r "$PINS"
fi
touch "$VENV/.complete"
echo "ecosystem venv: $("$VENV/bin/pip" list --format=freeze | wc -l) distributions in $VENV"
