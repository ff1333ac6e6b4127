#!/usr/bin/env bash
# Measures lfm pack / unpack against venv-pack and `tar | zstd -3 -T2` on the analyzer bench's
# scientific venv, and per-function pack sizes as a share of the whole environment.
# Usage: bash bench/pack.sh   (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=target/bench-venv
TOOLS=target/bench-tools
if [ ! -f "$VENV/.complete" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q numpy scipy pandas matplotlib scikit-learn sympy dask distributed parsl
  touch "$VENV/.complete"
fi
[ -x "$TOOLS/bin/venv-pack" ] || { python3 -m venv "$TOOLS"; "$TOOLS/bin/pip" install -q venv-pack; }
command -v zstd >/dev/null || { apt-get update -qq && apt-get install -y -qq zstd >/dev/null; }
cargo build --release -q
LFM=$PWD/target/release/lfm
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

seconds() { local s; s=$(date +%s.%N); "$@" >/dev/null 2>&1; echo "$(date +%s.%N) - $s" | bc; }
size() { stat -c %s "$1"; }

ENV_MB=$(du -sm "$VENV" | cut -f1)
tar -C "$VENV" -cf - . >/dev/null   # warm the page cache: every tool reads the same files
echo "environment: $VENV ($ENV_MB MB on disk)"
t_lfm=$(seconds "$LFM" pack --all --env "$VENV" -o "$OUT/all.tar.zst" --threads 2)
t_tar=$(seconds sh -c "tar -C '$VENV' -cf - . | zstd -3 -T2 -q -o '$OUT/tar.tar.zst'")
t_vp=$(seconds "$TOOLS/bin/venv-pack" -p "$VENV" -o "$OUT/venvpack.tar.gz")
printf '%-28s %8.2f s %10d bytes\n' "lfm pack --all" "$t_lfm" "$(size "$OUT/all.tar.zst")"
printf '%-28s %8.2f s %10d bytes\n' "tar | zstd -3 -T2" "$t_tar" "$(size "$OUT/tar.tar.zst")"
printf '%-28s %8.2f s %10d bytes\n' "venv-pack (tar.gz)" "$t_vp" "$(size "$OUT/venvpack.tar.gz")"
echo "lfm / tar|zstd time: $(echo "scale=2; $t_lfm / $t_tar" | bc)x (goal <= 1.2x)"
echo "lfm / venv-pack time: $(echo "scale=3; $t_lfm / $t_vp" | bc)x (goal <= 0.15x)"
echo "(lfm packs no __pycache__; tar and venv-pack include the venv's pycs)"

cat > "$OUT/functions.py" <<'PY'
def numpy_only(n):
    import numpy as np
    return np.arange(n).sum()

def pandas_frame(path):
    import pandas as pd
    return pd.read_csv(path)

def sklearn_fit(x, y):
    from sklearn.linear_model import LinearRegression
    return LinearRegression().fit(x, y)

def matplotlib_plot(values):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt.plot(values)
PY
all=$(size "$OUT/all.tar.zst")
echo
echo "per-function packs (share of the whole-env lfm pack)"
for fn in numpy_only pandas_frame sklearn_fit matplotlib_plot; do
  t=$(seconds "$LFM" pack "$OUT/functions.py:$fn" --env "$VENV" -o "$OUT/$fn.tar.zst" --threads 2)
  s=$(size "$OUT/$fn.tar.zst")
  printf '  %-16s %10d bytes  %5.1f%%  (%.2f s incl. analysis)\n' "$fn" "$s" "$(echo "100 * $s / $all" | bc -l)" "$t"
done
echo "numpy-only goal: <= 15%"

echo
echo "unpack"
t_un=$(seconds "$LFM" unpack --cache "$OUT/cache" "$OUT/all.tar.zst")
mkdir -p "$OUT/vp"
t_tgz=$(seconds tar -xzf "$OUT/venvpack.tar.gz" -C "$OUT/vp")
t_unf=$(seconds "$LFM" unpack --cache "$OUT/cache2" "$OUT/numpy_only.tar.zst")
printf '  %-34s %6.2f s\n' "lfm unpack (whole env)" "$t_un" "tar -xzf venv-pack output" "$t_tgz" "lfm unpack (numpy-only pack)" "$t_unf"
echo "lfm unpack / tar -xzf: $(echo "scale=2; $t_un / $t_tgz" | bc)x"
