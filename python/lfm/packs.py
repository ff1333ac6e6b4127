"""pack=True: the function's pack, built once per function and source version by this client
(`lfm pack`, named by content hash), unpacked once per node by the serve that runs it."""

from __future__ import annotations

import inspect
import os
import sys
import threading
from typing import Callable, Dict, Tuple

from .cli import pack
from .errors import LfmError

_lock = threading.Lock()
_built: Dict[Tuple[str, str, float], str] = {}


def cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "lfm", "client-packs")


def pack_for(fn: Callable) -> str:
    """The path of `fn`'s pack, built from this interpreter's environment if not yet."""
    file = inspect.getsourcefile(fn) if inspect.isfunction(fn) else None
    if file is None or "<" in fn.__qualname__:
        raise LfmError(
            f"pack=True needs a module-level function defined in a .py file, not {fn!r}"
        )
    file = os.path.realpath(file)
    key = (file, fn.__qualname__, os.path.getmtime(file))
    with _lock:
        if key not in _built:
            os.makedirs(cache_dir(), exist_ok=True)
            target = f"{file}:{fn.__qualname__}"
            _built[key] = pack(target, env=sys.prefix, cwd=cache_dir())
        return _built[key]
