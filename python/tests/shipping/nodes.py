"""The "nodes" of the multi-node tests (test_ship_nodes.py, test_ship_layouts.py): worker
processes that node.sh starts each in a mount namespace of its own, holding only python3, the
engines, lfm's client and binary; and what the tests read back of each node. Imported both by
the tests and by a submit side that runs under another interpreter (shipping/submit_layout.py),
so it needs nothing beyond the standard library until an engine is asked for."""

import contextlib
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys

SHIPPING = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(os.path.dirname(SHIPPING))
TARGET = os.path.join(os.path.dirname(PYTHON_DIR), "target")
# Each node mounts a private /tmp, which hides anything under /tmp: from a checkout there, the
# worker venv and the nodes' storage (which nodes must see) go under /var/tmp instead.
SHIP_DIR = (os.path.join("/var/tmp", f"lfm-ship-{os.getuid()}")
            if os.path.realpath(TARGET).startswith("/tmp/") else TARGET)
WORKER_VENV = os.path.join(SHIP_DIR, "ship-worker-venv")


def worker_venv():
    """python3 with only the engines, lfm's client and binary: what a bare worker holds. The
    engines are pinned as the test venv pins them (cached; the client is copied each run)."""
    requirements = os.path.join(PYTHON_DIR, "requirements-test.txt")
    wanted = open(requirements).read()
    stamp = os.path.join(WORKER_VENV, "lfm-requirements.txt")
    if not os.path.exists(stamp) or open(stamp).read() != wanted:
        shutil.rmtree(WORKER_VENV, ignore_errors=True)
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", WORKER_VENV], check=True)
        subprocess.run([os.path.join(WORKER_VENV, "bin", "pip"), "install", "--quiet",
                        "--disable-pip-version-check", "-c", requirements,
                        "parsl", "distributed", "cloudpickle"], check=True)
        with open(stamp, "w") as handle:
            handle.write(wanted)
    site = subprocess.run([os.path.join(WORKER_VENV, "bin", "python"), "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    for package in ("lfm", "lfm_runner", "lfm_shared"):
        shutil.rmtree(os.path.join(site, package), ignore_errors=True)
        shutil.copytree(os.path.join(PYTHON_DIR, package), os.path.join(site, package),
                        ignore=shutil.ignore_patterns("__pycache__"))
    # A serve of the last run may still run the old binary: replace it, never write into it.
    binary = os.path.join(WORKER_VENV, "bin", "lfm")
    shutil.copy2(os.environ["LFM_BIN"], binary + ".new")
    os.replace(binary + ".new", binary)
    return WORKER_VENV, site


def node_command(cluster, *command):
    """`command` run as the next free node of `cluster` ({"nodes", "venv", "hidden"}: where
    nodes keep their storage, the worker venv, the colon-separated directories they hide)."""
    return [os.path.join(SHIPPING, "node.sh"), cluster["nodes"], cluster["venv"],
            cluster["hidden"], *command]


def node_dirs(cluster):
    return sorted(os.path.join(cluster["nodes"], d) for d in os.listdir(cluster["nodes"]))


def transfers(node):
    """What `node` fetched into its cache's shipped/, in order (none: [])."""
    log = os.path.join(node, "cache", "shipped", "transfers.jsonl")
    return [json.loads(line) for line in open(log)] if os.path.exists(log) else []


def assert_shipped_once_per_node(cluster, packs):
    """Each node got each pack at most once, whole, and holds nothing partial."""
    per_node = {}
    for node in node_dirs(cluster):
        shipped = os.path.join(node, "cache", "shipped")
        if not os.path.isdir(shipped):
            continue
        fetched = transfers(node)
        hashes = [t["hash"] for t in fetched]
        assert len(hashes) == len(set(hashes)), f"{node} got a pack twice: {fetched}"
        assert set(hashes) <= packs
        assert all(t["source"] == "url" for t in fetched), "a node saw the submit side's files"
        for name in os.listdir(shipped):
            assert ".part-" not in name, f"{node} holds a partial pack {name}"
            if name.endswith(".tar.zst"):
                data = open(os.path.join(shipped, name), "rb").read()
                assert hashlib.sha256(data).hexdigest() + ".tar.zst" == name
        per_node[os.path.basename(node)] = {t["name"]: t["bytes"] for t in fetched}
    print("transfers per node:", json.dumps(per_node, indent=1))
    return per_node


def parsl_executor(cluster, blocks, workers_per_node):
    """LfmHighThroughputExecutor "nodes", shipping packs, its `blocks` worker pools each
    started through node.sh as a node of its own."""
    from parsl.launchers.base import Launcher
    from parsl.providers import LocalProvider

    from lfm.parsl import LfmHighThroughputExecutor

    class NodeLauncher(Launcher):
        def __init__(self, wrapper: str = ""):
            super().__init__(debug=False)
            self.wrapper = wrapper

        def __call__(self, command, tasks_per_node, nodes_per_block, script_dir=""):
            return f"{self.wrapper} /bin/sh -c {shlex.quote(command)}"

    wrapper = " ".join(shlex.quote(part) for part in node_command(cluster))
    return LfmHighThroughputExecutor(
        label="nodes", address="127.0.0.1", max_workers_per_node=workers_per_node,
        encrypted=False,
        provider=LocalProvider(init_blocks=blocks, min_blocks=blocks, max_blocks=blocks,
                               launcher=NodeLauncher(wrapper)),
        lfm={"pack": True},
    )


@contextlib.contextmanager
def dask_workers(cluster, scheduler, nodes, workers_per_node):
    """`dask worker` processes for `scheduler` on `nodes` nodes, stopped on leaving."""
    workers = [subprocess.Popen(node_command(
        cluster, "dask", "worker", scheduler, "--nworkers", str(workers_per_node),
        "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1"))
        for _ in range(nodes)]
    try:
        yield workers
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=60)
