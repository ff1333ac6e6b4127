"""Environments laid out beyond one venv, shipped to bare nodes (issue 53): the submit side is
a venv whose every distribution lies outside it (`.pth` lines naming the test venv's
site-packages and lfm's sources, a directory that pip installed a distribution into, an
editable install of the job's project through setuptools' finder, and plain shared code on
PYTHONPATH that no distribution lists); Parsl HTEX and Dask run the
job on "nodes" (shipping/node.sh) that hide all of it and hold only python3, the engine, lfm's
client and binary. Each node gets the job's pack, and the job runs from the pack's files.
Needs root (mount namespaces) and, for the editable install's build backend, the package
registry; skipped otherwise, with the reason."""

import glob
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import PYTHON_DIR
from shipping.nodes import SHIP_DIR, SHIPPING, assert_shipped_once_per_node, transfers, worker_venv

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="the multi-node test needs root and unshare(1) for its mount namespaces",
)

FIXTURES = os.path.join(os.path.dirname(PYTHON_DIR), "tests", "fixtures", "layouts")
CALLS = 6
OFFLINE = ("Could not find a version", "NewConnectionError", "Temporary failure in name resolution",
           "Network is unreachable")


def editable_install(venv, project):
    """`pip install -e` of the job's project (its build backend comes from the registry)."""
    done = subprocess.run([os.path.join(venv, "bin", "pip"), "install", "--quiet",
                           "--disable-pip-version-check", "--no-deps", "-e", project],
                          capture_output=True, text=True)
    if done.returncode != 0 and any(needle in done.stderr for needle in OFFLINE):
        pytest.skip(f"the package registry is unreachable: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr


def outside_distribution(submit):
    """layout_outside, installed by pip into a directory of no environment."""
    base = getattr(sys, "_base_executable", sys.executable)
    make_wheel = os.path.join(FIXTURES, "make_wheel.py")
    wheel = subprocess.run([base, make_wheel, "layout_outside", submit], check=True,
                           capture_output=True, text=True).stdout.strip()
    outside = os.path.join(submit, "outside")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                    "--target", outside, wheel], check=True)
    return outside


def submit_layout(submit):
    """The submit side's venv: the job's project editable, and `.pth` lines naming the test
    venv's site-packages (the engines, cloudpickle), lfm's sources and the outside directory;
    beside it, the shared code that `submit` puts on PYTHONPATH."""
    venv = os.path.join(submit, "venv")
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", venv], check=True)
    project = os.path.join(submit, "project")
    shutil.copytree(os.path.join(SHIPPING, "layout_job_project"), project,
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    editable_install(venv, project)
    [site] = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))
    finders = glob.glob(os.path.join(site, "__editable___layout_job_*_finder.py"))
    assert finders, f"setuptools installed layout_job without its finder: {os.listdir(site)}"
    engines = os.path.join(sys.prefix, os.path.relpath(site, venv))
    with open(os.path.join(site, "submit-side.pth"), "w") as handle:
        handle.write(f"{engines}\n{PYTHON_DIR}\n")
    with open(os.path.join(site, "outside.pth"), "w") as handle:
        handle.write(f"{outside_distribution(submit)}\n")
    shutil.copytree(os.path.join(SHIPPING, "layout_pythonpath"), os.path.join(submit, "shared"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    return venv


@pytest.fixture(scope="module")
def submit_side():
    """The submit side's directory (its venv, the outside directory, the job's project, its
    home and cache), built once for the engines' tests."""
    run = os.path.join(SHIP_DIR, "ship-layouts", f"run-{os.getpid()}-{time.time_ns()}")
    submit = os.path.join(run, "submit")
    os.makedirs(os.path.join(submit, "home"))
    python = os.path.join(submit_layout(submit), "bin", "python")
    yield {"run": run, "submit": submit, "submit_python": python}
    shutil.rmtree(run, ignore_errors=True)


@pytest.fixture()
def cluster(submit_side, request):
    """Bare nodes of their own for one test, that hide the submit side (with the test venv,
    whose site-packages the submit side's `.pth` names, and lfm's sources)."""
    venv, site = worker_venv()
    for absent in ("layout_outside", "layout_job"):
        assert not os.path.exists(os.path.join(site, absent)), f"the worker venv has {absent}"
    run = os.path.join(submit_side["run"], request.node.name)
    nodes = os.path.join(run, "nodes")
    os.makedirs(nodes)
    hidden = [submit_side["submit"], sys.prefix, PYTHON_DIR]
    return dict(submit_side, venv=venv, nodes=nodes, run=run, hidden=":".join(hidden))


def submit(cluster, engine):
    """Run the job CALLS times through `engine` from the layout venv's python, with the
    submit side's shared code as its PYTHONPATH (none of the test process's): what the submit
    side finds, it finds through its venv and that."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUSERBASE"}
    env.update(PYTHONPATH=os.path.join(cluster["submit"], "shared"), LFM_SHIP_HOST="127.0.0.1",
               HOME=os.path.join(cluster["submit"], "home"),
               XDG_CACHE_HOME=os.path.join(cluster["submit"], "cache"))
    nodes = {k: cluster[k] for k in ("venv", "nodes", "hidden", "run")}
    done = subprocess.run([cluster["submit_python"], os.path.join(SHIPPING, "submit_layout.py"),
                           engine, json.dumps(nodes), str(CALLS)],
                          env=env, cwd=cluster["submit"], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-6000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def node_of(cluster, path):
    """The node whose storage holds `path`, which must be one of the nodes'."""
    nodes = os.path.realpath(cluster["nodes"])
    path = os.path.realpath(path)
    assert path.startswith(nodes + os.sep), f"{path} is not in a node's storage"
    return os.path.join(cluster["nodes"], os.path.relpath(path, nodes).split(os.sep)[0])


def assert_ran_from_the_pack(cluster, shipped):
    """Each call's value, its modules read from its node's copy of the pack (not from the
    submit side's files), and each node that ran one got the whole pack once."""
    print("shipped:", json.dumps(shipped))
    pack = shipped["pack"]
    wanted = {pack["hash"]} | {part["sha256"] for part in pack["parts"]}
    ran_on = set()
    for n, (value, described, *files) in enumerate(shipped["results"]):
        assert (value, described) == (3 * n + 100 + 1000, "layout_outside 1.0"), n
        assert [os.path.basename(file) for file in files] == ["__init__.py"] * 3
        for module, file in zip(("layout_outside", "layout_job", "layout_shared"), files):
            assert file not in pack["submit_files"], f"{module} ran from the submit side's {file}"
            ran_on.add(node_of(cluster, file))
    assert_shipped_once_per_node(cluster, wanted)
    for node in ran_on:
        got = {t["hash"] for t in transfers(node)}
        assert wanted <= got, f"{node} ran calls without the whole pack: {wanted - got}"


def test_parsl_htex_ships_a_layout_beyond_one_venv_to_bare_nodes(cluster):
    assert_ran_from_the_pack(cluster, submit(cluster, "parsl"))


def test_dask_ships_a_layout_beyond_one_venv_to_bare_nodes(cluster):
    assert_ran_from_the_pack(cluster, submit(cluster, "dask"))
