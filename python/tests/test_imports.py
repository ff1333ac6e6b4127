"""The import log observes imports without changing them (lfm_runner.imports, issue 53): every
form of import real packages use sees, under the log and the runner's call path, what it sees
under plain python; the log still names what was loaded and imported; tracebacks hide lfm's
frames (issue 56 item 8)."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
FIXTURES = os.path.join(os.path.dirname(PYTHON_DIR), "tests", "fixtures", "imports")


def python(*args, cwd=None):
    """Run a fresh interpreter with the runner importable; its stdout, or fail with its stderr."""
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return done.stdout


def observed(mode, log_path=None):
    args = [os.path.join(HERE, "imports_harness.py"), mode, FIXTURES]
    return json.loads(python(*args, *([str(log_path)] if log_path else [])))


def log_lines(path):
    return [line.split("\t") for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def plain():
    return observed("plain")


@pytest.mark.parametrize("mode", ["log", "call"])
def test_every_form_sees_under_lfm_what_it_sees_under_plain_python(plain, mode, tmp_path):
    under_lfm = observed(mode, tmp_path / "imports.log")
    assert "failed" not in under_lfm, under_lfm.get("failed")
    assert under_lfm["uses"] == plain["uses"]
    for name, seen in plain["modules"].items():
        assert under_lfm["modules"][name] == seen, name
    # What the forms are: the comparison above covers them only if they load as intended.
    modules = plain["modules"]
    assert modules["ff_refusing"]["type"] == "ff_refusing.ConfigModule"
    assert modules["ff_replacer"]["type"] == "ff_replacer.Replacement"
    assert plain["uses"]["lazy_type_before_use"] == "_LazyModule"
    assert modules["_csv"]["loader"].endswith("ExtensionFileLoader")
    assert modules["ffzipped.inner"]["loader"] == "zipimport.zipimporter"
    assert modules["ffns"]["path"] == ["<fixtures>/site-packages/ffns", "<fixtures>/namespace_part2/ffns"]
    assert modules["ffedit"]["origin"] == "<fixtures>/editable_src/ffedit/__init__.py"


def test_the_log_names_every_form_with_its_origin(tmp_path):
    log = tmp_path / "imports.log"
    observed("call", log)
    lines = {fields[0]: fields[1:] for fields in reversed(log_lines(log))}
    site_packages = os.path.join(FIXTURES, "site-packages")
    assert lines["ff_refusing"] == [os.path.join(site_packages, "ff_refusing.py")]
    assert lines["ffedit"] == [os.path.join(FIXTURES, "editable_src", "ffedit", "__init__.py")]
    assert lines["ffns"] == [""] and lines["ff_six.moves"] == [""]
    assert lines["ffzipped.inner"][0].endswith("ffzip.zip/ffzipped/inner.py")
    assert lines["_csv"][0].endswith(".so")
    assert lines["json"][1:] == ["loaded"], "loaded before the call, imported by the user's module"


STATEMENTS = """
import json, sys
sys.path.insert(0, sys.argv[2])
import site
site.addsitedir(sys.argv[2] + "/site-packages")
from lfm_runner import imports
log = imports.start(sys.argv[1])
{body}
log.stop()
"""


def statements_log(tmp_path, body):
    log = tmp_path / "imports.log"
    python("-c", STATEMENTS.format(body=body), str(log), FIXTURES)
    return log_lines(log)


def test_an_installed_module_a_statement_loads_runs_with_the_interpreters_own_import(tmp_path):
    # ff_pep562's top level imports warnings (loaded at start-up): quietly, not as the call's.
    lines = statements_log(tmp_path, "import ff_pep562\nimport json")
    names = [fields[0] for fields in lines]
    assert "ff_pep562" in names and "warnings" not in names, lines
    # The statement returned: the next one of the user's code is logged again.
    assert ["json", json_origin(), "loaded"] in lines, lines


def test_an_installed_module_loaded_by_import_module_leaves_the_statements_logged(tmp_path):
    lines = statements_log(tmp_path, "import importlib\nimportlib.import_module('ff_pep562')\nimport json")
    assert ["json", json_origin(), "loaded"] in lines, lines


def json_origin():
    import json

    return json.__spec__.origin


def test_a_traceback_hides_lfms_frames_between_the_users_and_keeps_them_in_full(tmp_path):
    plain = subprocess.run(
        [sys.executable, "-c", "import failing; failing.import_broken()"],
        capture_output=True, text=True, cwd=FIXTURES,
    ).stderr
    request = {
        "target": {"mode": "import", "module": "failing", "root": FIXTURES, "qualname": "import_broken"},
        "result_file": str(tmp_path / "result"),
        "outcome_file": str(tmp_path / "outcome.json"),
        "import_log": str(tmp_path / "imports.log"),
    }
    script = f"import json; from lfm_runner import call; print(json.dumps(call.run({request!r})))"
    exception = json.loads(python("-c", script))["exception"]
    assert frames(exception["traceback"]) == frames(plain)[1:], exception["traceback"]
    assert "lfm_runner" not in exception["traceback"]
    assert "lfm_runner/imports.py" in exception["full_traceback"]
    assert exception["traceback"].splitlines()[-1] == plain.splitlines()[-1]


def frames(traceback_text):
    """The `File ..., line ..., in ...` lines of a traceback."""
    return [line.strip() for line in traceback_text.splitlines() if line.strip().startswith("File ")]


LEARN = """
import json, sys, site
site.addsitedir(sys.argv[1] + "/site-packages")
from lfm_runner import zygote
site_packages = sys.argv[1] + "/site-packages/"
modules = [["ff_lazy", site_packages + "ff_lazy.py"], ["ff_lazy_target", site_packages + "ff_lazy_target.py"]]
answer = zygote.learn(modules)
print(json.dumps([type(sys.modules["ff_lazy_target"]).__name__, answer["installed"]]))
"""


def test_the_zygote_learning_a_lazily_loaded_module_leaves_it_lazy():
    # ff_lazy loads ff_lazy_target with importlib.util.LazyLoader: plain python runs its top
    # level on first use, so a warm call must find it unloaded too.
    kind, installed = json.loads(python("-c", LEARN, FIXTURES))
    assert kind == "_LazyModule"
    assert installed == ["ff_lazy", "ff_lazy_target"], "both named as installed all the same"


def test_a_module_only_asked_for_is_not_logged_as_imported(tmp_path):
    """`importlib.util.find_spec` loads nothing: torch asks it for dill, transformers for dozens
    of packages; logged, a serve's zygote would import each of them (issue 53)."""
    log = tmp_path / "imports.log"
    code = (
        "import importlib.util, sys; from lfm_runner import imports; "
        f"log = imports.start({str(log)!r}); "
        "assert importlib.util.find_spec('wave') is not None; "
        "assert importlib.util.find_spec('ff_no_such_module') is None; "
        "import colorsys; "
        # The LazyLoader recipe loads from a spec it asked for: that module is logged.
        "spec = importlib.util.find_spec('quopri'); "
        "spec.loader = importlib.util.LazyLoader(spec.loader); "
        "m = importlib.util.module_from_spec(spec); sys.modules['quopri'] = m; "
        "spec.loader.exec_module(m); "
        "log.stop(); print('wave' in sys.modules)"
    )
    assert python("-c", code).strip() == "False"
    logged = [fields[0] for fields in log_lines(log)]
    assert "colorsys" in logged and "quopri" in logged, logged
    assert "wave" not in logged and "ff_no_such_module" not in logged, logged
