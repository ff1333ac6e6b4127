#!/usr/bin/env bash
# Build the lfm-toolkit wheel: the lfm binary and the Python client in one
# py3-none-manylinux_2_17_x86_64 wheel (docs/python.md, "Install").
#   bash scripts/build_wheel.sh [OUT_DIR]      # default target/wheels
# maturin and zig (for glibc 2.17 compatibility) come from PyPI into target/wheel-tools, once.
# Prints the wheel's path last, and `auditwheel show` of it before.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/wheels}
tools=target/wheel-tools
want="maturin==1.9.6 ziglang==0.13.0 auditwheel==6.4.2"
if [ "$(cat "$tools/.complete" 2>/dev/null)" != "$want" ]; then
  python3 -m venv --clear "$tools"
  "$tools/bin/pip" install --quiet --disable-pip-version-check $want
  echo "$want" > "$tools/.complete"
fi
command -v cargo >/dev/null || { echo "cargo is needed to build the wheel" >&2; exit 1; }
mkdir -p "$out"
rm -f "$out"/lfm_toolkit-*.whl
# maturin finds zig through the ziglang package of its own environment.
PATH="$PWD/$tools/bin:$PATH" MATURIN_NO_INSTALL_RUST=1 CARGO_TARGET_DIR=target/wheel-build \
  "$tools/bin/maturin" build --release --strip --zig --compatibility manylinux2014 \
  --out "$out" >&2
wheel=$(ls "$out"/lfm_toolkit-*.whl)
"$tools/bin/auditwheel" show "$wheel" >&2
echo "$wheel"
