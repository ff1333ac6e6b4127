"""One call's outcome files (lfm_runner.call)."""
import base64
import json
import os
import pickle

from lfm_runner import call


def request(tmp_path, module_text, qualname, args=([], {}), result_format="json"):
    module = tmp_path / "callee.py"
    module.write_text(module_text)
    return {
        "target": {"mode": "import", "module": "callee", "root": str(tmp_path), "qualname": qualname},
        "args": {"json": list(args)},
        "result": {"format": result_format},
        "result_file": str(tmp_path / "result"),
        "outcome_file": str(tmp_path / "outcome.json"),
    }


def outcome(tmp_path):
    return json.loads((tmp_path / "outcome.json").read_text())


def test_a_returned_value_is_written_as_json(tmp_path, monkeypatch):
    monkeypatch.delitem(__import__("sys").modules, "callee", raising=False)
    req = request(tmp_path, "def f(a, b=0):\n    return {'sum': a + b}\n", "f", ([1], {"b": 2}))
    assert call.run(req)["ok"]
    assert json.loads((tmp_path / "result").read_text()) == {"sum": 3}
    result = outcome(tmp_path)["result"]
    assert result == {"type": "builtins.dict", "format": "json", "bytes": 10}
    assert len(outcome(tmp_path)["io"]) == 2


def test_an_exception_is_described_without_the_runners_frames(tmp_path, monkeypatch):
    monkeypatch.delitem(__import__("sys").modules, "callee", raising=False)
    req = request(tmp_path, "def f():\n    raise KeyError('k')\n", "f")
    described = call.run(req)
    assert not described["ok"]
    assert described["stage"] == "call"
    exception = described["exception"]
    assert exception["type"] == "KeyError"
    assert "lfm_runner" not in exception["traceback"]
    assert "callee.py" in exception["traceback"]


def test_sys_exit_in_the_function_is_an_exception_not_an_exit(tmp_path, monkeypatch):
    monkeypatch.delitem(__import__("sys").modules, "callee", raising=False)
    req = request(tmp_path, "import sys\ndef f():\n    sys.exit(4)\n", "f")
    assert call.run(req)["exception"]["type"] == "SystemExit"


def test_a_value_that_is_not_json_falls_back_to_a_pickle(tmp_path, monkeypatch):
    monkeypatch.delitem(__import__("sys").modules, "callee", raising=False)
    req = request(tmp_path, "def f():\n    return {1, 2}\n", "f")
    result = call.run(req)["result"]
    assert result["format"] == "pickle" and "not JSON serializable" in result["not_json"]
    assert pickle.loads((tmp_path / "result").read_bytes()) == {1, 2}


def test_an_unpicklable_value_is_a_result_stage_exception(tmp_path, monkeypatch):
    monkeypatch.delitem(__import__("sys").modules, "callee", raising=False)
    body = "import threading\ndef f():\n    return threading.Lock()\n"
    req = request(tmp_path, body, "f", result_format="pickle")
    described = call.run(req)
    assert described["stage"] == "result"


def test_values_of_classes_and_functions_made_in_the_call_are_pickled_by_value(tmp_path, monkeypatch):
    # As the client sends arguments (cloudpickle): pickle could name neither.
    monkeypatch.delitem(__import__("sys").modules, "callee", raising=False)
    body = "def f():\n    class Local:\n        x = 5\n    return Local(), lambda: 6\n"
    req = request(tmp_path, body, "f", result_format="pickle")
    assert call.run(req)["ok"]
    instance, function = pickle.loads((tmp_path / "result").read_bytes())
    assert instance.x == 5 and function() == 6


def test_arguments_with_a_working_directory_move_the_call_there(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    where = str(tmp_path / "elsewhere")
    spec = {"pickle": base64.b64encode(pickle.dumps(([1], {}, {"cwd": where}))).decode()}
    assert call.read_arguments(spec) == ([1], {})
    assert os.getcwd() == where


def test_arguments_come_from_a_pickle_file(tmp_path):
    path = tmp_path / "args.pkl"
    path.write_bytes(pickle.dumps(([1, 2], {"x": 3})))
    assert call.read_arguments({"pickle_file": str(path)}) == ([1, 2], {"x": 3})


def test_the_import_log_lists_what_the_call_loaded_as_it_happens(tmp_path, monkeypatch):
    monkeypatch.delitem(__import__("sys").modules, "callee", raising=False)
    monkeypatch.delitem(__import__("sys").modules, "colorsys", raising=False)
    body = "def f():\n    import colorsys\n    import no_such_module_anywhere\n"
    req = request(tmp_path, body, "f")
    req["import_log"] = str(tmp_path / "imports.log")
    assert call.run(req)["exception"]["type"] == "ModuleNotFoundError"
    lines = [line.split("\t") for line in (tmp_path / "imports.log").read_text().splitlines()]
    names = [line[0] for line in lines]
    assert names[:1] == ["callee"]
    assert "colorsys" in names
    origin = {line[0]: line[1] for line in lines}
    assert origin["colorsys"].endswith("colorsys.py")
    assert origin["no_such_module_anywhere"] == "!"
    # The stdlib module loaded with the interpreter's own __import__ keeps its real loader.
    colorsys = __import__("sys").modules["colorsys"]
    assert type(colorsys.__loader__).__name__ == "SourceFileLoader"
    assert colorsys.__spec__.loader is colorsys.__loader__


def test_modules_loaded_before_the_call_are_logged_when_it_imports_them(tmp_path, monkeypatch):
    import builtins
    import sys

    monkeypatch.delitem(sys.modules, "callee", raising=False)
    assert "json" in sys.modules and "os.path" in sys.modules
    body = "def f():\n    import json\n    from os import path\n    return json.dumps(path.sep)\n"
    req = request(tmp_path, body, "f")
    req["import_log"] = str(tmp_path / "imports.log")
    before = builtins.__import__
    assert call.run(req)["ok"]
    lines = [line.split("\t") for line in (tmp_path / "imports.log").read_text().splitlines()]
    names = [line[0] for line in lines]
    assert "json" in names and "os.path" in names and "os" in names
    assert names.count("json") == 1
    assert all(line[2:] == ["loaded"] for line in lines if line[0] in ("json", "os.path"))
    # The log ends with the call: the runner's own imports after it are not the call's.
    assert builtins.__import__ is before
    assert not any(type(f).__name__ == "ImportLog" for f in sys.meta_path)


def test_a_forked_calls_own_memory_peak_is_counted_even_when_freed_before_it_returns(tmp_path, monkeypatch):
    monkeypatch.delitem(__import__("sys").modules, "callee", raising=False)
    text = "def spike(mib):\n    data = bytearray(b'x') * (mib << 20)\n    del data\n    return 0\n"
    outcome, _ = call.execute(request(tmp_path, text, "spike", ([64], {})), forked=True)
    assert outcome["ok"]
    grown = outcome["memory_growth"]
    assert 56 << 20 <= grown < 96 << 20, grown  # pages the heap had free are reused
    # The high-water mark is reset at each call's start: a small call after the spike is small.
    outcome, _ = call.execute(request(tmp_path, text, "spike", ([1], {})), forked=True)
    assert outcome["ok"] and outcome["memory_growth"] < 32 << 20
    # A call in a process of its own leaves its VmHWM whole (its monitor reads it).
    assert call.execute(request(tmp_path, text, "spike", ([1], {})))[0]["memory_growth"] is None
    # A forked call whose cgroup keeps the kernel's peak is told not to measure its own.
    told = dict(request(tmp_path, text, "spike", ([1], {})), memory_growth=False)
    outcome, _ = call.execute(told, forked=True)
    assert outcome["ok"] and outcome["memory_growth"] is None
