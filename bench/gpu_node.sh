#!/usr/bin/env bash
# Issue 53's GPU-node checks, one prepared run (the device tool, with the binary carried:
# `carry: ["target/release/lfm"]`, `bash bench/gpu_node.sh`, writing under $OUT):
#  1. `lfm call --gpus 1` of a torch function that fills 1 GiB on its device: the result,
#     and the Report's gpu.memory_peak_bytes against what NVML said the call's process held;
#  2. the same through a fresh `lfm serve --gpus-per-slot 1`: its first call, then a second;
#  3. which frameworks (torch, jax, cupy) open a driver device file at import and after a first
#     device call, and whether `torch.cuda.is_initialized()` says so: what the zygote's
#     `device_initialised` check (python/lfm_runner/contexts.py) relies on.
# Prints one line per figure; everything under ${OUT:-/tmp/gpu-node}.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-node}
mkdir -p "$OUT"
LFM=${LFM:-target/release/lfm}
PY=${PY:-python3}
export PYTHONUNBUFFERED=1
nvidia-smi -L || echo "no nvidia-smi"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"

echo "== 1. lfm call --gpus 1"
timeout 300 "$LFM" call --python "$PY" --gpus 1 --report "$OUT/call-report.json" \
  --args '[1024, 1.5]' bench/gpu_node_fns.py:hold > "$OUT/call-result.json" 2> "$OUT/call.err"
echo "exit $?"; cat "$OUT/call-result.json"; tail -3 "$OUT/call.err"

echo "== 2. lfm serve --gpus-per-slot 1: first and second call"
{ for id in 1 2; do
    echo "{\"id\": $id, \"function\": \"bench/gpu_node_fns.py:hold\", \"args\": [1024, 1.5]}"
    sleep 20
  done; } | timeout 300 "$LFM" serve --python "$PY" --slots 1 --gpus-per-slot 1 \
  > "$OUT/serve-replies.jsonl" 2> "$OUT/serve.err"
echo "exit $?"; tail -3 "$OUT/serve.err"

"$PY" - "$OUT" <<'PYEOF'
import json, sys
out = sys.argv[1]
def line(label, report, result, error=None):
    if error:
        print(f"{label}: failed: {str(error)[:300]}")
    gpu = (report or {}).get("gpu") or {}
    peak = (gpu.get("memory_peak_bytes") or 0) / 2**20
    driver = (result or {}).get("driver_mib")
    ratio = f"{peak / driver:.3f}" if driver else "n/a"
    print(f"{label}: source={gpu.get('source')} "
          f"report_peak_mib={peak:.0f} driver_mib={driver} report/driver={ratio} "
          f"torch_reserved_mib={(result or {}).get('torch_reserved_mib')} "
          f"devices={[d.get('name') for d in gpu.get('devices') or []]}")
try:
    report = json.load(open(f"{out}/call-report.json"))
    result = json.load(open(f"{out}/call-result.json"))
    line("lfm call", report, result)
except Exception as error:
    print("lfm call: no report or result:", error)
for reply in map(json.loads, open(f"{out}/serve-replies.jsonl")):
    line(f"lfm serve call {reply.get('id')}", reply.get("report"), reply.get("result"),
         None if reply.get("ok") else reply)
PYEOF

echo "== 3. device files at import and after a first device call"
for framework in torch jax cupy; do
  timeout 120 "$PY" - "$framework" <<'PYEOF'
import importlib, os, sys
name = sys.argv[1]
def device_files():
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(("/dev/nvidia", "/dev/dri", "/dev/kfd")):
            found.add(target)
    return sorted(found)
def torch_initialised():
    torch = sys.modules.get("torch")
    return torch.cuda.is_initialized() if torch is not None else None
try:
    module = importlib.import_module(name)
except Exception as error:
    print(f"{name}: not importable: {error}")
    sys.exit(0)
print(f"{name} after import: device files {device_files()}, torch initialised {torch_initialised()}")
if name == "torch":
    module.ones(1, device="cuda").sum().item()
elif name == "jax":
    module.numpy.ones(1).block_until_ready()
else:
    module.ones(1).sum().get()
print(f"{name} after a device call: device files {device_files()[:3]}..., torch initialised {torch_initialised()}")
PYEOF
done
