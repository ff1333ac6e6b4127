"""Workers that have nothing (issue "Workers that have nothing"): three "nodes" on this
machine, each a set of worker processes in a mount namespace of its own (shipping/node.sh:
private /tmp, the submit side's venv, home, project and lfm sources hidden under empty
mounts, an environment holding only python3, the engine, lfm's client and binary), run a
workflow of three functions with different closures (numpy; pandas + scikit-learn; a local
pure-Python module) through Parsl HTEX and through Dask. Each node receives each pack at most
once; a fetch killed mid-transfer leaves nothing the next call uses. Needs root (mount
namespaces); skipped otherwise, with the reason."""

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

from conftest import PYTHON_DIR
from shipping.nodes import (SHIP_DIR, SHIPPING, assert_shipped_once_per_node, dask_workers,
                            node_command, parsl_executor, transfers, worker_venv)

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="the multi-node test needs root and unshare(1) for its mount namespaces",
)

CALLS = 20


@pytest.fixture()
def cluster(tmp_path_factory, monkeypatch):
    """The submit side's layout and what each node hides of it."""
    venv, site = worker_venv()
    for absent in ("numpy", "pandas", "sklearn"):
        assert not os.path.exists(os.path.join(site, absent)), f"the worker venv has {absent}"
    run = os.path.join(SHIP_DIR, "ship-nodes", f"run-{os.getpid()}-{time.time_ns()}")
    project = os.path.join(run, "project")
    shutil.copytree(os.path.join(SHIPPING, "labmods"), os.path.join(project, "labmods"))
    home = os.path.join(run, "submit-home")
    os.makedirs(home)
    monkeypatch.setenv("HOME", home)
    monkeypatch.setenv("LFM_SHIP_HOST", "127.0.0.1")
    monkeypatch.syspath_prepend(project)
    for name in [m for m in sys.modules if m == "labmods" or m.startswith("labmods.")]:
        monkeypatch.delitem(sys.modules, name)
    hidden = [sys.prefix, home, project, PYTHON_DIR,
              os.path.dirname(os.environ["XDG_CACHE_HOME"])]
    nodes = os.path.join(run, "nodes")
    os.makedirs(nodes)
    yield {"venv": venv, "nodes": nodes, "hidden": ":".join(hidden), "run": run}
    shutil.rmtree(run, ignore_errors=True)


def workflow():
    from labmods.learn import slope
    from labmods.numeric import spread
    from labmods.words import count

    return [(spread, lambda n: float(__import__("numpy").arange(n, dtype=float).std())),
            (slope, lambda n: 3.0),
            (count, lambda n: n)]


def shipped_hashes(functions):
    """What the workflow's packs are made of: their parts manifests and parts, of which some
    (numpy's) several functions share, so a node that got each once got shared ones once."""
    from lfm import pack_transport

    refs = [pack_transport.offer(fn) for fn, _ in functions]
    parts = [part["sha256"] for ref in refs for part in ref.parts or ()]
    if pack_transport.ships_parts():
        assert len(set(parts)) < len(parts), "the workflow's functions share a part"
    return {ref.hash for ref in refs} | set(parts)


class SlowServer:
    """Serves a pack's first bytes, then stalls: a transfer to kill in the middle."""

    def __init__(self, data: bytes):
        owner = self
        self.stalled = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data[: len(data) // 3])
                self.wfile.flush()
                owner.stalled.wait(60)

            def log_message(self, *args):
                pass

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/pack"

    def close(self):
        self.stalled.set()
        self.http.shutdown()


def kill_a_fetch_midway(cluster, fn):
    """On the first node, a worker fetching `fn`'s pack is killed mid-transfer."""
    from lfm import pack_transport

    ref = pack_transport.offer(fn)
    if ref.parts:  # the largest part (numpy's): a fetch of it is what gets killed
        ref = pack_transport._part_ref(ref, max(ref.parts, key=lambda part: part["bytes"]))
    slow = SlowServer(open(ref.path, "rb").read())
    cut = pack_transport.PackRef(**dict(ref.to_dict(), url=slow.url, path=None))
    code = ("import json, sys; from lfm import pack_transport as t; "
            "t.fetch(t.PackRef.from_dict(json.loads(sys.argv[1])))")
    fetcher = subprocess.Popen(node_command(cluster, "python3", "-c", code, json.dumps(cut.to_dict())))
    node = os.path.join(cluster["nodes"], "node-0")
    shipped = os.path.join(node, "cache", "shipped")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        parts = [n for n in os.listdir(shipped) if ".part-" in n] if os.path.isdir(shipped) else []
        if parts and os.path.getsize(os.path.join(shipped, parts[0])) > 0:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the fetch to kill never started writing")
    fetcher.kill()  # node.sh execs down to the fetching python3: this is the worker itself
    fetcher.wait()
    slow.close()
    assert not os.path.exists(os.path.join(shipped, ref.hash + ".tar.zst"))
    # The node is free again for the engine's first worker, with the dead fetch's partial file.
    shutil.rmtree(os.path.join(node, "claimed"))
    return ref.hash


def test_parsl_htex_workers_that_have_nothing(cluster):
    import parsl
    from parsl.config import Config

    functions = workflow()
    killed = kill_a_fetch_midway(cluster, functions[0][0])
    config = Config(executors=[parsl_executor(cluster, blocks=3, workers_per_node=2)],
                    run_dir=os.path.join(cluster["run"], "runinfo"), strategy="none")
    with parsl.load(config):
        apps = [(parsl.python_app(fn, executors=["nodes"]), want) for fn, want in functions]
        futures = [(app(n), want(n), n) for app, want in apps for n in range(2, 2 + CALLS)]
        for future, want, n in futures:
            assert future.result(timeout=600) == pytest.approx(want), n
    parsl.clear()
    per_node = assert_shipped_once_per_node(cluster, shipped_hashes(functions))
    assert len(per_node) == 3, f"three nodes ran calls: {sorted(per_node)}"
    node0 = [t["hash"] for t in transfers(os.path.join(cluster["nodes"], "node-0"))]
    assert killed in node0, "the node whose fetch was killed got that pack afterwards"


def test_dask_workers_that_have_nothing(cluster):
    from distributed import Client, LocalCluster

    from lfm.dask import shipped

    functions = workflow()
    with LocalCluster(n_workers=0, host="127.0.0.1", scheduler_port=0, dashboard_address=None,
                      processes=False, protocol="tcp://") as local, Client(local) as client:
        with dask_workers(cluster, local.scheduler_address, nodes=3, workers_per_node=2):
            client.wait_for_workers(6, timeout=120)
            tasks = [(shipped(fn), want) for fn, want in functions]
            futures = [(client.submit(task, n, pure=False), want(n), n)
                       for task, want in tasks for n in range(2, 2 + CALLS)]
            for future, want, n in futures:
                assert future.result(timeout=600) == pytest.approx(want), n
            # A value a bare worker keeps closed flows on into the next shipped call.
            spread_task = tasks[0][0]
            chained = client.submit(shipped(__import__("labmods.numeric").numeric.spread),
                                    client.submit(spread_task, 5, pure=False), pure=False)
            assert chained.result(timeout=300) == pytest.approx(0.5)  # std of arange(1.41)
            reported = {event["report"]["category"] for _, event in client.get_events("lfm-report")}
            assert {"spread", "slope", "count"} <= reported
    per_node = assert_shipped_once_per_node(cluster, shipped_hashes(functions))
    assert len(per_node) == 3, f"three nodes ran calls: {sorted(per_node)}"
