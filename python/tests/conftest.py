import os
import shutil
import signal
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)

# The runner is imported from the source tree, as lfm writes it out beside its entry script.
sys.path.insert(0, PYTHON_DIR)

# The client's tests get their own node-local serves, history and cache, and workers that
# Parsl and Dask start import lfm and the test modules from the source tree too.
_RUNTIME = tempfile.mkdtemp(prefix="lfm-client-tests-")
os.environ["XDG_RUNTIME_DIR"] = _RUNTIME
os.environ["LFM_HISTORY"] = os.path.join(_RUNTIME, "history.sqlite")
os.environ["XDG_CACHE_HOME"] = os.path.join(_RUNTIME, "cache")
os.environ.setdefault("LFM_IDLE_TIMEOUT", "5")
os.environ["PYTHONPATH"] = os.pathsep.join(
    [PYTHON_DIR, HERE] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
)
# Calls given GPUs run on two scripted devices (docs/gpu.md) with their own ledger: every
# serve inherits this; runs without GPUs never read it.
with open(os.path.join(_RUNTIME, "gpu-model.json"), "w") as _model:
    _model.write('{"format": "lfm-gpu-model/1", "devices": [{"uuid": "GPU-0"}, {"uuid": "GPU-1"}]}')
os.environ["LFM_GPU_MODEL"] = os.path.join(_RUNTIME, "gpu-model.json")
os.environ["LFM_GPU_LEDGER"] = os.path.join(_RUNTIME, "gpu-ledger")
os.environ.pop("LFM_GPUS", None)
# Parsl's interchange and worker pool are scripts in the venv's bin/.
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")


def serve_pids():
    """The serves started under this test run's runtime directory (their pid files)."""
    pids = []
    lfm_dir = os.path.join(_RUNTIME, "lfm")
    for name in os.listdir(lfm_dir) if os.path.isdir(lfm_dir) else []:
        if name.endswith(".pid"):
            with open(os.path.join(lfm_dir, name)) as handle:
                pids.append(int(handle.read()))
    return pids


def pytest_sessionfinish(session, exitstatus):
    for pid in serve_pids():
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    shutil.rmtree(_RUNTIME, ignore_errors=True)
