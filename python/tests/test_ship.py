"""Packs that travel (lfm.pack_transport, lfm.shipped_calls): the node-side fetch's checks, one
transfer per node, the shipped packs' budget, values a bare worker keeps closed. The multi-node run is test_ship_nodes.py."""

import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
import os
import pickle
import threading
import time

import pytest

from lfm import pack_transport, shipped_calls
from lfm.errors import LfmError
from lfm.node import node_cache
from lfm_shared.opaque import Opaque, opened


@pytest.fixture()
def node(tmp_path, monkeypatch):
    monkeypatch.setenv("LFM_NODE_CACHE", str(tmp_path / "node"))
    return tmp_path / "node"


def offered(tmp_path, data=b"pack bytes " * 100_000, served=None):
    """A pack file offered by this process's server (serving `served` bytes if given)."""
    path = tmp_path / "lfm-test.tar.zst"
    path.write_bytes(data if served is None else served)
    digest = hashlib.sha256(data).hexdigest()
    url = pack_transport.server("127.0.0.1").register(digest, str(path))
    python, abi = pack_transport.interpreter()
    return pack_transport.PackRef(digest, len(data), path.name, python, abi, url=url)


def test_node_cache_order(monkeypatch):
    monkeypatch.setenv("LFM_NODE_CACHE", "/scratch/lfm")
    assert node_cache() == "/scratch/lfm"
    monkeypatch.delenv("LFM_NODE_CACHE")
    monkeypatch.setenv("TMPDIR", "/local")
    assert node_cache() == f"/local/lfm-{os.getuid()}"
    monkeypatch.delenv("TMPDIR")
    assert node_cache() == f"/tmp/lfm-{os.getuid()}"


def test_a_pack_comes_once_by_url_and_checked(tmp_path, node):
    ref = offered(tmp_path)
    local = pack_transport.fetch(ref)
    assert open(local, "rb").read() == b"pack bytes " * 100_000
    assert pack_transport.fetch(ref) == local
    [transfer] = pack_transport.transfers()
    assert (transfer["hash"], transfer["bytes"], transfer["source"]) == (ref.hash, ref.size, "url")
    assert not os.access(local, os.W_OK) or os.geteuid() == 0
    assert oct(os.stat(local).st_mode & 0o777) == "0o444"


def test_concurrent_fetches_on_a_node_wait_for_one(tmp_path, node):
    ref = offered(tmp_path)
    paths = []
    threads = [threading.Thread(target=lambda: paths.append(pack_transport.fetch(ref))) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(paths)) == 1 and len(paths) == 6
    assert len(pack_transport.transfers()) == 1


def test_corrupt_bytes_never_enter_the_cache(tmp_path, node):
    ref = offered(tmp_path, served=b"something else entirely")
    with pytest.raises(LfmError, match="partial or corrupt transfer"):
        pack_transport.fetch(ref)
    assert sorted(os.listdir(node / "shipped")) == [ref.hash + ".lock"]


def test_a_visible_path_is_copied_and_a_dead_fetch_is_cleaned(tmp_path, node):
    ref = offered(tmp_path)
    ref = pack_transport.PackRef(**dict(ref.to_dict(), url=None, path=str(tmp_path / "lfm-test.tar.zst")))
    os.makedirs(node / "shipped")
    stale = node / "shipped" / f"{ref.hash}.part-1-1"
    stale.write_bytes(b"half")
    local = pack_transport.fetch(ref)
    assert not stale.exists()
    assert pack_transport.transfers()[0]["source"] == "path"
    assert hashlib.sha256(open(local, "rb").read()).hexdigest() == ref.hash


def test_no_source_and_an_unreachable_one_say_so(tmp_path, node):
    ref = offered(tmp_path)
    with pytest.raises(LfmError, match="no source"):
        pack_transport.fetch(pack_transport.PackRef(**dict(ref.to_dict(), url=None)))
    gone = pack_transport.PackRef(**dict(ref.to_dict(), url="http://127.0.0.1:9/x"))
    with pytest.raises(LfmError, match="could not get pack lfm-test.tar.zst onto this node"):
        pack_transport.fetch(gone)
    assert not (node / "shipped" / (ref.hash + ".tar.zst")).exists()


def test_a_full_node_cache_is_named(tmp_path, node):
    ref = offered(tmp_path)
    huge = pack_transport.PackRef(**dict(ref.to_dict(), size=1 << 60))
    with pytest.raises(LfmError, match="has no room for pack .*LFM_NODE_CACHE"):
        pack_transport.fetch(huge)


def test_another_interpreter_is_refused_naming_both(tmp_path):
    ref = offered(tmp_path)
    other = pack_transport.PackRef(**dict(ref.to_dict(), python="3.7", abi="cpython-37m-x86_64-linux-gnu"))
    with pytest.raises(LfmError, match=r"built for Python 3.7 .*this worker runs Python 3\.\d+"):
        pack_transport.check_interpreter(other)
    pack_transport.check_interpreter(pack_transport.PackRef(**dict(other.to_dict(), self_contained=True)))
    pack_transport.check_interpreter(ref)


def test_a_reference_with_unknown_fields_is_refused():
    with pytest.raises(LfmError, match="unknown field"):
        pack_transport.PackRef.from_dict({"hash": "x", "bogus": 1})


def test_a_value_that_cannot_open_here_stays_closed_and_opens_elsewhere():
    data = pickle.dumps(("x", 1))
    assert opened(data) == ("x", 1)
    foreign = b"\x80\x04cnosuchmodule_x\nThing\n."  # a class this interpreter cannot import
    closed = opened(foreign)
    assert isinstance(closed, Opaque) and "nosuchmodule_x" in closed.reason
    assert opened(pickle.dumps(closed)).data == foreign
    assert opened(pickle.dumps(Opaque(data))) == ("x", 1)


WORKER = """
import json, pickle, sys
from lfm import shipped_calls
try:
    print(json.dumps(shipped_calls.run(pickle.loads(sys.stdin.buffer.read()))))
except Exception as error:
    print(json.dumps({"refused": str(error)}))
"""


def other_python():
    import glob

    mine = "%d.%d" % sys.version_info[:2]
    found = [p for p in sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[0-3]*/bin/python3")))
             if f"/{mine}." not in p]
    return found[-1] if found else None


def test_a_worker_on_another_python_is_refused_or_runs_a_self_contained_pack(tmp_path, monkeypatch):
    """A worker on another Python: a pack built for ours fails naming both; a self-contained
    one (its own interpreter inside) runs."""
    import cloudpickle

    from lfm import calls

    python = other_python()
    if python is None:
        pytest.skip("no second CPython 3.10-3.13 under ~/.pyenv to be the worker's")
    project = tmp_path / "project"
    project.mkdir()
    (project / "shipfns.py").write_text("def add(a, b):\n    return a + b\n")
    monkeypatch.syspath_prepend(str(project))
    monkeypatch.setenv("LFM_SHIP_HOST", "127.0.0.1")
    import shipfns

    client = tmp_path / "client"  # what the worker has: lfm's client and cloudpickle
    shutil.copytree(os.path.dirname(cloudpickle.__file__), client / "cloudpickle")
    env = dict(os.environ, LFM_NODE_CACHE=str(tmp_path / "node"),
               PYTHONPATH=f"{os.path.dirname(os.path.dirname(pack_transport.__file__))}:{client}")
    for pack, expected in ((True, "refused"), (calls.SELF_CONTAINED, "ok")):
        prepared = shipped_calls.prepare(shipfns.add, (2, 3), {}, calls.Options(pack=pack))
        done = subprocess.run([python, "-c", WORKER], input=pickle.dumps(prepared), env=env,
                              capture_output=True, timeout=600, cwd=tmp_path)
        reply = json.loads(done.stdout.decode().strip().splitlines()[-1])
        if expected == "refused":
            mine = "%d.%d" % sys.version_info[:2]
            assert f"built for Python {mine}" in reply["refused"], reply
            assert os.path.basename(os.path.dirname(os.path.dirname(python))) [:4] in reply["refused"]
        else:
            ok, value, report = calls.outcome(reply)
            assert ok and value == 5, reply


def test_shipped_packs_over_the_budget_leave_least_recently_used_first(tmp_path, node, monkeypatch):
    shipped = node / "shipped"
    shipped.mkdir(parents=True)
    old = time.time() - 3600
    for age, name in enumerate(("a", "b", "c")):
        path = shipped / f"{name}.tar.zst"
        path.write_bytes(b"x" * 1000)
        os.utime(path, (old + age, old + age))  # a least recently used, c most
    recent = shipped / "r.tar.zst"
    recent.write_bytes(b"x" * 1000)  # used just now: a serve may be about to unpack it
    monkeypatch.setenv("LFM_PACK_CACHE_MAX", "3000")
    with open(shipped / "b.lock", "a") as held:  # someone holds b
        fcntl.flock(held, fcntl.LOCK_EX)
        ref = offered(tmp_path, data=b"y" * 1500)
        local = pack_transport.fetch(ref)
    left = sorted(os.listdir(shipped))
    assert "a.tar.zst" not in left and "c.tar.zst" not in left  # 5500 bytes -> 3500, the rest in use
    assert {"b.tar.zst", "r.tar.zst", os.path.basename(local)} <= set(left)
    monkeypatch.setenv("LFM_PACK_CACHE_MAX", "lots")
    with pytest.raises(LfmError, match="LFM_PACK_CACHE_MAX"):
        pack_transport.evict(str(shipped))


def shipped_bytes(directory):
    return sum(os.path.getsize(os.path.join(directory, name)) for name in os.listdir(directory)
               if name.endswith((".tar.zst", ".parts.json")))


def test_shipped_packs_stay_within_their_budget_fetch_after_fetch(tmp_path, node, monkeypatch):
    """The binary decides (lfm cache --shipped): after each transfer the least recently used
    leave until the shipped packs hold at most LFM_PACK_CACHE_MAX."""
    monkeypatch.setenv("LFM_PACK_CACHE_MAX", "2500")
    shipped, fetched = node / "shipped", []
    for round in range(5):
        (tmp_path / str(round)).mkdir()
        fetched.append(os.path.basename(pack_transport.fetch(
            offered(tmp_path / str(round), data=bytes([round]) * 1000))))
        assert shipped_bytes(shipped) <= 2500, sorted(os.listdir(shipped))
        for age, name in enumerate(reversed(fetched)):  # as if used an hour ago, in order
            if (shipped / name).exists():
                os.utime(shipped / name, (time.time() - 3600 - age,) * 2)
    left = sorted(name for name in os.listdir(shipped) if name.endswith(".tar.zst"))
    assert left == sorted(fetched[-2:])


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_disk_that_fills_during_the_transfer_leaves_nothing_and_names_the_cache(tmp_path, monkeypatch):
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)], check=True)
    try:
        monkeypatch.setenv("LFM_NODE_CACHE", str(small))
        monkeypatch.setattr(pack_transport, "_check_room", lambda ref, directory: None)  # as if it had room
        ref = offered(tmp_path, data=os.urandom(3 << 20))
        with pytest.raises(LfmError, match=f"node cache {small}/shipped has no room .*LFM_NODE_CACHE"):
            pack_transport.fetch(ref)
        assert os.listdir(small / "shipped") == [ref.hash + ".lock"]
        monkeypatch.undo()
        monkeypatch.setenv("LFM_NODE_CACHE", str(tmp_path / "roomy"))
        assert pack_transport.fetch(ref).startswith(str(tmp_path / "roomy"))  # the next task works
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_a_prepared_call_runs_in_the_workers_directory_when_asked(tmp_path, monkeypatch):
    from lfm import calls

    project = tmp_path / "project"
    project.mkdir()
    (project / "shipcwd.py").write_text("import os\n\ndef where(x):\n    return os.getcwd(), x\n")
    monkeypatch.syspath_prepend(str(project))
    monkeypatch.setenv("LFM_NODE_CACHE", str(tmp_path / "node"))
    monkeypatch.setenv("LFM_SHIP_HOST", "127.0.0.1")
    import shipcwd

    prepared = shipped_calls.prepare(shipcwd.where, ([1, 2],), {}, calls.Options(pack=True))
    workdir = tmp_path / "worker-cwd"
    workdir.mkdir()
    ok, value, _ = calls.outcome(shipped_calls.run(prepared, cwd=str(workdir)))
    assert ok and value == (str(workdir), [1, 2])
    ok, value, _ = calls.outcome(shipped_calls.run(prepared))
    assert ok and value[0] != str(workdir) and value[1] == [1, 2]


def _writable_rmtree(path):
    for root, dirs, _ in os.walk(path):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
    os.chmod(path, 0o755)
    shutil.rmtree(path)


def test_a_part_corrupted_on_the_node_is_fetched_again(tmp_path, node, monkeypatch):
    """Packs travel as parts; a part whose bytes went bad on the node's disk is refused when
    the environment is composed, removed, and fetched again."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "shipparts.py").write_text("def twice(x):\n    return 2 * x\n")
    monkeypatch.syspath_prepend(str(project))
    monkeypatch.setenv("LFM_SHIP_HOST", "127.0.0.1")
    import shipparts

    ref = pack_transport.offer(shipparts.twice)
    assert ref.parts and ref.name.endswith(".parts.json"), ref
    first = pack_transport.fetch(ref)
    assert pack_transport._composed(ref)
    part = next(p for p in ref.parts if p["name"] == "cloudpickle")
    blob = os.path.join(pack_transport.shipped_dir(), part["sha256"] + ".tar.zst")
    os.chmod(blob, 0o644)
    with open(blob, "r+b") as handle:
        handle.seek(100)
        handle.write(b"\0" * 64)
    for root in (ref.hash, part["sha256"]):
        _writable_rmtree(os.path.join(pack_transport.packs_cache(), root))
    assert pack_transport.fetch(ref) == first
    assert pack_transport._composed(ref)
    got = [t["hash"] for t in pack_transport.transfers()]
    assert got.count(part["sha256"]) == 2, got
    assert got.count(ref.hash) == 1, "the manifest was fine: fetched once"
