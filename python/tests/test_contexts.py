"""Contexts in the runner and the zygote (lfm_runner.contexts): loaded once in the zygote and
inherited by the calls forked after, loaded by a call forked before, a failing initialiser
leaving the zygote clean, and a GPU driver initialised in the zygote refused."""

import json
import os
import sys

import pytest

from lfm_runner import contexts
from test_zygote import call_request, done_of, message, start, started

STATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "state")


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A clean LOADED table, the fixtures importable, a fresh `model` module each test."""
    monkeypatch.setattr(contexts, "LOADED", {})
    monkeypatch.syspath_prepend(os.path.abspath(STATE))
    monkeypatch.syspath_prepend(os.path.join(os.path.abspath(STATE), "site-packages"))
    monkeypatch.setenv("MODEL_LOADS", str(tmp_path / "loads"))
    for name in ("model", "torch"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield tmp_path
    for name in ("model", "torch"):
        sys.modules.pop(name, None)


def test_a_context_is_named_module_colon_qualname(fresh):
    for bad in ("model", "model:", ":load", "a:b:c", 3):
        with pytest.raises(contexts.ContextError):
            contexts.resolve(bad)
    with pytest.raises(contexts.ContextError, match="has no nothing"):
        contexts.resolve("model:nothing")
    assert callable(contexts.resolve("model:load"))


def test_a_call_loads_a_context_it_did_not_find_then_finds_it(fresh):
    first = contexts.ensure("model:load")
    assert first["loaded"] == "call" and first["seconds"] >= 0.3
    assert contexts.ensure("model:load") == {"name": "model:load", "loaded": "zygote"}
    assert (fresh / "loads").read_text().count("\n") == 1


def test_a_failing_initialiser_leaves_the_zygote_as_it_was(fresh):
    answer = contexts.load_in_zygote("model:broken")
    assert answer["ok"] is False and "no model here" in answer["error"]["traceback"]
    assert "model" not in sys.modules, "the modules it imported are forgotten"
    assert "model:broken" not in contexts.LOADED


def test_a_context_that_initialises_a_device_is_refused(fresh):
    assert contexts.device_initialised() is None
    answer = contexts.load_in_zygote("model:with_device")
    assert answer["ok"] is False
    assert answer["device"] == "torch.cuda.is_initialized() is true"


def test_an_open_driver_file_counts_as_an_initialised_device(monkeypatch):
    monkeypatch.setattr(contexts.os, "listdir", lambda path: ["7"])
    monkeypatch.setattr(contexts.os, "readlink", lambda path: "/dev/nvidiactl")
    assert contexts.device_initialised() == "/dev/nvidiactl is open"


def context_call(tmp_path, name):
    call, request = call_request(tmp_path, name, "import model\ndef f():\n    return model.use()\n")
    request["context"] = "model:load"
    with open(call["request"], "w") as handle:
        json.dump(request, handle)
    return call


def test_the_zygote_loads_a_context_once_and_forks_calls_with_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.path.abspath(STATE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("MODEL_LOADS", str(tmp_path / "loads"))
    process, sock = start(tmp_path)
    try:
        assert message(sock)["op"] == "ready"
        sock.send(json.dumps(context_call(tmp_path, "before")).encode())
        _, (done,) = started(sock)
        before = done_of(done)["outcome"]
        assert before["context"]["loaded"] == "call" and before["context"]["seconds"] >= 0.3
        sock.send(json.dumps({"op": "context", "name": "model:load"}).encode())
        answer = message(sock)
        assert answer["op"] == "context" and answer["ok"] is True, answer
        sock.send(json.dumps(context_call(tmp_path, "after")).encode())
        _, (done,) = started(sock)
        after = done_of(done)["outcome"]
        assert after["ok"] is True and after["context"] == {"name": "model:load", "loaded": "zygote"}
        assert (tmp_path / "loads").read_text().count("\n") == 2, "the first call's and the zygote's"
    finally:
        sock.send(json.dumps({"op": "exit"}).encode())
        process.wait(timeout=30)


def test_a_zygote_that_learns_a_device_module_says_so_and_stops(tmp_path, monkeypatch):
    site = os.path.join(os.path.abspath(STATE), "site-packages")
    monkeypatch.setenv("PYTHONPATH", site + os.pathsep + os.environ.get("PYTHONPATH", ""))
    process, sock = start(tmp_path)
    try:
        assert message(sock)["op"] == "ready"
        modules = [["json", None], ["torch", os.path.join(site, "torch", "__init__.py")], ["csv", None]]
        sock.send(json.dumps({"op": "learn", "modules": modules}).encode())
        learned = message(sock)
        assert learned["device"] == {"module": "torch", "seen": "torch.cuda.is_initialized() is true"}
    finally:
        sock.send(json.dumps({"op": "exit"}).encode())
        process.wait(timeout=30)


def test_a_zygote_told_its_device_modules_never_learns_them(tmp_path, monkeypatch):
    site = os.path.join(os.path.abspath(STATE), "site-packages")
    monkeypatch.setenv("PYTHONPATH", site + os.pathsep + os.environ.get("PYTHONPATH", ""))
    from lfm_runner import zygote

    file, prefixes = os.path.join(site, "torch", "__init__.py"), (os.path.join(site, ""),)
    assert zygote.learnable("torch", file, prefixes)
    monkeypatch.setattr(zygote, "DEVICE_MODULES", {"torch"})
    assert not zygote.learnable("torch", file, prefixes)
    assert not zygote.learnable("torch.cuda", file, prefixes)


def test_a_preload_that_initialises_a_device_stops_the_zygote_with_why(tmp_path, monkeypatch):
    site = os.path.join(os.path.abspath(STATE), "site-packages")
    monkeypatch.setenv("PYTHONPATH", site + os.pathsep + os.environ.get("PYTHONPATH", ""))
    process, sock = start(tmp_path, preload=["torch"])
    try:
        failed = message(sock)
        assert failed["op"] == "failed"
        assert "GPU driver was initialised in the zygote" in failed["error"]["message"]
    finally:
        process.wait(timeout=30)


def test_a_sliced_function_sees_the_state_its_context_left(fresh):
    from lfm_runner import target as targets

    contexts.ensure("model:load")
    sliced = {"mode": "slice", "module": "model", "root": None, "qualname": "use",
              "file": os.path.join(os.path.abspath(STATE), "model.py"), "statements": [[1, 10_000]]}
    assert targets.load(sliced, reuse_loaded=True)() == 1
    # Without a context a slice runs in a fresh module: the global is the file's own None.
    with pytest.raises(TypeError):
        targets.load(sliced)()


def test_the_client_names_a_context_by_reference_and_refuses_what_a_node_cannot_import():
    from lfm import calls

    import client_functions

    options = calls.Options(context=client_functions.double)
    assert options.context == "client_functions:double"
    assert calls.Options(context="pkg.mod:Loader.load").context == "pkg.mod:Loader.load"
    with pytest.raises(ValueError, match="top level of an importable module"):
        calls.Options(context=lambda: None)
    main_function = type(client_functions.double)(client_functions.double.__code__, {})
    main_function.__module__ = "__main__"
    with pytest.raises(ValueError, match="top level of an importable module"):
        calls.Options(context=main_function)
    for bad in ("load", "m:", "a:b:c"):
        with pytest.raises(ValueError, match="module:qualname"):
            calls.Options(context=bad)
    fields = calls.call_fields(client_functions.double, (1,), {}, options)
    assert fields["context"] == "client_functions:double"
    assert "context" not in calls.call_fields(client_functions.double, (1,), {}, calls.Options())


def test_parsl_and_dask_take_the_context_option():
    pytest.importorskip("parsl")
    pytest.importorskip("distributed")
    from lfm import dask as lfm_dask
    from lfm import parsl as lfm_parsl

    import client_functions

    options = lfm_parsl.options_from_spec(client_functions.double, {"context": "m:load"})
    assert options.context == "m:load"
    plugin = lfm_dask.LfmPlugin(context=client_functions.double)
    assert plugin.context == "client_functions:double"
