"""A seeded PyTorch CPU training step returns the same numbers under plain python and every way
lfm runs a function: `lfm call`, `lfm serve` (first and warm call), `lfm.Executor`, Parsl's
LfmHighThroughputExecutor and Dask's LfmPlugin (issue 53, "results as under python").

Needs torch, parsl and dask in the interpreter running pytest: tests/torch_step.rs runs this file
with the ecosystem corpus venv (bench/ecosystem_venv.sh) where it exists; the plain test venv
has no torch, so there every test here is skipped.
"""

import json
import os
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed in this interpreter")
parsl = pytest.importorskip("parsl")
distributed = pytest.importorskip("distributed")

import lfm  # noqa: E402

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
BENCH = os.path.abspath(BENCH)
# Parsl's and Dask's workers unpickle the function by reference: they import torch_fns too.
sys.path.insert(0, BENCH)
os.environ["PYTHONPATH"] = os.pathsep.join([BENCH, os.environ["PYTHONPATH"]])

import torch_fns  # noqa: E402

SEED = 7


@pytest.fixture(scope="module")
def expected():
    """The step under a fresh plain python, as the user runs it without lfm."""
    code = f"import json, torch_fns; print(json.dumps(torch_fns.train_step({SEED})))"
    done = subprocess.run([sys.executable, "-c", code], cwd=BENCH, check=True,
                          capture_output=True, text=True)
    result = json.loads(done.stdout)
    assert len(result["losses"]) == 3 and result["losses"][0] != result["losses"][2]
    return result


def lfm_command(*args):
    return [os.environ["LFM_BIN"], *args]


def test_lfm_call(expected, tmp_path):
    done = subprocess.run(
        lfm_command("call", "--quiet", "--python", sys.executable, "--report",
                    str(tmp_path / "report.json"), "--args", json.dumps([SEED]), "torch_fns.py:train_step"),
        cwd=BENCH, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == expected
    report = json.loads((tmp_path / "report.json").read_text())
    assert "torch" in [m["name"] for m in report["imports"]["modules"]]


def serve_ask(serve, request):
    serve.stdin.write(json.dumps(request) + "\n")
    serve.stdin.flush()
    return json.loads(serve.stdout.readline())


def wait_until_learned(serve, module):
    for _ in range(600):
        status = serve_ask(serve, {"id": "status", "status": True})["status"]
        if module in ((status.get("zygote") or {}).get("learned") or []):
            return
        time.sleep(0.1)
    raise AssertionError(f"the zygote never learned {module}")


def test_lfm_serve_first_and_warm_call(expected):
    serve = subprocess.Popen(
        lfm_command("serve", "--backend", "rlimit", "--no-history", "--slots", "1",
                    "--python", sys.executable),
        cwd=BENCH, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        request = {"function": "torch_fns.py:train_step", "args": [SEED]}
        first = serve_ask(serve, dict(request, id="first"))
        assert first["ok"], first
        wait_until_learned(serve, "torch")
        warm = serve_ask(serve, dict(request, id="warm"))
        assert warm["ok"], warm
        assert "torch" in warm["report"]["imports"]["preloaded"], "the warm call forked with torch"
    finally:
        serve.stdin.close()
        serve.wait(timeout=60)
    assert first["result"] == expected
    assert warm["result"] == expected


def test_lfm_executor(expected):
    with lfm.Executor(max_workers=1) as executor:
        futures = [executor.submit(torch_fns.train_step, SEED) for _ in range(2)]
        results = [future.result() for future in futures]
    assert results == [expected, expected]
    assert all(future.report["exit"]["type"] == "normal" for future in futures)


def test_parsl_lfm_high_throughput_executor(expected, tmp_path):
    from parsl import python_app
    from parsl.config import Config
    from parsl.providers import LocalProvider

    from lfm.parsl import LfmHighThroughputExecutor, report_of

    executor = LfmHighThroughputExecutor(
        label="lfm", cores_per_worker=1, max_workers_per_node=1, encrypted=False,
        provider=LocalProvider(init_blocks=1, max_blocks=1, worker_init=f"cd {BENCH}"))
    config = Config(executors=[executor], strategy="none", run_dir=str(tmp_path / "parsl"))
    with parsl.load(config):
        future = python_app(torch_fns.train_step, executors=["lfm"])(SEED)
        result = future.result()
        report = report_of(future)
    assert result == expected
    assert report["exit"]["type"] == "normal"


def test_dask_lfm_plugin(expected):
    import dask

    from lfm.dask import LfmPlugin, reports

    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                       dashboard_address=":0")
    with cluster, distributed.Client(cluster) as client:
        client.register_plugin(LfmPlugin())
        with dask.annotate(executor="lfm"):
            future = client.submit(torch_fns.train_step, SEED, pure=False)
        result = future.result()
        report = reports(client)[future.key]
    assert result == expected
    assert report["exit"]["type"] == "normal"
