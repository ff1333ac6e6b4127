#!/usr/bin/env bash
# Every sizing strategy on two real traces: waste, retries and modelled throughput, next to
# the oracle and the best fixed ladder in hindsight (docs/sizing.md, docs/benchmarks.md).
#  1. bioblast (Tovar et al.'s BLAST workflow, 7,754 tasks): memory, cores and disk.
#  2. nfcore_sizey (six nf-core workflows, Bader et al.'s Sizey data; the 13,510 rows the
#     paper's own filter keeps): memory (peak_rss) by workflow:process, weighted by realtime,
#     sized from each task's input size (rchar), per workflow and in total.
# Usage: bash bench/sizing.sh   (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q
LFM=./target/release/lfm
DATA=../shared/data/traces
for trace in bioblast nfcore_sizey; do
  [ -f "$DATA/$trace.csv" ] || { echo "no $DATA/$trace.csv (the traces ship in shared/data/traces)"; exit 1; }
done

echo "== bioblast"
time $LFM simulate --trace "$DATA/bioblast.csv" --resource memory,cores,disk \
    --plot target/sizing-bioblast.svg
echo "allocation vs use per task: target/sizing-bioblast.svg"

NFCORE=(--category-columns workflow,category --column memory=memory_mb,wall_time=wall_seconds)
for workflow in chipseq eager iwd mag methylseq rnaseq; do
  echo
  echo "== nfcore_sizey, $workflow (the node: this workflow's largest task)"
  $LFM simulate --trace "$DATA/nfcore_sizey.csv" "${NFCORE[@]}" \
      --where sizey_eligible=1 --where workflow=$workflow
done
echo
echo "== nfcore_sizey, all six workflows (the node: the largest task of all)"
time $LFM simulate --trace "$DATA/nfcore_sizey.csv" "${NFCORE[@]}" --where sizey_eligible=1 \
    --plot target/sizing-nfcore.svg
echo "allocation vs use per task: target/sizing-nfcore.svg"
