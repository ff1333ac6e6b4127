"""Loading the function a call runs.

Three ways, named by the request's `mode`:
- `slice`: execute only the module-level statements the function needs (line ranges computed by
  lfm's analyzer, in source order) in a fresh module registered under the module's real name.
  An unused heavy import at the top of the file costs nothing, and a per-function pack is enough.
- `import`: import the module normally (its whole top level runs).
- `pickle`: a pickled function (cloudpickle for `__main__` functions, lambdas and closures).
- `registered`: a function the zygote of `lfm serve` already loaded (one of the above).
"""

import importlib
import os
import sys
import types

from . import compiled

# ast, base64 and pickle are imported by the modes that need them (start-up time is per call).


#: Functions a zygote loaded once, by the name lfm registered them under.
REGISTERED = {}

#: Slices a zygote compiled for the children it forks later: (file, size, mtime_ns, ranges) ->
#: code. Compiling runs no user code; each call still executes its slice in its own child.
COMPILED = {}


class TargetError(Exception):
    """The function could not be loaded: names the file, line or attribute."""


def load(target, reuse_loaded=False):
    """The function `target` names. `reuse_loaded`: a slice's module that this process has
    loaded already from the same file (a context's initialiser imported it) is used as it is,
    so the function sees the state the initialiser left in its globals."""
    mode = target.get("mode")
    if mode == "registered":
        try:
            return REGISTERED[target["name"]]
        except KeyError:
            raise TargetError(f"no function registered as {target['name']!r}") from None
    if mode == "pickle":
        import base64
        import pickle

        return pickle.loads(base64.b64decode(target["pickle"]))
    root = target.get("root")
    if root and root not in sys.path:
        sys.path.insert(0, root)
    if mode == "import":
        module = importlib.import_module(target["module"])
    elif mode == "slice":
        module = loaded_module(target) if reuse_loaded else None
        if module is None:
            module = load_slice(target)
    else:
        raise TargetError(f"unknown target mode {mode!r}")
    return resolve(module, target["qualname"])


def resolve(module, qualname):
    value = module
    for part in qualname.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise TargetError(
                f"{module.__name__} has no attribute {qualname!r} (missing: {part!r})"
            ) from None
    return value


def selected_statements(tree, ranges):
    """Top-level statements that lie within one of the (start, end) line ranges."""
    keep = []
    for node in tree.body:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        last = node.end_lineno or node.lineno
        if any(start <= first and last <= end for start, end in ranges):
            keep.append(node)
    return keep


def slice_source_lines(source, ranges):
    """The slice as text, for `lfm call --show-slice`."""
    import ast

    tree = ast.parse(source)
    lines = source.splitlines()
    out = []
    for node in selected_statements(tree, ranges):
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        out.extend(f"{n:5} | {lines[n - 1]}" for n in range(first, node.end_lineno + 1))
    return out


def slice_key(target):
    """The compiled-slice cache's key for this file as it is now; None if it cannot be read."""
    try:
        stat = os.stat(target["file"])
    except OSError:
        return None
    ranges = tuple(tuple(r) for r in target["statements"])
    return (target["file"], stat.st_size, stat.st_mtime_ns, ranges)


def compile_slice(target):
    """The slice's code: from the compiled-slice file lfm named in the target (`compiled`,
    see compiled.py) when it holds this source's, else compiled now and stored there."""
    path = target["file"]
    ranges = tuple(tuple(r) for r in target["statements"])
    try:
        with open(path, "rb") as handle:
            source = handle.read()
    except OSError as error:
        raise TargetError(f"cannot read {path}: {error}") from error
    cache_file = target.get("compiled")
    code = compiled.load(cache_file, path, source, ranges) if cache_file else None
    if code is None:
        code = compile_source(path, source, ranges)
        if cache_file:
            compiled.store(cache_file, path, source, ranges, code)
    return code


def compile_source(path, source, ranges):
    import ast

    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as error:
        raise TargetError(f"cannot read {path}: {error}") from error
    body = selected_statements(tree, ranges)
    return compile(ast.Module(body=body, type_ignores=[]), path, "exec")


def remember(target):
    """Compile a slice target's code ahead of its load: in a zygote, after forking a call, for
    the next calls of it (a file that changes gets a new key, so an edited function is
    compiled again); in a call, before its import log starts."""
    if not isinstance(target, dict) or target.get("mode") != "slice":
        return
    key = slice_key(target)
    if key is None or key in COMPILED:
        return
    try:
        COMPILED[key] = compile_slice(target)
    except Exception:  # noqa: BLE001 - the call itself reports a broken file
        pass


def loaded_module(target):
    """The module a slice target names, when this process loaded it from the target's file."""
    module = sys.modules.get(target["module"])
    file = getattr(module, "__file__", None) if module is not None else None
    if file and os.path.realpath(file) == os.path.realpath(target["file"]):
        return module
    return None


def load_slice(target):
    path = target["file"]
    name = target["module"]
    key = slice_key(target)
    code = COMPILED.get(key) if key is not None else None
    if code is None:
        code = compile_slice(target)
    module = types.ModuleType(name)
    module.__file__ = path
    module.__package__ = name.rpartition(".")[0]
    if module.__package__:
        # Relative imports and `pkg.mod` pickles need the real parent package.
        importlib.import_module(module.__package__)
    sys.modules[name] = module
    exec(code, module.__dict__)
    return module
