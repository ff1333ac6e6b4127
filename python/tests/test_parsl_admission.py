"""More HTEX workers on a node than its allocations fit: the node's lfm serve starts the apps
whose memory fits (LFM_NODE_MEMORY) and the others wait there (docs/serve.md "Admission")."""

import os

import pytest

parsl = pytest.importorskip("parsl")

from parsl import python_app  # noqa: E402
from parsl.config import Config  # noqa: E402
from parsl.providers import LocalProvider  # noqa: E402

import client_functions as fns  # noqa: E402
from lfm.parsl import LfmHighThroughputExecutor, report_of  # noqa: E402


@pytest.fixture(scope="module")
def dfk(tmp_path_factory):
    # The worker pool inherits these: its node serve has a 1 GiB budget and 6 slots.
    saved = {k: os.environ.get(k) for k in ("LFM_NODE_MEMORY", "LFM_SLOTS")}
    os.environ.update(LFM_NODE_MEMORY="1G", LFM_SLOTS="6")
    executor = LfmHighThroughputExecutor(
        label="lfm-packed", cores_per_worker=0.1, max_workers_per_node=6, encrypted=False,
        provider=LocalProvider(init_blocks=1, max_blocks=1),
    )
    run_dir = str(tmp_path_factory.mktemp("parsl"))
    try:
        with parsl.load(Config(executors=[executor], strategy="none", run_dir=run_dir)) as dfk:
            yield dfk
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_six_workers_run_as_many_apps_as_their_memory_fits(dfk):
    app = python_app(fns.sleep_then, executors=["lfm-packed"])
    # Calls of 2 s: the interchange may spread the six arrivals over a loaded second, and a
    # fourth must still arrive while three hold their room.
    futures = [app(2.0, n, parsl_resource_specification={"memory": "300M"}) for n in range(6)]
    assert [f.result(timeout=120) for f in futures] == list(range(6))
    reports = [report_of(f) for f in futures]
    for report in reports:
        assert report["allocation"]["node_memory_bytes"] == 1 << 30
        assert report["allocation"]["memory_bytes"] == 300 << 20
    # Three of 300M fit in 1 GiB: never more at once, and some waited for room.
    for report in reports:
        at = report["start"]
        running = [r for r in reports if r["start"] <= at < r["end"]]
        assert len(running) <= 3, [(r["start"], r["end"]) for r in reports]
    assert max(r["allocation"]["queue_wait_seconds"] for r in reports) > 0.3
