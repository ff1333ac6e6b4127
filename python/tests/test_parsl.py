"""LfmHighThroughputExecutor on a real Parsl HTEX (LocalProvider, 2 workers)."""

import os

import pytest

parsl = pytest.importorskip("parsl")

from parsl import bash_app, python_app  # noqa: E402
from parsl.config import Config  # noqa: E402
from parsl.executors.errors import InvalidResourceSpecification  # noqa: E402
from parsl.providers import LocalProvider  # noqa: E402

import client_functions as fns  # noqa: E402
import lfm  # noqa: E402
from lfm.parsl import LfmHighThroughputExecutor, report_of  # noqa: E402


@pytest.fixture(scope="module")
def worker_dir(tmp_path_factory):
    """The working directory the worker pool is started in (HTEX's apps run there)."""
    return tmp_path_factory.mktemp("worker")


@pytest.fixture(scope="module")
def dfk(tmp_path_factory, worker_dir):
    executor = LfmHighThroughputExecutor(
        label="lfm", cores_per_worker=1, max_workers_per_node=2, encrypted=False,
        provider=LocalProvider(init_blocks=1, max_blocks=1, worker_init=f"cd {worker_dir}"),
    )
    run_dir = str(tmp_path_factory.mktemp("parsl"))
    with parsl.load(Config(executors=[executor], strategy="none", run_dir=run_dir)) as dfk:
        yield dfk


def app(fn):
    return python_app(fn, executors=["lfm"])


def children(pid):
    found = set()
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as handle:
                if int(handle.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.add(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return found


def worker_pool():
    """The HTEX worker pool's pid and its workers' pids."""
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
        except OSError:
            continue
        if any(arg.endswith(b"process_worker_pool.py") for arg in argv):
            return int(entry), children(int(entry))
    raise AssertionError("no process_worker_pool.py running")


def test_the_serve_starts_with_the_worker_pool_and_serves_its_apps(dfk):
    # First in this module: the first app runs in the serve the pool's launch started.
    pid = app(fns.serve_pid)().result()
    lfm_dir = os.path.join(os.environ["XDG_RUNTIME_DIR"], "lfm")
    starts = []
    for name in sorted(os.listdir(lfm_dir)):
        if name.endswith(".log"):
            with open(os.path.join(lfm_dir, name)) as handle:
                lines = handle.read().splitlines()
            starts += [(lines[n - 1], name) for n, line in enumerate(lines)
                       if n and line == f"--- lfm serve pid {pid}"]
    assert len(starts) == 1, starts
    assert "prestart.py" in starts[0][0], starts


def test_apps_resolve_to_raw_values_with_a_report(dfk):
    futures = [app(fns.double)(n, parsl_resource_specification={"memory": 200}) for n in range(4)]
    assert [f.result() for f in futures] == [0, 2, 4, 6]
    report = report_of(futures[0])
    assert report["limits"]["memory_bytes"] == 200 << 20
    assert report["function"] == {"target": "client_functions:double", "mode": "slice"}
    assert report["category"] == "double"
    # The serve's zygote has parsl imported, as HTEX's worker has (the apps' modules import it).
    assert "parsl" in report["imports"]["preloaded"]


def test_resource_spec_keys_become_limits(dfk):
    spec = {"cores": 1, "memory": "300M", "disk": 100, "running_time_min": 2, "category": "c"}
    future = app(fns.double)(1, parsl_resource_specification=spec)
    assert future.result() == 2
    limits = report_of(future)["limits"]
    assert limits["cores"] == 1 and limits["memory_bytes"] == 300 << 20
    assert limits["disk_bytes"] == 100 << 20 and limits["wall_seconds"] == 120
    assert report_of(future)["category"] == "c"


def test_gpus_in_the_resource_spec_give_the_app_a_device(dfk):
    future = app(fns.visible_devices)(parsl_resource_specification={"gpus": 1})
    assert future.result() in ("GPU-0", "GPU-1")
    report = report_of(future)
    assert report["limits"]["gpus"] == 1
    assert report["gpu"]["visible_devices"] == future.result()


def test_a_failing_app_is_a_failed_future_with_its_exception(dfk):
    future = app(fns.raise_key_error)("gone")
    with pytest.raises(KeyError):
        future.result()
    assert report_of(future)["exit"]["type"] == "exception"


def test_an_app_over_its_memory_fails_alone_and_the_worker_pool_survives(dfk):
    assert app(fns.double)(1).result() == 2
    before = worker_pool()
    future = app(fns.allocate)(400, parsl_resource_specification={"memory": 200})
    with pytest.raises(lfm.LimitExceeded):
        future.result()
    assert report_of(future)["exit"]["type"] == "limits"
    assert [app(fns.double)(n).result() for n in range(4)] == [0, 2, 4, 6]
    assert worker_pool() == before, "no worker was lost or restarted"


def test_an_lfm_task_keeps_its_own_limits_under_the_spec(dfk):
    task = lfm.task(memory="150M", category="t")(fns.allocate)
    future = app(task)(10)
    assert future.result() == 10 << 20
    assert report_of(future)["limits"]["memory_bytes"] == 150 << 20


def test_a_bad_resource_spec_names_the_key(dfk):
    with pytest.raises(InvalidResourceSpecification, match="num_nodes"):
        app(fns.double)(1, parsl_resource_specification={"num_nodes": 2}).result()
    with pytest.raises(InvalidResourceSpecification, match="running_time_min"):
        app(fns.double)(1, parsl_resource_specification={"running_time_min": "soon"}).result()


def echo_to_relative_stdout(word, stdout="std.out"):
    return f"echo {word}"


def test_apps_run_in_the_workers_working_directory(dfk, worker_dir):
    assert os.path.realpath(f"/proc/{worker_pool()[0]}/cwd") == str(worker_dir)
    future = app(fns.working_directory)()
    assert future.result() == str(worker_dir)
    # A bash app's relative stdout default lands there, as with HTEX.
    bash = bash_app(echo_to_relative_stdout, executors=["lfm"])
    assert bash("hello").result() == 0
    assert (worker_dir / "std.out").read_text() == "hello\n"


def test_an_app_returns_an_instance_of_a_class_it_defines(dfk):
    value = app(fns.make_local_instance)(3).result()
    assert type(value).__name__ == "Local"
    assert value.held == 3
    made = app(fns.make_local_class)().result()
    assert made.__name__ == "Made" and made().a == "X"


def test_an_app_raising_an_exception_of_a_class_it_defines_fails_with_it(dfk):
    future = app(fns.raise_local_exception)("inner")
    error = future.exception()
    assert type(error).__name__ == "LocalError", error
    assert error.args == ("inner",)


def test_a_memory_no_python_call_runs_under_is_refused_before_it_runs(dfk):
    # 1 MB (Parsl's test_resource_spec asks for it): refused at submit, never a LimitExceeded.
    future = app(fns.double)(1, parsl_resource_specification={"cores": 1, "memory": 1})
    with pytest.raises(InvalidResourceSpecification, match="memory"):
        future.result()
    assert report_of(future) is None


@pytest.mark.parametrize("wrap", ["plain", "single-quoted", "heredoc"])
def test_the_prestart_prefix_runs_the_pools_interpreter_however_a_launcher_wraps_it(tmp_path, wrap):
    import subprocess
    import time

    from lfm.parsl import prestart_command

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "argv"
    python = tmp_path / "fake-python"
    python.write_text(f"#!/bin/sh\necho \"$@\" > {record}\n")
    python.chmod(0o755)
    pool = bin_dir / "process_worker_pool.py"
    pool.write_text(f"#!{python}\n")
    pool.chmod(0o755)
    command = prestart_command(("parsl",)) + "echo launched"
    script = {
        "plain": command,
        "single-quoted": f"bash -c '{command}'",
        "heredoc": f"cat << EOF > {tmp_path}/cmd.sh\n{command}\nEOF\nbash {tmp_path}/cmd.sh",
    }[wrap]
    env = dict(os.environ, PATH=f"{bin_dir}:/usr/bin:/bin")
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "launched", done
    for _ in range(100):  # the prestart runs in the background
        if record.exists() and record.read_text():
            break
        time.sleep(0.05)
    assert record.read_text().split() == [
        "-m", "lfm.prestart", "--script", "process_worker_pool.py", "--preload", "parsl"]
    # Without the pool script on PATH the prefix does nothing and says nothing.
    env["PATH"] = "/usr/bin:/bin"
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "launched", ""), done


def test_prestart_names_a_script_it_cannot_find():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "lfm.prestart", "--script", "no-such-pool.py"],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert "--script: no-such-pool.py is not an executable file here nor on PATH" in done.stderr
