"""LfmPlugin on a real Dask LocalCluster (2 worker processes)."""

import os

import pytest

dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

import client_functions as fns  # noqa: E402
import lfm  # noqa: E402
from lfm.dask import LfmPlugin, report_of, reports  # noqa: E402


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
        resources={"memory": 4e9, "cores": 2, "GPU": 2},
    )
    with cluster, distributed.Client(cluster) as client:
        client.register_plugin(LfmPlugin())
        yield client


def test_annotated_tasks_run_in_lfm_with_limits_from_resources(client):
    with dask.annotate(executor="lfm"):
        futures = [client.submit(fns.double, n, resources={"memory": 200e6}) for n in range(4)]
    assert client.gather(futures) == [0, 2, 4, 6]
    report = reports(client)[futures[0].key]
    assert report["limits"]["memory_bytes"] == 200_000_000
    assert report["function"]["target"] == "pickle:double"
    assert report["category"] == "double"


def test_the_lfm_annotation_sets_any_limit(client):
    with dask.annotate(executor="lfm", lfm={"memory": "150M", "wall": "1m", "category": "c"}):
        future = client.submit(fns.double, 3, pure=False)
    assert future.result() == 6
    report = reports(client)[future.key]
    assert report["limits"]["memory_bytes"] == 150 << 20
    assert report["limits"]["wall_seconds"] == 60
    assert report["category"] == "c"


def test_a_gpu_resource_gives_the_task_a_device_of_its_own(client):
    with dask.annotate(executor="lfm"):
        future = client.submit(fns.visible_devices, resources={"GPU": 1}, pure=False)
    assert future.result() in ("GPU-0", "GPU-1")
    report = reports(client)[future.key]
    assert report["limits"]["gpus"] == 1
    assert report["gpu"]["visible_devices"] == future.result()


def test_a_failing_task_raises_its_own_exception(client):
    with dask.annotate(executor="lfm"):
        future = client.submit(fns.raise_key_error, "gone")
    with pytest.raises(KeyError):
        future.result()
    assert reports(client)[future.key]["exit"]["type"] == "exception"


def test_a_task_over_its_memory_fails_alone_and_the_workers_survive(client):
    pids = client.run(os.getpid)
    with dask.annotate(executor="lfm"):
        hog = client.submit(fns.allocate, 400, resources={"memory": 200e6})
        with pytest.raises(lfm.LimitExceeded):
            hog.result()
        after = [client.submit(fns.double, n, pure=False) for n in range(4)]
    assert client.gather(after) == [0, 2, 4, 6]
    assert reports(client)[hog.key]["exit"]["type"] == "limits"
    assert client.run(os.getpid) == pids, "no worker was restarted"
    # What the dashboard shows of the failed task names the limit and the peak.
    text = client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.tasks[hog.key].exception_text)
    assert "limit exceeded: memory (limit 191 MiB, peak" in text, text
    assert report_of(hog)["limits_exceeded"].keys() == {"memory"}


def test_dependencies_reach_the_task_in_lfm(client):
    with dask.annotate(executor="lfm"):
        first = client.submit(fns.double, 5, pure=False)
        second = client.submit(fns.double, first)
    assert second.result() == 20


def test_with_default_true_plain_submits_with_resources_run_in_lfm():
    cluster = distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0",
        resources={"memory": 1e9},
    )
    with cluster, distributed.Client(cluster) as client:
        client.register_plugin(LfmPlugin(default=True))
        future = client.submit(fns.double, 8, resources={"memory": 120e6})
        assert future.result() == 16
        assert reports(client)[future.key]["limits"]["memory_bytes"] == 120_000_000


def test_the_workers_of_a_node_share_one_serve(client):
    workers = list(client.scheduler_info()["workers"])
    with dask.annotate(executor="lfm"):
        zygotes = [client.submit(fns.parent_pid, workers=[w], pure=False) for w in workers]
    assert len(workers) == 2
    assert len(set(client.gather(zygotes))) == 1


def test_every_tasks_report_is_reachable_from_its_future_past_the_event_log():
    # The scheduler's event log keeps the last low-level-log-length events of a topic (1000
    # by default; 2 here): report_of reads the task's own metadata, or its exception.
    with dask.config.set({"distributed.admin.low-level-log-length": 2}):
        cluster = distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0",
            resources={"memory": 1e9},
        )
    with cluster, distributed.Client(cluster) as client:
        client.register_plugin(LfmPlugin())
        with dask.annotate(executor="lfm"):
            futures = [client.submit(fns.double, n, resources={"memory": 100e6}) for n in range(4)]
            failing = client.submit(fns.raise_key_error, "k", resources={"memory": 100e6})
        assert client.gather(futures) == [0, 2, 4, 6]
        assert isinstance(failing.exception(), KeyError)
        assert len(reports(client)) <= 2
        for future in futures:
            report = report_of(future)
            assert report["limits"]["memory_bytes"] == 100_000_000
            assert report["exit"]["type"] == "normal"
        assert report_of(failing)["exit"]["type"] == "exception"


def serve_commands():
    """pid -> command line of each serve started under the tests' runtime directory."""
    from conftest import serve_pids

    found = {}
    for pid in serve_pids():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                found[pid] = handle.read().decode().split("\0")
        except OSError:
            continue
    return found


def test_a_worker_starts_its_serve_when_the_plugin_is_registered(monkeypatch):
    import time

    # A preload no other test asks for: this cluster's workers key a serve of their own.
    monkeypatch.setenv("LFM_PRELOAD", "colorsys")

    def ours():
        return [pid for pid, argv in serve_commands().items()
                if any("colorsys" in arg for arg in argv)]

    assert ours() == []
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                       dashboard_address=":0")
    with cluster, distributed.Client(cluster) as client:
        client.register_plugin(LfmPlugin())
        deadline = time.monotonic() + 60
        while not ours() and time.monotonic() < deadline:
            time.sleep(0.1)
        started = ours()
        assert len(started) == 1, "no serve started before any task"
        with dask.annotate(executor="lfm"):
            assert client.submit(fns.serve_pid, pure=False).result() == started[0]
