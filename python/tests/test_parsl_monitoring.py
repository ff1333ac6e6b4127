"""Parsl monitoring with LfmHighThroughputExecutor: each task's lfm Report reaches Parsl's
monitoring database (SQLite, read back here) through its own resource-message path, and the
task's first and last worker messages arrive as with HTEX."""

import glob
import os
import sqlite3

import pytest

parsl = pytest.importorskip("parsl")
pytest.importorskip("sqlalchemy")

from parsl import python_app  # noqa: E402
from parsl.config import Config  # noqa: E402
from parsl.monitoring import MonitoringHub  # noqa: E402
from parsl.providers import LocalProvider  # noqa: E402

import client_functions as fns  # noqa: E402
import lfm  # noqa: E402
from lfm.parsl import LfmHighThroughputExecutor, report_of  # noqa: E402


def app(fn):
    return python_app(fn, executors=["lfm"])


@pytest.fixture(scope="module")
def monitored(tmp_path_factory):
    """Two tasks run with monitoring on (one within its memory, one over it); then the
    monitoring database, complete once the DFK is cleaned up."""
    run_dir = tmp_path_factory.mktemp("parsl-monitoring")
    executor = LfmHighThroughputExecutor(
        label="lfm", cores_per_worker=1, max_workers_per_node=2, encrypted=False,
        provider=LocalProvider(init_blocks=1, max_blocks=1),
    )
    config = Config(executors=[executor], strategy="none", run_dir=str(run_dir),
                    monitoring=MonitoringHub(resource_monitoring_interval=1))
    with parsl.load(config):
        fits = app(fns.allocate)(30, parsl_resource_specification={"memory": 200})
        over = app(fns.allocate)(300, parsl_resource_specification={"memory": 100})
        assert fits.result() == 30 << 20
        assert isinstance(over.exception(), lfm.LimitExceeded)
        tasks = {"fits": (fits.tid, report_of(fits)), "over": (over.tid, report_of(over))}
    (path,) = glob.glob(os.path.join(run_dir, "**", "monitoring.db"), recursive=True)
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    yield tasks, db
    db.close()


def resource_rows(db, task_id):
    return db.execute("SELECT * FROM resource WHERE task_id = ?", (task_id,)).fetchall()


def test_each_task_has_one_resource_row_with_its_reports_figures(monitored):
    tasks, db = monitored
    task_id, report = tasks["fits"]
    (row,) = resource_rows(db, task_id)
    assert row["psutil_process_memory_resident"] == report["memory"]["peak_bytes"]
    assert report["memory"]["peak_bytes"] >= 30 << 20
    assert row["psutil_process_memory_virtual"] == report["virtual_memory_bytes"]
    assert row["psutil_process_time_user"] == report["cpu_time"]["user"]
    assert row["psutil_process_time_system"] == report["cpu_time"]["system"]
    assert row["psutil_process_disk_read"] == report["bytes_read"]
    assert row["psutil_process_disk_write"] == report["bytes_written"]
    assert row["psutil_process_status"] == "lfm: normal"
    assert row["resource_monitoring_interval"] == 1


def test_a_task_over_its_memory_says_so_in_its_resource_row(monitored):
    tasks, db = monitored
    task_id, report = tasks["over"]
    (row,) = resource_rows(db, task_id)
    assert row["psutil_process_status"] == "lfm: limits: limits exceeded: memory"
    assert row["psutil_process_memory_resident"] == report["memory"]["peak_bytes"]
    # The kernel refuses the charge that would cross the limit, so the peak can stop a page
    # (or a 2 MiB huge page) short of it: one CI run measured 100 MiB - 4 KiB.
    assert report["memory"]["peak_bytes"] >= (100 << 20) - (2 << 20)


def test_the_workers_first_and_last_messages_reach_the_status_table(monitored):
    tasks, db = monitored
    for task_id, _ in tasks.values():
        names = {r[0] for r in db.execute(
            "SELECT task_status_name FROM status WHERE task_id = ?", (task_id,))}
        assert {"running", "running_ended"} <= names, names
