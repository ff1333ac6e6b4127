"""The client's modules import one another at module level only, without a circle, and never
the runner: each imports on its own in a fresh interpreter. What both sides need is in
lfm_shared, which imports neither."""

import ast
import os
import subprocess
import sys

import pytest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OWN_PACKAGES = ("lfm", "lfm_shared", "lfm_runner")


def modules(package):
    """{dotted name: parsed source} of a package's modules."""
    directory = os.path.join(PYTHON_DIR, package)
    found = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".py"):
            stem = name[:-3]
            dotted = package if stem == "__init__" else f"{package}.{stem}"
            with open(os.path.join(directory, name)) as handle:
                found[dotted] = ast.parse(handle.read(), name)
    return found


def imported(node, module):
    """The dotted names an import statement in `module` imports (relative ones resolved)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level == 0:
        return [node.module]
    base = module.split(".")[: -node.level] if "." in module else [module]
    if node.module:
        return [".".join(base + [node.module])]
    return [".".join(base + [alias.name]) for alias in node.names]


def own(name):
    return name.split(".")[0] in OWN_PACKAGES


def function_level_imports(package):
    """`module:line name` of every import of lfm's own packages inside a function."""
    found = []
    for module, tree in modules(package).items():
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    found += [f"{module}:{node.lineno} {name}" for name in imported(node, module)
                              if own(name)]
    return found


def every_import(package):
    """{module: own modules it imports anywhere, in a function or not}."""
    return {module: {name for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                     for name in imported(node, module) if own(name)}
            for module, tree in modules(package).items()}


def import_graph(package):
    """{module: own modules it imports, at its top level or in a function} (the package itself
    left out: every submodule imports it first, and it imports them)."""
    return {module: sorted(targets - {package}) for module, targets in every_import(package).items()}


def a_circle(graph):
    """One import circle of `graph` as a list of modules, or None."""
    state = {}

    def visit(module, path):
        state[module] = "open"
        for target in graph.get(module, ()):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state:
                circle = visit(target, path + [target])
                if circle:
                    return circle
        state[module] = "done"
        return None

    for module in graph:
        if module not in state:
            circle = visit(module, [module])
            if circle:
                return circle
    return None


@pytest.mark.parametrize("package", ["lfm", "lfm_shared"])
def test_no_function_imports_an_own_module(package):
    assert function_level_imports(package) == []


@pytest.mark.parametrize("package", ["lfm", "lfm_shared"])
def test_the_modules_import_one_another_without_a_circle(package):
    assert a_circle(import_graph(package)) is None


def test_the_circle_finder_finds_one():
    assert a_circle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]
    assert a_circle({"a": ["b", "c"], "b": ["c"], "c": []}) is None


def test_the_client_never_imports_the_runner_nor_the_shared_package_either_side():
    reaching = {module: sorted(targets) for module, targets in every_import("lfm").items()
                if any(t.split(".")[0] == "lfm_runner" for t in targets)}
    reaching.update({module: sorted(targets) for module, targets in every_import("lfm_shared").items()
                     if any(t.split(".")[0] != "lfm_shared" for t in targets)})
    assert reaching == {}


@pytest.mark.parametrize("module", sorted(modules("lfm")) + sorted(modules("lfm_shared")))
def test_each_module_imports_on_its_own_in_a_fresh_interpreter(module):
    code = ("import importlib, sys; importlib.import_module(sys.argv[1]); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'lfm_runner'))")
    done = subprocess.run([sys.executable, "-c", code, module], capture_output=True, text=True,
                          cwd=PYTHON_DIR, env=dict(os.environ, PYTHONPATH=PYTHON_DIR))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"{module} loads the runner: {done.stdout}"
