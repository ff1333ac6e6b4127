"""The scripts lfm runs with `python -c` in a target interpreter (python/lfm_probes)."""

import json
import os
import subprocess
import sys

PROBES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lfm_probes")


def probe(name):
    with open(os.path.join(PROBES, name)) as handle:
        return handle.read()


def test_the_interpreter_query_describes_this_interpreter():
    output = subprocess.run(
        [sys.executable, "-c", probe("interpreter.py")], capture_output=True, text=True, check=True
    )
    answer = json.loads(output.stdout)
    assert answer["version"] == ".".join(map(str, sys.version_info[:3]))
    assert answer["prefix"] == sys.prefix
    assert "json" in answer["stdlib_module_names"]
    assert "sys" in answer["builtin_module_names"]
    assert any(os.path.isfile(os.path.join(d, "os.py")) for d in answer["stdlib_dirs"])
    assert answer["markers"]["python_version"] == "%d.%d" % sys.version_info[:2]


def test_import_all_reports_each_module_and_its_error(tmp_path):
    (tmp_path / "fine.py").write_text("VALUE = 1\n")
    (tmp_path / "broken.py").write_text("raise RuntimeError('no')\n")
    request = {"paths": [str(tmp_path)], "modules": ["fine", "broken", "not_there_at_all"]}
    output = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe("import_all.py"), json.dumps(request)],
        capture_output=True,
        text=True,
        check=True,
    )
    results = dict(json.loads(output.stdout.splitlines()[-1]))
    assert results["fine"] is None
    assert results["broken"] == "RuntimeError: no"
    assert results["not_there_at_all"].startswith("ModuleNotFoundError")
