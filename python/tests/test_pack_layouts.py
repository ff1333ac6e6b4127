"""Packs of environments laid out beyond one venv, used as a bare worker node uses them
(lfm.shipped_calls, what lfm.Executor, Parsl and Dask ship): the submit side's venv finds the
function's distribution in a `.pth` directory outside it, and a worker that has only python3,
lfm's client and cloudpickle runs the function from the shipped pack (tests/pack_layouts.rs
covers every layout with `lfm pack` itself)."""

import glob
import json
import os
import pickle
import shutil
import subprocess
import sys

import cloudpickle

from conftest import PYTHON_DIR
from lfm import calls

FIXTURES = os.path.join(os.path.dirname(PYTHON_DIR), "tests", "fixtures", "layouts")

JOB = """import layout_ship


def compute(x):
    return layout_ship.scaled(x), layout_ship.described(), layout_ship.__file__
"""

SUBMIT = """
import pickle, sys
sys.path.insert(0, sys.argv[1])
from lfm import calls, shipped_calls
import shipjob
prepared = shipped_calls.prepare(shipjob.compute, (7,), {}, calls.Options(pack=True))
sys.stdout.buffer.write(pickle.dumps(prepared))
"""

WORKER = """
import json, pickle, sys
from lfm import shipped_calls
print(json.dumps(shipped_calls.run(pickle.loads(sys.stdin.buffer.read()))))
"""


def pth_layout(root):
    """A venv whose only copy of layout_ship lies in a directory a `.pth` line names, and
    cloudpickle (every shipped pack holds it) in the venv itself."""
    venv = root / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True)
    [site] = glob.glob(str(venv / "lib" / "python3*" / "site-packages"))
    source = os.path.dirname(os.path.dirname(cloudpickle.__file__))
    for entry in ["cloudpickle"] + [os.path.basename(p) for p in glob.glob(os.path.join(source, "cloudpickle-*.dist-info"))]:
        shutil.copytree(os.path.join(source, entry), os.path.join(site, entry),
                        ignore=shutil.ignore_patterns("__pycache__"))
    wheel = subprocess.run([base, os.path.join(FIXTURES, "make_wheel.py"), "layout_ship", str(root)],
                           check=True, capture_output=True, text=True).stdout.strip()
    extra = root / "extra"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                    "--target", str(extra), wheel], check=True)
    with open(os.path.join(site, "extra.pth"), "w") as handle:
        handle.write(f"{extra}\n")
    return venv


def test_a_pth_directorys_distribution_travels_to_a_bare_worker(tmp_path):
    venv = pth_layout(tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    (project / "shipjob.py").write_text(JOB)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUSERBASE"}
    env.update(PYTHONPATH=PYTHON_DIR, LFM_SHIP_HOST="127.0.0.1",
               XDG_CACHE_HOME=str(tmp_path / "submit-cache"))
    prepared = subprocess.run([str(venv / "bin" / "python"), "-c", SUBMIT, str(project)],
                              env=env, capture_output=True, timeout=600, cwd=tmp_path)
    assert prepared.returncode == 0, prepared.stderr.decode()
    # The worker: python3 without site-packages (-S), seeing lfm's client and cloudpickle only.
    client = tmp_path / "client"
    shutil.copytree(os.path.dirname(cloudpickle.__file__), client / "cloudpickle")
    node = tmp_path / "node"
    worker_env = dict(env, LFM_NODE_CACHE=str(node), PYTHONPATH=f"{PYTHON_DIR}:{client}",
                      XDG_CACHE_HOME=str(tmp_path / "worker-cache"))
    base = getattr(sys, "_base_executable", sys.executable)
    done = subprocess.run([base, "-S", "-c", WORKER], input=prepared.stdout, env=worker_env,
                          capture_output=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    reply = json.loads(done.stdout.decode().strip().splitlines()[-1])
    ok, value, report = calls.outcome(reply)
    assert ok, reply
    scaled, described, module_file = value
    assert (scaled, described) == (21, "layout_ship 1.0")
    assert os.path.realpath(module_file).startswith(os.path.realpath(node)), module_file
