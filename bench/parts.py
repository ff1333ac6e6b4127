"""Shared parts on one node (issue 31), measured by bench/parts.sh: a workflow of 20 functions
over subsets of numpy, scipy, pandas and scikit-learn, shipped three ways in the same run:

  parts          `lfm pack --parts`: one part per distribution, composed on the node
  per-function   one `lfm pack` tar.zst per function, each unpacked on its own
  whole-env      the whole environment as one tarball (`lfm pack --all`), as the seeds ship it

Prints bytes received and stored per node, the time to compose an environment whose parts are
cached (against extracting a per-function pack), and import time through a composition against
the venv itself.
Usage: python3 bench/parts.py LFM VENV WORKDIR"""

import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

IMPORTS = {
    "numpy": "import numpy; numpy.arange(3).sum()",
    "scipy.linalg": "import scipy.linalg",
    "scipy.stats": "import scipy.stats",
    "pandas": "import pandas",
    "sklearn.linear_model": "import sklearn.linear_model",
    "sklearn.cluster": "import sklearn.cluster",
}
FUNCTIONS = 20


def subsets():
    """20 distinct subsets of IMPORTS, one to three modules each, smallest first."""
    names = list(IMPORTS)
    combos = [c for size in (1, 2, 3) for c in itertools.combinations(names, size)]
    return combos[:FUNCTIONS]


def write_functions(code):
    os.makedirs(code)
    for index, modules in enumerate(subsets()):
        body = "".join(f"    {IMPORTS[m]}\n" for m in modules)
        with open(os.path.join(code, f"f{index}.py"), "w") as handle:
            handle.write(f"def run():\n{body}    return {list(modules)!r}\n")


def lfm(binary, *args, cwd=None, env=None):
    done = subprocess.run([binary, *args], cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"lfm {' '.join(args)} failed: {done.stderr}")
    return done.stdout.strip().splitlines()[-1]


def timed(fn):
    started = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - started


def pack_all(binary, venv, work):
    """(per-function pack paths, parts manifests, whole-env pack) and the packing times."""
    code = os.path.join(work, "code")
    write_functions(code)
    per, manifests, seconds = [], [], {"per-function": 0.0, "parts": 0.0}
    for index in range(FUNCTIONS):
        target = f"f{index}.py:run"
        path, took = timed(lambda: lfm(binary, "pack", target, "--env", venv, "--closure", "slice",
                                       "-q", "-o", os.path.join(work, "per", f"f{index}.tar.zst"),
                                       cwd=code))
        per.append(os.path.join(code, path) if not os.path.isabs(path) else path)
        seconds["per-function"] += took
        path, took = timed(lambda: lfm(binary, "pack", target, "--env", venv, "--closure", "slice",
                                       "-q", "--parts", os.path.join(work, "store"), cwd=code))
        manifests.append(path)
        seconds["parts"] += took
    whole, took = timed(lambda: lfm(binary, "pack", "--all", "--env", venv, "-q", "-o",
                                    os.path.join(work, "whole.tar.zst")))
    seconds["whole-env"] = took
    return per, manifests, whole, seconds


def tree_bytes(path, pycache):
    """Bytes of regular files under `path`, each inode once, links not followed; with or
    without __pycache__ directories."""
    seen, total = set(), 0
    for root, dirs, files in os.walk(path):
        if not pycache:
            dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            stat = os.lstat(os.path.join(root, name))
            if os.path.isfile(os.path.join(root, name)) and not os.path.islink(
                    os.path.join(root, name)) and stat.st_ino not in seen:
                seen.add(stat.st_ino)
                total += stat.st_size
    return total


def manifest_of(path):
    with open(path) as handle:
        return json.load(handle)


def inner_totals(pack):
    """The uncompressed bytes a single-file pack holds (its manifest's totals)."""
    listed = subprocess.run(["tar", "--zstd", "-xOf", pack, "lfm-manifest.json"],
                            capture_output=True, check=True).stdout
    return json.loads(listed)["totals"]["bytes"]


def received_and_stored(per, manifests, whole, cache):
    parts = {}
    for path in manifests:
        for part in manifest_of(path)["parts"]:
            parts[part["sha256"]] = part
    distinct = sum(p["unpacked_bytes"] for p in parts.values())
    rows = {
        "per-function": (sum(os.path.getsize(p) for p in per), sum(inner_totals(p) for p in per)),
        "parts": (sum(p["bytes"] for p in parts.values())
                  + sum(os.path.getsize(m) for m in manifests),
                  tree_bytes(cache, pycache=False)),
        "whole-env": (os.path.getsize(whole), inner_totals(whole)),
    }
    return rows, distinct, len(parts)


def compose_times(binary, manifests, cache, env, rounds):
    """Seconds to compose each environment again from cached parts (`lfm unpack`, a process
    start included), `rounds` times each."""
    times, files = [], []
    for path in manifests:
        root = os.path.join(cache, os.path.basename(path)[: -len(".parts.json")])
        files.append(sum(p["files"] for p in manifest_of(path)["parts"]))
        for _ in range(rounds):
            shutil.rmtree(root, ignore_errors=True)
            _, took = timed(lambda: lfm(binary, "unpack", path, "--cache", cache, env=env))
            times.append(took)
    return times, files


def extract_times(binary, per, work, env):
    times = []
    for index, pack in enumerate(per):
        cache = os.path.join(work, "per-cache", str(index))
        _, took = timed(lambda: lfm(binary, "unpack", pack, "--cache", cache, env=env))
        times.append(took)
        shutil.rmtree(cache)
    return times


def import_times(root, venv, modules, rounds=7):
    code = "; ".join(IMPORTS[m] for m in modules)
    python = os.path.join(venv, "bin", "python3")
    env = dict(os.environ, PATH=os.path.dirname(python) + ":/usr/bin:/bin")
    composed, plain = [], []
    for _ in range(rounds):
        for argv, into in (([os.path.join(root, "run"), "python3", "-c", code], composed),
                           ([python, "-c", code], plain)):
            _, took = timed(lambda: subprocess.run(argv, env=env, check=True))
            into.append(took)
    return statistics.median(composed), statistics.median(plain)


def p95(values):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def main():
    binary, venv, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, PATH=os.path.join(venv, "bin") + ":" + os.environ["PATH"])
    per, manifests, whole, pack_seconds = pack_all(binary, venv, work)
    cache = os.path.join(work, "node-cache")
    first = []
    for path in manifests:  # the node's first compositions: parts unpacked and compiled once
        _, took = timed(lambda: lfm(binary, "unpack", path, "--cache", cache, env=env))
        first.append(took)
    rows, distinct, nparts = received_and_stored(per, manifests, whole, cache)
    print(f"# {FUNCTIONS} functions over {', '.join(IMPORTS)}; {nparts} distinct parts")
    print(f"{'way':14} {'received MB':>12} {'stored MB':>10} {'stored / distinct':>18} {'pack s':>7}")
    for way, (received, stored) in rows.items():
        print(f"{way:14} {received / 1e6:12.1f} {stored / 1e6:10.1f} {stored / distinct:18.2f} "
              f"{pack_seconds[way]:7.1f}")
    print(f"distinct distributions' unpacked size: {distinct / 1e6:.1f} MB; pycs the parts "
          f"hold beside: {(tree_bytes(cache, True) - rows['parts'][1]) / 1e6:.1f} MB")
    print(f"received: parts {rows['per-function'][0] / rows['parts'][0]:.1f}x fewer bytes than "
          f"per-function packs, {rows['whole-env'][0] / rows['parts'][0]:.1f}x fewer than the "
          f"whole environment")
    print(f"first compositions on the node (parts unpacked and compiled): total "
          f"{sum(first):.1f} s")
    times, files = compose_times(binary, manifests, cache, env, rounds=5)
    print(f"compose from cached parts: p50 {statistics.median(times) * 1e3:.1f} ms, p95 "
          f"{p95(times) * 1e3:.1f} ms ({min(files)}-{max(files)} files an environment)")
    extract = extract_times(binary, per, work, env)
    print(f"extract a per-function pack: p50 {statistics.median(extract) * 1e3:.0f} ms, p95 "
          f"{p95(extract) * 1e3:.0f} ms")
    biggest = max(range(FUNCTIONS), key=lambda i: len(subsets()[i]) * 10 + i)
    root = lfm(binary, "unpack", manifests[biggest], "--cache", cache, env=env)
    composed, plain = import_times(root, venv, subsets()[biggest])
    print(f"import {', '.join(subsets()[biggest])}: composition {composed * 1e3:.0f} ms, venv "
          f"{plain * 1e3:.0f} ms ({composed / plain:.2f}x)")


if __name__ == "__main__":
    main()
