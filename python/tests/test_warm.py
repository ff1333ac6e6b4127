"""What the client tells the serve a function will import (lfm/warm.py)."""

import json
import os
import types

import pytest

import client_functions as user_module  # the tests' own code: never warmed
from lfm import warm
from lfm.warm import warm_modules


def names(fn):
    return [name for name, _ in warm_modules(fn)]


def test_modules_read_through_globals_and_imported_in_the_body_with_their_parents():
    def fn(text):
        import xml.dom.minidom
        from email import message

        return json.loads(text), os.sep, xml.dom.minidom, message

    found = names(fn)
    for expected in ("json", "os", "xml", "xml.dom", "xml.dom.minidom", "email"):
        assert expected in found, found
    assert found.index("xml") < found.index("xml.dom") < found.index("xml.dom.minidom")


def test_files_are_the_interpreters_own_or_null_for_submodules_not_loaded_yet():
    def fn():
        import wsgiref.simple_server  # noqa: F401

    placed = dict(warm_modules(fn))
    assert placed["wsgiref"].endswith(os.path.join("wsgiref", "__init__.py"))
    assert "wsgiref.simple_server" in placed  # its file is found once wsgiref is loaded


def test_an_installed_function_names_its_own_module():
    from _pytest.outcomes import importorskip  # pytest: an installed distribution

    assert names(importorskip)[:2] == ["_pytest", "_pytest.outcomes"]


def test_the_users_own_modules_and_relative_imports_are_never_named():
    def fn():
        from . import sibling  # noqa: F401
        import client_functions  # noqa: F401

        return user_module.double(2)

    found = names(fn)
    assert "client_functions" not in found and "sibling" not in found, found
    assert names(user_module.double) == [], "a function of the user's own module"


def test_closure_cells_and_classes_count():
    from collections import OrderedDict

    def outer():
        kind = OrderedDict

        def inner():
            return kind()

        return inner

    assert "collections" in names(outer())


def test_builtins_and_values_without_a_module_are_left_out():
    def fn(x):
        return len(x) + int("3")

    assert names(fn) == []
    assert warm_modules(print) == []
    assert warm_modules(types.SimpleNamespace()) == []


def test_a_function_unpickled_again_is_read_from_the_cache():
    import pickle

    import cloudpickle

    def fn():
        import json  # noqa: F401

    warm._code_names.cache_clear()
    copy = pickle.loads(cloudpickle.dumps(fn))
    assert copy.__code__ is not fn.__code__
    names(fn)
    names(copy)
    assert warm._code_names.cache_info().hits == 1


def test_the_hint_is_bounded(monkeypatch):
    monkeypatch.setattr(warm, "MAX_MODULES", 3)
    warm._placed.cache_clear()

    def fn():
        import json  # noqa: F401
        import csv  # noqa: F401
        import xml.dom  # noqa: F401

    assert len(warm_modules(fn)) == 3


@pytest.mark.parametrize("level", [1, 2])
def test_absolute_imports_are_told_apart_from_relative_ones(level):
    code = compile(f"from {'.' * level}pkg import x\nimport abc\n", "<test>", "exec")
    assert warm._absolute_imports(code) == ["abc"]


def test_a_callable_wrapping_a_function_is_read_with_it():
    import functools

    def fn():
        import json  # noqa: F401

    class Task:  # as a Dask task's run_spec holds its function
        def __init__(self, func):
            self.func = func

        def __call__(self):
            return self.func()

    assert "json" in names(functools.partial(fn))
    assert "json" in names(Task(functools.partial(fn)))


def test_a_callable_that_fails_to_be_read_goes_without_a_hint():
    from lfm import calls

    class Proxy:
        def __getattr__(self, name):
            raise RuntimeError(f"no {name} here")

        def __call__(self):
            return 1

    assert calls._warm_fields(Proxy()) == {}
