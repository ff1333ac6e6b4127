"""What a function will import from installed distributions and the standard library, told
to the serve with each call (the request's `warm`, docs/serve.md "Warm calls") so that its
zygote imports them *before* it forks the call.

Without it, the zygote learns a call's modules from the call's import log, while or after the
call imports them itself: the first call and the zygote both pay the import (twice the CPU on
a busy node), and a second call sent as soon as the first returns waits for the zygote to
finish. Told first, the zygote imports once and every call, the first included, forks with
the modules loaded.

The modules named are those a function reads through its globals and closure (`pd` bound to
pandas, a function of an installed package) and those its body imports by absolute name
(`import numpy` inside a Parsl app), with their parent packages. Only modules found under the
interpreter's own directories go (the user's own modules' top level is the user's code, which
never runs in the zygote): the zygote checks that again, by the same rule
(lfm_shared.installed). A name the client cannot place is left to the import log.
"""

from __future__ import annotations

import dis
import functools
import importlib.util
import sys
import types
from typing import Any, Callable, List, Optional, Tuple

from lfm_shared.installed import is_installed

Warm = List[Tuple[str, Optional[str]]]
# A function whose hint would be longer is told the first ones: the rest come from its log.
MAX_MODULES = 64
_IMPORT_NAME = dis.opmap["IMPORT_NAME"]
# A task holding a partial holding the function: far enough.
WRAPPED_DEPTH = 3


def warm_modules(fn: Callable) -> Warm:
    """`[(module, file or None), ...]`, parents first, of installed or standard-library modules
    `fn` needs loaded (see the module's docstring). A callable that wraps a function (a Dask
    task's run_spec, a functools.partial: its `func`) is read with that function."""
    names: List[str] = []
    for _ in range(WRAPPED_DEPTH):
        names.extend(_function_modules(fn))
        fn = getattr(fn, "func", None)
        if fn is None or not callable(fn):
            break
    return list(_placed(tuple(dict.fromkeys(names))))


def _function_modules(fn: Any) -> List[str]:
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        return _owner_modules(fn)
    names = _owner_modules(fn)
    global_names, imported = _code_names(code)
    namespace = getattr(fn, "__globals__", {}) or {}
    for name in global_names:
        if name in namespace:
            names.extend(_owner_modules(namespace[name]))
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            names.extend(_owner_modules(cell.cell_contents))
        except ValueError:  # an empty cell
            continue
    names.extend(imported)
    return names


def _owner_modules(value: Any) -> List[str]:
    """The module `value` is, or the module a function or class (or a callable object's
    class) comes from."""
    if isinstance(value, types.ModuleType):
        return [value.__name__]
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
        module = getattr(value, "__module__", None)
    elif callable(value):
        module = getattr(type(value), "__module__", None)
    else:
        return []
    if isinstance(module, str) and module not in ("__main__", "builtins"):
        return [module]
    return []


@functools.lru_cache(maxsize=512)
def _code_names(code: types.CodeType) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """The names a code object (and those nested in it) may read as globals, and the modules
    it imports by absolute name. Code objects compare by value, so the same function
    unpickled for every task (Parsl, Dask) is read once."""
    names: List[str] = []
    imported: List[str] = []
    pending = [code]
    while pending:
        current = pending.pop()
        names.extend(current.co_names)
        imported.extend(_absolute_imports(current))
        pending.extend(c for c in current.co_consts if isinstance(c, types.CodeType))
    return tuple(dict.fromkeys(names)), tuple(dict.fromkeys(imported))


def _absolute_imports(code: types.CodeType) -> List[str]:
    """`import a.b` and `from a.b import c` with level 0: the level is the constant loaded two
    instructions before IMPORT_NAME."""
    found: List[str] = []
    recent: List[Any] = []
    for instruction in dis.get_instructions(code):
        if instruction.opcode == _IMPORT_NAME:
            if len(recent) >= 2 and recent[-2] == 0:
                found.append(instruction.argval)
            recent.clear()
        elif instruction.opname == "LOAD_CONST":
            recent.append(instruction.argval)
        elif instruction.opname not in ("CACHE", "EXTENDED_ARG"):
            recent.clear()
    return found


@functools.lru_cache(maxsize=1024)
def _placed(names: Tuple[str, ...]) -> Tuple[Tuple[str, Optional[str]], ...]:
    """Each name with its parents, parents first, where the module is the interpreter's own
    (stdlib, built in) or an installed distribution's; at most MAX_MODULES. Kept per set of
    names: the same function's calls name the same modules, and where each lies does not
    change while a workflow runs."""
    out: Warm = []
    seen = set()
    for name in names:
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):
            module = ".".join(parts[:depth])
            if module in seen:
                continue
            seen.add(module)
            place = _place(module)
            if place is None:
                break  # the user's own, or not found: nor its submodules
            out.append((module, place or None))
            if len(out) >= MAX_MODULES:
                return tuple(out)
    return tuple(out)


def _place(module: str) -> Optional[str]:
    """The module's file when it is installed or the stdlib's; "" when built in or a submodule
    whose file is not known yet (the zygote places it once its parent is loaded); None when
    it is the user's own or cannot be found."""
    loaded = sys.modules.get(module)
    if loaded is not None:
        file = getattr(loaded, "__file__", None)
        if file is None:
            return "" if module in sys.builtin_module_names or "." in module else None
        return file if _installed(file) else None
    if "." in module:
        return ""  # finding a submodule would import its parent here
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.origin in (None, "built-in", "frozen"):
        return "" if module in sys.builtin_module_names or spec.origin == "frozen" else None
    return spec.origin if _installed(spec.origin) else None


@functools.lru_cache(maxsize=4096)
def _installed(file: str) -> bool:
    return is_installed(file)
