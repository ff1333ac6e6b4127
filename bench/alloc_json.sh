#!/usr/bin/env bash
# Weighs the analyzer's two speed hacks against their libraries on bench/analyze.sh's whole-tree
# run (`lfm analyze --no-cache --format json` over a scientific site-packages), ruff's module
# graph on the same tree as the reference, all in turns in one run:
#   default       parse arenas (analyzer/src/scratch.rs) over mimalloc + the hand-written JSON writer
#   mimalloc      mimalloc alone as the global allocator
#   system        the system allocator (glibc malloc)
#   serde-writer  the default allocator, the Spec written by serde_json (to_spec + to_writer)
# Usage: bash bench/alloc_json.sh   (RUNS=N turns, default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=target/bench-venv
TOOLS=target/bench-tools
if [ ! -f "$VENV/.complete" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q numpy scipy pandas matplotlib scikit-learn sympy dask distributed parsl
  touch "$VENV/.complete"
fi
if [ ! -f "$TOOLS/.complete" ]; then
  python3 -m venv "$TOOLS"
  "$TOOLS/bin/pip" install -q ruff findimports pipreqs
  touch "$TOOLS/.complete"
fi
BIN=target/bench-variants
mkdir -p "$BIN"
build() {  # build NAME FEATURES
  cargo build --release -q ${2:+--features "$2"}
  cp target/release/lfm "$BIN/$1"
}
build default ""
build mimalloc bench-mimalloc-only
build system bench-system-alloc
build serde-writer bench-serde-writer
cargo build --release -q  # leave the default binary in place
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "tree: $SITE ($(find "$SITE" -name '*.py' | wc -l) .py files)"
warm() { find "$SITE" -name '*.py' -print0 | xargs -0 cat > /dev/null; }
once() {  # once NAME CMD... -> "NAME wall max_rss_kib cpu"
  local name=$1; shift
  warm
  /usr/bin/time -f "%e %M %U %S" -o target/bench-time.txt "$@" >/dev/null 2>/dev/null || true
  read -r wall mem user sys < target/bench-time.txt
  echo "$name $wall $mem $(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')"
}
VARIANTS=(default mimalloc system serde-writer)
lines=()
for _ in $(seq "${RUNS:-5}"); do
  lines+=("$(once ruff "$TOOLS/bin/ruff" analyze graph --preview --python "$VENV/bin/python" "$SITE")")
  for v in "${VARIANTS[@]}"; do
    lines+=("$(once "$v" "$BIN/$v" analyze --no-cache --python "$VENV/bin/python" --format json "$SITE")")
  done
done
printf '%s\n' "${lines[@]}" | awk '
  { n[$1]++; wall[$1, n[$1]] = $2; cpu[$1, n[$1]] = $4; if ($3 > rss[$1]) rss[$1] = $3 }
  function median(arr, name, count,   i, j, t, v) {
    for (i = 1; i <= count; i++) v[i] = arr[name, i]
    for (i = 1; i <= count; i++) for (j = i + 1; j <= count; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return v[int((count + 1) / 2)]
  }
  END {
    split("ruff default mimalloc system serde-writer", order, " ")
    dw = median(wall, "default", n["default"]); dc = median(cpu, "default", n["default"])
    printf "%-14s %9s %9s %9s %12s %12s\n", "variant", "wall s", "cpu s", "peak MiB", "wall/default", "cpu/default"
    for (k = 1; k <= 5; k++) {
      name = order[k]; w = median(wall, name, n[name]); c = median(cpu, name, n[name])
      printf "%-14s %9.2f %9.2f %9d %11.3fx %11.3fx\n", name, w, c, rss[name] / 1024, w / dw, c / dc
    }
  }'
