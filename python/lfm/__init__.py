"""lfm's Python client: run functions in the node's `lfm serve`, each call limited (memory,
cores, wall time, processes, disk) and measured (a Report), from plain Python
(`lfm.Executor`, `@lfm.task`), Parsl (`lfm.parsl`) or Dask (`lfm.dask`). docs/python.md."""

from .binary import find_binary
from .calls import Options
from .cli import analyze, pack
from .errors import (
    BinaryNotFound,
    CallError,
    LfmError,
    LimitExceeded,
    RemoteError,
    RemoteTraceback,
    SerializationError,
    ServeError,
)
from .executor import Executor, Future
from .task import task
from . import packs  # noqa: E402  (lfm.packs.cache_dir: where pack=True keeps its packs)

__all__ = [
    "BinaryNotFound", "CallError", "Executor", "Future", "LfmError", "LimitExceeded",
    "Options", "RemoteError", "RemoteTraceback", "SerializationError", "ServeError",
    "analyze", "find_binary", "pack", "task",
]
