#!/usr/bin/env bash
# Every sizing strategy on the bioblast trace (Tovar et al.'s BLAST workflow, 7,754 tasks):
# waste, retries and modelled throughput per resource for every strategy (fixed, max-seen,
# min-waste, max-throughput, greedy/exhaustive bucketing deterministic and probabilistic,
# quantized bucketing), next to the oracle and the best fixed ladder in hindsight.
# Usage: bash bench/sizing.sh   (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q
TRACE=../shared/data/traces/bioblast.csv
[ -f "$TRACE" ] || { echo "no $TRACE (the trace ships in shared/data/traces)"; exit 1; }
time ./target/release/lfm simulate --trace "$TRACE" --resource memory,cores,disk \
    --plot target/sizing-bioblast.svg
echo "allocation vs use per task: target/sizing-bioblast.svg"
