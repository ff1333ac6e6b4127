"""Compiled slices kept between `lfm call`s, so that a call whose file did not change neither
imports `ast` (~10 ms in a cold interpreter) nor parses and compiles its slice again.

lfm names the file (`"compiled"` in a slice target, under its cache directory, one per
interpreter, source file and line ranges) and keeps the directory's size bounded; this module
reads and writes it. An entry is used only when it was compiled by this same Python (the
bytecode's magic number, as in a `.pyc`) from this same source text (compared in full, not by
modification time) for these same ranges; anything else, unreadable or damaged included, means:
compile again and replace it. Writes are atomic (a temporary file, then a rename), and one
that fails only loses the entry.
"""

import marshal
import os
import sys

FORMAT = b"lfm-slice/1\n"


def magic():
    """This interpreter's bytecode magic number, from the import system already loaded (no
    import: importlib.util would cost more than the entry saves)."""
    bootstrap = sys.modules.get("_frozen_importlib_external")
    return getattr(bootstrap, "MAGIC_NUMBER", None)


def header():
    number = magic()
    return None if number is None else FORMAT + number


def load(cache_file, path, source, ranges):
    """The code stored in `cache_file` for `source` (bytes) and `ranges`, or None."""
    expected = header()
    if expected is None:
        return None
    try:
        with open(cache_file, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    if not data.startswith(expected):
        return None
    try:
        entry = marshal.loads(data[len(expected):])
        stored_path, stored_ranges, stored_source, code = entry
    except (EOFError, ValueError, TypeError):
        return None
    if (stored_path, stored_ranges, stored_source) != (path, ranges, source):
        return None
    return code


def store(cache_file, path, source, ranges, code):
    """Keep `code` as the slice of `source` (quietly not, where it cannot be written)."""
    prefix = header()
    if prefix is None:
        return
    data = prefix + marshal.dumps((path, ranges, source, code))
    temporary = f"{cache_file}.tmp-{os.getpid()}"
    try:
        with open(temporary, "wb") as handle:
            handle.write(data)
        os.replace(temporary, cache_file)
    except OSError:
        try:
            os.unlink(temporary)
        except OSError:
            pass
