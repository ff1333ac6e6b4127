"""Loading functions by slice, by import, by pickle (lfm_runner.target)."""
import base64
import pickle
import sys
import textwrap

import pytest

from lfm_runner import target

MODULE = textwrap.dedent(
    """\
    import json
    import a_module_that_is_not_installed
    try:
        import another_missing_one
    except ImportError:
        another_missing_one = None
    SCALE = 3


    def helper(x):
        return x * SCALE


    @staticmethod
    def decorated():
        return 1


    def train(n):
        return json.dumps(helper(n))
    """
)


@pytest.fixture
def module_file(tmp_path):
    path = tmp_path / "sliced_mod.py"
    path.write_text(MODULE)
    yield path
    sys.modules.pop("sliced_mod", None)


def spec(path, statements, qualname="train"):
    return {
        "mode": "slice",
        "module": "sliced_mod",
        "root": str(path.parent),
        "file": str(path),
        "qualname": qualname,
        "statements": statements,
    }


def test_a_slice_runs_only_the_statements_it_names(module_file):
    # import json (1), the try (3-6), SCALE (7), helper (10-11), train (19-20); not line 2.
    function = target.load(spec(module_file, [[1, 1], [3, 6], [7, 7], [10, 11], [19, 20]]))
    assert function(2) == "6"
    assert sys.modules["sliced_mod"].another_missing_one is None
    assert not hasattr(sys.modules["sliced_mod"], "decorated")


def test_importing_the_module_runs_its_whole_top_level(module_file):
    with pytest.raises(ModuleNotFoundError, match="a_module_that_is_not_installed"):
        target.load(dict(spec(module_file, []), mode="import"))


def test_a_decorated_definition_is_taken_with_its_decorators(module_file):
    tree = __import__("ast").parse(MODULE)
    kept = target.selected_statements(tree, [(14, 16)])
    assert [type(node).__name__ for node in kept] == ["FunctionDef"]
    assert target.selected_statements(tree, [(15, 16)]) == []


def test_a_statement_half_inside_a_range_is_not_taken(module_file):
    tree = __import__("ast").parse(MODULE)
    assert target.selected_statements(tree, [(3, 4)]) == []


def test_a_missing_attribute_names_the_module_and_the_name(module_file):
    with pytest.raises(target.TargetError, match="sliced_mod has no attribute 'nope'"):
        target.load(spec(module_file, [[1, 1]], qualname="nope"))


def test_a_pickled_function_loads():
    blob = base64.b64encode(pickle.dumps(len)).decode()
    assert target.load({"mode": "pickle", "pickle": blob})("abc") == 3


def test_registered_functions_are_found_by_name():
    target.REGISTERED["f"] = abs
    assert target.load({"mode": "registered", "name": "f"})(-2) == 2
    with pytest.raises(target.TargetError, match="no function registered as 'g'"):
        target.load({"mode": "registered", "name": "g"})


def test_a_zygote_compiles_a_slice_once_and_a_changed_file_again(module_file, monkeypatch):
    statements = [[1, 1], [3, 6], [7, 7], [10, 11], [19, 20]]
    monkeypatch.setattr(target, "COMPILED", {})
    target.remember(spec(module_file, statements))
    assert len(target.COMPILED) == 1
    compiled = []
    monkeypatch.setattr(target, "compile_slice", lambda t: compiled.append(t) or None)
    assert target.load(spec(module_file, statements))(2) == "6"
    assert compiled == [], "the call used the zygote's code"
    # Each call still runs its slice's statements in a fresh module.
    assert sys.modules["sliced_mod"].SCALE == 3
    module_file.write_text(MODULE.replace("SCALE = 3", "SCALE = 40"))
    monkeypatch.undo()
    monkeypatch.setattr(target, "COMPILED", dict(target.COMPILED))
    assert target.load(spec(module_file, statements))(2) == "80", "an edited file is compiled anew"


def test_remember_ignores_other_modes_and_unreadable_files(tmp_path, monkeypatch):
    monkeypatch.setattr(target, "COMPILED", {})
    target.remember({"mode": "import", "module": "json", "qualname": "dumps"})
    target.remember(spec(tmp_path / "missing.py", [[1, 1]]))
    target.remember(None)
    assert target.COMPILED == {}
