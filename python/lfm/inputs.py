"""A call's input size, known before it runs (docs/sizing.md "Input size"): what lfm's
input-aware sizing strategies size its memory from.

It is the bytes of the call's pickled arguments plus the size of every file an argument
names: an ``os.PathLike`` (``pathlib.Path``) or a string that is the path of an existing
regular file, at the top level or inside lists, tuples, sets and dict values. Directories
count nothing (walking one a string happens to name could take long); relative paths are
relative to the client's working directory.
"""

import os
import stat
from typing import Any, Dict, Iterator, Tuple

# Arguments looked at, at most: a list of a million numbers must not cost a million stats.
MAX_VALUES = 10_000


def input_bytes(args: Tuple, kwargs: Dict[str, Any], pickled: int) -> int:
    """`pickled` (the arguments' pickle's length) plus the sizes of the files they name."""
    return pickled + sum(_file_size(value) for value in _values((args, kwargs)))


def _values(root: Any) -> Iterator[Any]:
    pending, seen = [root], 0
    while pending and seen < MAX_VALUES:
        value = pending.pop()
        seen += 1
        if isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, (list, tuple, set, frozenset)):
            pending.extend(value)
        else:
            yield value


def _file_size(value: Any) -> int:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value or len(value) > 4096:
        return 0
    try:
        found = os.stat(value)
    except (OSError, ValueError):
        return 0
    return found.st_size if stat.S_ISREG(found.st_mode) else 0
