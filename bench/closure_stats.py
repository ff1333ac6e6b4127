"""Per-function closure sizes from a Spec on stdin (bench/closures.sh)."""
import json
import statistics
import sys

label = sys.argv[1]
raw = sys.stdin.buffer.read()
spec = json.loads(raw)
functions = [t for t in spec["targets"] if t["kind"] != "module"]


def third_party(target):
    names = {m["name"].split(".")[0] for m in target["modules"] if m["kind"] == "third-party"}
    names |= {m["name"].split(".")[0] for m in target["missing"]}
    return len(names)


dists = [third_party(t) for t in functions] or [0]
modules = [len(t["modules"]) for t in functions] or [0]
print(
    f"  {label}: {len(functions)} functions; third-party imports per function "
    f"mean {statistics.mean(dists):.1f}, median {statistics.median(dists)}, max {max(dists)}; "
    f"modules mean {statistics.mean(modules):.0f}, max {max(modules)}; JSON {len(raw) / 1e6:.2f} MB"
)
