"""Packs that travel, measured (bench/ship.sh): the multi-node workflow of
python/tests/test_ship_nodes.py (three nodes in mount namespaces of their own, two Parsl HTEX
workers each, 20 calls of each of three functions) on fresh nodes, three ways in one run:

  parts         lfm={"pack": True}: each function's pack as parts (docs/pack.md), a node
                fetching only the parts it lacks (a distribution two functions share, once);
  per-function  the same with LFM_SHIP_PARTS=0: each function's own pack, fetched once per node;
  whole-env     the seeds' way (conda-pack / venv-pack style): the submit side's whole
                environment as one tarball (`lfm pack --all`), fetched and extracted once per
                node, every function run from it.

Prints bytes moved per node and the time from submission to each node's first result.
Needs root (mount namespaces) and target/pytest-venv (made by `cargo test --test python`)."""

import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "python", "tests"), os.path.join(ROOT, "bench", "ship_mods")]

import test_ship_nodes as nodes  # noqa: E402  (its node.sh, worker venv and checks)

import parsl  # noqa: E402
from parsl.config import Config  # noqa: E402
from parsl.launchers.base import Launcher  # noqa: E402
from parsl.providers import LocalProvider  # noqa: E402

from lfm import cli, pack_transport, packs  # noqa: E402
from lfm.parsl import LfmHighThroughputExecutor  # noqa: E402
from shipbench.flows import count, slope, spread  # noqa: E402

CALLS = 20


class NodeLauncher(Launcher):
    def __init__(self, wrapper: str = ""):
        super().__init__(debug=False)
        self.wrapper = wrapper

    def __call__(self, command, tasks_per_node, nodes_per_block, script_dir=""):
        return f"{self.wrapper} /bin/sh -c {shlex.quote(command)}"


def layout(run: str) -> dict:
    home = os.path.join(run, "submit-home")
    os.makedirs(home, exist_ok=True)
    os.environ["HOME"] = home
    os.environ["XDG_CACHE_HOME"] = os.path.join(home, ".cache")
    hidden = [sys.prefix, home, os.path.join(ROOT, "python"), os.path.join(ROOT, "bench")]
    nodes_dir = os.path.join(run, "nodes")
    os.makedirs(nodes_dir)
    return {"venv": nodes.worker_venv()[0], "nodes": nodes_dir, "hidden": ":".join(hidden),
            "run": run}


def one_way(run: str) -> dict:
    """The workflow on three fresh nodes: per node, bytes received and first result time."""
    cluster = layout(run)
    wrapper = " ".join(shlex.quote(part) for part in nodes.node_command(cluster))
    executor = LfmHighThroughputExecutor(
        label="nodes", address="127.0.0.1", max_workers_per_node=2, encrypted=False,
        provider=LocalProvider(init_blocks=3, min_blocks=3, max_blocks=3,
                               launcher=NodeLauncher(wrapper)),
        lfm={"pack": True},
    )
    first: dict = {}
    config = Config(executors=[executor], run_dir=os.path.join(run, "runinfo"), strategy="none")
    with parsl.load(config):
        apps = [parsl.python_app(fn, executors=["nodes"]) for fn in (spread, slope, count)]
        for fn in (spread, slope, count):  # packs are built before the clock, both ways alike
            packs.pack_for(fn, False, pack_transport.ships_parts())
        done_at: dict = {}
        started = time.monotonic()
        futures = [app(n) for n in range(2, 2 + CALLS) for app in apps]
        for future in futures:
            future.add_done_callback(lambda f: done_at.setdefault(f, time.monotonic()))
        for future in futures:
            _, node = future.result(timeout=1800)
            first[node] = min(first.get(node, 1e9), done_at[future] - started)
    parsl.clear()
    moved = {}
    for node in first:
        log = os.path.join(node, "shipped", "transfers.jsonl")
        moved[node] = sum(json.loads(line)["bytes"] for line in open(log))
    return {"first_result_s": first, "bytes": moved}


def whole_environment(run: str):
    """packs.pack_for giving every function one tarball: the whole environment (`lfm pack
    --all`, as conda-pack or venv-pack would) with the project's modules added to its app/."""
    work = os.path.join(run, "whole")
    os.makedirs(work, exist_ok=True)
    env_pack = cli.pack(env=sys.prefix, all=True, cwd=work)
    project_pack = packs.pack_for(count)
    tree = os.path.join(work, "tree")
    os.makedirs(tree)
    subprocess.run(["tar", "--zstd", "-xf", env_pack, "-C", tree], check=True)
    subprocess.run(["tar", "--zstd", "-xf", project_pack, "-C", tree, "app"], check=True)
    path = os.path.join(work, "whole-env.tar.zst")
    subprocess.run(["tar", "--zstd", "-cf", path, "-C", tree, "."], check=True)
    shutil.rmtree(tree)
    return lambda fn, self_contained=False, parts=False: path


def summary(name: str, figures: dict) -> dict:
    firsts = sorted(figures["first_result_s"].values())
    sizes = list(figures["bytes"].values())
    row = {"way": name, "nodes": len(firsts), "bytes_per_node_mb": statistics.mean(sizes) / 1e6,
           "first_result_s_median": statistics.median(firsts), "first_result_s_max": max(firsts)}
    print(f"{name:14} nodes {row['nodes']}  bytes/node {row['bytes_per_node_mb']:8.1f} MB  "
          f"first result per node: median {row['first_result_s_median']:6.2f} s, "
          f"last {row['first_result_s_max']:6.2f} s")
    return row


def main() -> None:
    os.environ["LFM_BIN"] = sys.argv[1]
    os.environ["LFM_SHIP_HOST"] = "127.0.0.1"
    base = os.path.join(ROOT, "target", "ship-bench", str(os.getpid()))
    rows = []
    try:
        rows.append(summary("parts", one_way(os.path.join(base, "parts"))))
        os.environ["LFM_SHIP_PARTS"] = "0"
        rows.append(summary("per-function", one_way(os.path.join(base, "per-function"))))
        original = packs.pack_for
        packs.pack_for = whole_environment(os.path.join(base, "whole-env"))
        try:
            rows.append(summary("whole-env", one_way(os.path.join(base, "whole-env"))))
        finally:
            packs.pack_for = original
            del os.environ["LFM_SHIP_PARTS"]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    parts, per_function, whole = rows
    for name, row in (("parts", parts), ("per-function", per_function)):
        print(f"{name}: bytes per node {whole['bytes_per_node_mb'] / row['bytes_per_node_mb']:.1f}x "
              f"fewer than whole-env; first result per node (median) "
              f"{whole['first_result_s_median'] / row['first_result_s_median']:.2f}x sooner")


if __name__ == "__main__":
    main()
