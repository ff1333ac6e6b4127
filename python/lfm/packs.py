"""pack=True: the function's pack, built once per function and source version by this client
(`lfm pack`, named by content hash), unpacked once per node by the serve that runs it."""

from __future__ import annotations

import inspect
import os
import sys
import threading
from typing import Callable, Dict, List, Tuple

from .cli import pack
from .errors import LfmError

_lock = threading.Lock()
_built: Dict[Tuple[str, str, float, bool, bool], str] = {}


def cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "lfm", "client-packs")


def pack_for(fn: Callable, self_contained: bool = False, parts: bool = False) -> str:
    """The path of `fn`'s pack, built from this interpreter's environment if not yet (with
    this interpreter itself in it when `self_contained`); with `parts`, its parts manifest,
    the parts of every function in one store (`parts_dir()`), so shared ones are written once."""
    file = inspect.getsourcefile(fn) if inspect.isfunction(fn) else None
    if file is None or "<" in fn.__qualname__:
        raise LfmError(
            f"pack=True needs a module-level function defined in a .py file, not {fn!r}"
        )
    file = os.path.realpath(file)
    key = (file, fn.__qualname__, os.path.getmtime(file), self_contained, parts)
    with _lock:
        if key not in _built:
            os.makedirs(cache_dir(), exist_ok=True)
            _built[key] = pack(_targets(fn, file), env=sys.prefix, cwd=cache_dir(),
                               closure=_closure(fn), self_contained=self_contained,
                               parts=parts_dir() if parts else None)
        return _built[key]


def parts_dir() -> str:
    return os.path.join(cache_dir(), "parts")


def _targets(fn: Callable, file: str) -> List[str]:
    """The function, and cloudpickle: the serve unpickles a function sent by value, and
    results that only it can pickle, with it."""
    return [f"{file}:{fn.__qualname__}", "cloudpickle.cloudpickle:dumps"]


def _closure(fn: Callable) -> str:
    """A script's function goes by value: what it reads is enough (`slice`). A module's goes
    by name: the serve imports its module (`import`, as by-reference pickles need)."""
    return "slice" if fn.__module__ == "__main__" else "import"
