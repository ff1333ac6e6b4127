"""lfm.Executor and @lfm.task against a real lfm serve (LFM_BIN): values, reports, limits,
remote exceptions, and every way a call can fail without hanging."""

import inspect
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

import client_functions as fns
import lfm
from conftest import serve_pids
from lfm import node


@pytest.fixture(scope="module")
def executor():
    with lfm.Executor(max_workers=2, memory="300M") as ex:
        yield ex


def test_values_come_back_with_their_report(executor):
    futures = [executor.submit(fns.double, n) for n in range(4)]
    assert [f.result() for f in futures] == [0, 2, 4, 6]
    report = futures[0].report
    assert report["format"] == "lfm-report/2"
    assert report["exit"]["type"] == "normal"
    assert report["limits"]["memory_bytes"] == 300 << 20
    assert report["memory"]["peak_bytes"] > 0


def test_importable_functions_go_by_name_the_others_by_cloudpickle(executor):
    by_name = executor.submit(fns.double, 1)
    by_name.result()
    assert by_name.report["function"] == {"target": "client_functions:double", "mode": "slice"}
    offset = 5
    closure = executor.submit(lambda x: x + offset, 1)
    assert closure.result() == 6
    assert closure.report["function"]["mode"] == "pickle"


def _spilled_files():
    spill = node.spill_dir()
    return sorted(os.listdir(spill)) if os.path.isdir(spill) else []


def test_large_arguments_and_values_travel_as_files_that_are_removed(executor):
    data = os.urandom(3 << 20)  # over ARGS_INLINE_MAX: the request names a file
    future = executor.submit(fns.double, data)
    assert future.result() == data + data
    assert _spilled_files() == []
    served = os.path.join(os.environ["XDG_CACHE_HOME"], "lfm")
    results = [root for root, _, _ in os.walk(served) if os.path.basename(root) == "results"]
    assert results, "the value came back as a file, in the serve's results/"
    assert [os.listdir(r) for r in results] == [[]] * len(results), "the client removed it"


def test_a_large_value_reply_is_read_whole_among_small_ones(executor):
    futures = [executor.submit(fns.double, "x" * (200 << 10) if n % 2 else n) for n in range(6)]
    for n, future in enumerate(futures):
        assert future.result() == ("x" * (400 << 10) if n % 2 else 2 * n)


def test_arguments_larger_than_the_memory_limit_are_refused_naming_both():
    with lfm.Executor(max_workers=1, memory="4M") as small:
        future = small.submit(fns.double, b"y" * (5 << 20))
        with pytest.raises(lfm.LfmError, match="over the call's memory limit of 4.0 MiB"):
            future.result()
    assert _spilled_files() == []


def test_a_memory_limit_no_call_runs_under_is_refused_before_it_runs():
    with pytest.raises(ValueError, match="memory: '1M' is less than the 4 MiB"):
        lfm.Executor(memory="1M")
    with pytest.raises(ValueError, match="memory: 1000 is less than"):
        lfm.task(memory=1000)(fns.double)


def test_map_keeps_the_order(executor):
    assert list(executor.map(fns.double, range(6))) == [0, 2, 4, 6, 8, 10]


def test_a_call_over_its_memory_fails_with_limit_exceeded_and_the_next_runs(executor):
    future = executor.submit(fns.allocate, 600)
    with pytest.raises(lfm.LimitExceeded) as raised:
        future.result()
    assert "memory" in raised.value.limits
    assert "limit exceeded: memory (limit 300 MiB" in str(raised.value)
    assert raised.value.report is future.report
    assert future.report["exit"]["type"] == "limits"
    assert executor.submit(fns.allocate, 10).result() == 10 << 20


def test_the_remote_exception_is_raised_itself_with_the_remote_traceback(executor):
    future = executor.submit(fns.raise_key_error, "missing")
    with pytest.raises(KeyError) as raised:
        future.result()
    assert raised.value.args == ("missing",)
    cause = raised.value.__cause__
    assert isinstance(cause, lfm.RemoteTraceback)
    assert "in raise_key_error" in cause.traceback
    assert raised.value.report["exit"]["type"] == "exception"


def test_an_exception_that_does_not_unpickle_comes_back_as_remote_error(executor):
    with pytest.raises(lfm.RemoteError) as raised:
        executor.submit(fns.raise_unpicklable).result()
    assert raised.value.type_name == "client_functions.Unpicklable"
    assert "1/2" in str(raised.value)
    assert "in raise_unpicklable" in raised.value.__cause__.traceback


def test_an_instance_of_a_class_defined_in_the_call_comes_back(executor):
    # Results go as arguments go, by cloudpickle: pickle cannot name the local class.
    value = executor.submit(fns.make_local_instance, 7).result()
    assert type(value).__name__ == "Local"
    assert value.held == 7


def test_an_exception_of_a_class_defined_in_the_call_is_raised_as_itself(executor):
    with pytest.raises(Exception) as raised:
        executor.submit(fns.raise_local_exception, "local").result()
    assert type(raised.value).__name__ == "LocalError"
    assert raised.value.args == ("local",)
    assert raised.value.report["exit"]["type"] == "exception"


def test_a_call_given_a_working_directory_runs_there(executor, tmp_path):
    from lfm.calls import Options
    from lfm.executor import call

    done = call(fns.working_directory, (), {}, Options(), cwd=str(tmp_path))
    assert done.result() == str(tmp_path)
    assert executor.submit(fns.working_directory).result() != str(tmp_path)


def test_an_unpicklable_argument_fails_the_future_naming_it(executor):
    future = executor.submit(fns.double, threading.Lock())
    with pytest.raises(lfm.SerializationError, match="arguments of double"):
        future.result()


def test_an_unpicklable_result_fails_the_future_naming_it(executor):
    with pytest.raises(TypeError, match="cannot pickle '_thread.lock'"):
        executor.submit(fns.return_lock).result()


def test_a_segfault_is_a_call_error_and_the_serve_keeps_serving(executor):
    with pytest.raises(lfm.CallError) as raised:
        executor.submit(fns.segfault).result()
    assert raised.value.reason == "signal"
    assert executor.submit(fns.double, 21).result() == 42


def test_max_workers_bounds_the_calls_in_flight(tmp_path):
    with lfm.Executor(max_workers=1) as one:
        assert set(one.map(fns.overlap, [str(tmp_path)] * 3)) == {1}


def test_shutdown_can_cancel_the_calls_still_waiting():
    ex = lfm.Executor(max_workers=1)
    first = ex.submit(fns.sleep_then, 1, "first")
    waiting = [ex.submit(fns.double, n) for n in range(3)]
    ex.shutdown(wait=True, cancel_futures=True)
    assert first.result() == "first"
    assert all(f.cancelled() for f in waiting)
    with pytest.raises(RuntimeError, match="after shutdown"):
        ex.submit(fns.double, 1)


@lfm.task(memory="200M", wall="30s", category="tripled")
def tripled(x):
    """Triple x."""
    return 3 * x


def test_a_task_returns_the_raw_value_and_keeps_its_signature():
    assert tripled(4) == 12
    assert tripled.__name__ == "tripled" and tripled.__doc__ == "Triple x."
    assert list(inspect.signature(tripled).parameters) == ["x"]
    assert tripled(5, parsl_resource_specification={"cores": 1}) == 15


def test_a_task_raises_limit_exceeded_with_its_report():
    hog = lfm.task(memory="100M")(fns.allocate)
    with pytest.raises(lfm.LimitExceeded) as raised:
        hog(300)
    assert raised.value.report["limits"]["memory_bytes"] == 100 << 20


def test_a_task_submitted_to_an_executor_keeps_its_own_limits(executor):
    future = executor.submit(tripled, 2)
    assert future.result() == 6
    assert future.report["limits"]["memory_bytes"] == 200 << 20
    assert future.report["category"] == "tripled"


def test_bad_options_name_the_field():
    with pytest.raises(TypeError, match="memory"):
        lfm.task(memory=[1])
    with pytest.raises(ValueError, match="cores"):
        lfm.Executor(cores=-1)
    with pytest.raises(ValueError, match="max_workers"):
        lfm.Executor(max_workers=0)
    with pytest.raises(ValueError, match="max_retries"):
        lfm.task(auto=True, max_retries=-1)


def test_no_binary_fails_the_future_naming_the_cause(monkeypatch):
    monkeypatch.setenv("LFM_BIN", "/nonexistent/lfm")
    with lfm.Executor() as ex:
        future = ex.submit(fns.double, 1)
        with pytest.raises(lfm.BinaryNotFound, match="LFM_BIN=/nonexistent/lfm"):
            future.result()


def test_a_serve_that_cannot_start_fails_the_future_with_its_log(monkeypatch, tmp_path):
    broken = tmp_path / "lfm"
    broken.write_text("#!/bin/sh\necho 'no cgroup for you' >&2\nexit 3\n")
    broken.chmod(0o755)
    monkeypatch.setenv("LFM_BIN", str(broken))
    with pytest.raises(lfm.ServeError) as raised:
        lfm.task(fns.double)(1)
    assert "exited with status 3" in str(raised.value)
    assert "no cgroup for you" in str(raised.value)


def test_a_serve_that_dies_mid_call_fails_the_call_and_the_next_starts_a_fresh_one():
    with lfm.Executor() as ex:
        zygote = ex.submit(fns.parent_pid).result()
        key = node.ServeKey.here()
        with open(key.stem + ".pid") as handle:
            serve = int(handle.read())
        long_call = ex.submit(fns.sleep_then, 60, "never")
        os.kill(serve, signal.SIGKILL)
        with pytest.raises(lfm.ServeError, match="closed the connection") as raised:
            long_call.result(timeout=60)
        assert f"pid {serve}" in str(raised.value)
        assert "killed by signal 9" in str(raised.value)
        assert ex.submit(fns.parent_pid).result() != zygote


CLIENT = textwrap.dedent(
    """
    import lfm, client_functions
    print(lfm.task(client_functions.parent_pid)())
    """
)


def test_clients_on_the_node_share_one_serve():
    def zygote_of_a_new_client():
        done = subprocess.run(
            [sys.executable, "-c", CLIENT], capture_output=True, text=True, check=True,
            cwd=os.path.dirname(os.path.abspath(__file__)),
        )
        return int(done.stdout)

    assert zygote_of_a_new_client() == zygote_of_a_new_client()


def test_an_idle_serve_exits_by_itself(tmp_path):
    """With one-second idle timeouts the serve a short-lived client started is gone soon
    after it: the wait is bounded only so that a failure cannot hang the suite."""
    env = dict(os.environ, LFM_IDLE_TIMEOUT="1", XDG_RUNTIME_DIR=str(tmp_path))
    subprocess.run(
        [sys.executable, "-c", CLIENT], env=env, check=True, capture_output=True,
        cwd=os.path.dirname(os.path.abspath(__file__)),
    )
    (pid_file,) = (tmp_path / "lfm").glob("serve-*.pid")
    pid = int(pid_file.read_text())
    deadline = 60
    while os.path.exists(f"/proc/{pid}") and deadline > 0:
        with open(f"/proc/{pid}/stat") as handle:
            if handle.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        threading.Event().wait(0.1)
        deadline -= 0.1
    assert not os.path.exists(f"/proc/{pid}") or deadline > 0, "the idle serve did not exit"
    assert not list((tmp_path / "lfm").glob("serve-*.sock")), "its socket is removed"


def test_auto_sizes_from_history_and_retries_a_call_that_outgrows_it():
    grow = lfm.task(category="client-grow", auto=True, max_retries=5)(fns.allocate)
    with lfm.Executor(max_workers=1) as ex:
        for _ in range(10):  # greedy bucketing sizes from its tenth run on
            ex.submit(grow, 20).result()
        big = ex.submit(grow, 300)
        assert big.result() == 300 << 20
    assert "memory" in big.report["limits_from_sizing"]
    (first,) = big.retries[:1]
    assert first["limits"]["memory_bytes"] < 300 << 20 <= big.report["limits"]["memory_bytes"]
    assert "memory" in first["limits_exceeded"]


def test_pack_runs_the_function_from_its_pack_built_once(tmp_path):
    os.makedirs(lfm.packs.cache_dir(), exist_ok=True)
    before = set(os.listdir(lfm.packs.cache_dir()))  # other tests' packs share the cache
    with lfm.Executor(pack=True) as ex:
        first = ex.submit(fns.module_file)
        assert first.result() != os.path.realpath(fns.__file__)
        assert first.result().endswith(os.path.join("app", "client_functions.py"))
        assert ex.submit(fns.module_file).result() == first.result()
    packs = set(os.listdir(lfm.packs.cache_dir())) - before
    assert len([p for p in packs if p.endswith(".tar.zst")]) == 1


def test_pack_refuses_a_lambda_naming_why():
    with lfm.Executor(pack=True) as ex:
        with pytest.raises(lfm.LfmError, match="module-level function"):
            ex.submit(lambda: 1).result()


def test_a_call_over_its_wall_time_fails_with_limit_exceeded():
    with pytest.raises(lfm.LimitExceeded, match="wall time") as raised:
        lfm.task(wall="1s")(fns.sleep_then)(60, "late")
    assert "wall_time" in raised.value.limits


def test_analyze_returns_the_spec_and_a_missing_target_names_the_error(tmp_path):
    spec = lfm.analyze(fns.__file__ + ":double")
    assert spec["format"].startswith("lfm-spec/")
    assert [t["target"] for t in spec["targets"]] == ["client_functions:double"]
    with pytest.raises(lfm.LfmError, match="exited with 3"):
        lfm.analyze(str(tmp_path / "missing.py:f"))


def test_lfm_backend_chooses_the_serves_backend(monkeypatch):
    monkeypatch.setenv("LFM_BACKEND", "rlimit")
    future = lfm.Executor().submit(fns.double, 2)
    assert future.result() == 4
    assert future.report["backend"] == "rlimit"
    monkeypatch.setenv("LFM_BACKEND", "cgroup3")
    with pytest.raises(ValueError, match="LFM_BACKEND"):
        lfm.Executor().submit(fns.double, 2).result()


def test_gpus_give_a_call_a_device_of_its_own():
    with lfm.Executor(max_workers=2, gpus=1) as executor:
        futures = [executor.submit(fns.visible_devices) for _ in range(2)]
        for future in futures:
            assert future.result() in ("GPU-0", "GPU-1")
            assert future.report["gpu"]["visible_devices"] == future.result()
            assert future.report["limits"]["gpus"] == 1


def test_gpus_must_be_whole_devices():
    with pytest.raises(TypeError, match="gpus"):
        lfm.task(gpus=0.5)(fns.double)


WARM_SCRIPT = textwrap.dedent('''
    import json, sys
    import pandas as pd
    import lfm

    def total(n):  # a __main__ function using pandas: sent by value, pandas by reference
        return int(pd.Series(range(n)).sum())

    def parse(text):  # imports what its client cannot see: learned from its import log
        import importlib
        return importlib.import_module("xml.dom." + "minidom").parseString(text).nodeName

    if __name__ == "__main__":
        from pandas.api.types import is_number  # a function of an installed package
        rows = []
        with lfm.Executor(max_workers=1, memory="1G") as executor:
            calls = [(total, 100)] * 5 + [(is_number, 3)] * 5 + [(parse, "<a/>")] * 3
            for fn, arg in calls:
                future = executor.submit(fn, arg)
                future.result()
                report = future.report
                rows.append({
                    "function": report["function"]["mode"],
                    "imported": [m["name"] for m in report["imports"]["modules"]
                                 if not m.get("loaded")],
                    "preloaded": report["imports"].get("preloaded", []),
                    "peak": report["memory"]["peak_bytes"],
                })
        json.dump(rows, sys.stdout)
''')


def test_what_a_call_imports_is_warm_for_the_next_and_not_counted_in_its_memory(tmp_path):
    script = tmp_path / "warm.py"
    script.write_text(WARM_SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = __import__("json").loads(done.stdout)
    # What the client saw the function needs (pandas through `pd`, the installed function's
    # module) the zygote imported before forking even the first call.
    for row in rows[:10]:
        assert row["imported"] == [], row
        assert "pandas" in row["preloaded"], row
    # What only the import log shows is imported by the first call, then by the zygote.
    assert "xml.dom.minidom" in rows[10]["imported"], rows[10]
    for row in rows[11:]:
        assert row["imported"] == [], row
        assert "xml" in row["preloaded"], row
    # pandas alone makes an interpreter ~60 MB larger; a warm call allocates a fraction.
    zygote_sized = 60 << 20
    assert all(row["peak"] < zygote_sized for row in rows), [r["peak"] for r in rows]


def test_the_node_serve_runs_as_many_calls_as_their_memory_fits(monkeypatch):
    # A serve of its own (the budget is part of what makes serves shareable): 1 GiB for calls
    # of 400M each runs two at a time, though eight may be in flight.
    monkeypatch.setenv("LFM_NODE_MEMORY", "1G")
    monkeypatch.setenv("LFM_SLOTS", "8")
    with lfm.Executor(max_workers=8, memory="400M") as ex:
        # 1.5 s each, so the third call arrives while two hold their room on a loaded machine.
        futures = [ex.submit(fns.sleep_then, 1.5, n) for n in range(6)]
        assert [f.result(timeout=60) for f in futures] == list(range(6))
    reports = [f.report for f in futures]
    for report in reports:
        assert report["allocation"]["node_memory_bytes"] == 1 << 30
        assert report["allocation"]["memory_bytes"] == 400 << 20
    for report in reports:
        at = report["start"]
        running = [r for r in reports if r["start"] <= at < r["end"]]
        assert len(running) <= 2, [(r["start"], r["end"]) for r in reports]
    assert max(r["allocation"]["queue_wait_seconds"] for r in reports) > 0.2
