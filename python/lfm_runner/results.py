"""How a returned value becomes a JSON result (docs/python.md, "Results").

`json` renders dicts, lists, tuples, str, int, float, bool and None. Scientific functions
return more, and these are rendered the way people expect:

- numpy scalars (``numpy.int64``, ``numpy.float32``, ``numpy.bool_``, ...) as the number, bool or
  string they hold (``.item()``);
- numpy arrays as (nested) lists, pandas ``Series`` as lists and ``DataFrame`` as a mapping of
  column name to list, each only up to ``MAX_ELEMENTS`` elements: a larger one is an error that
  points at ``--result-file``, as JSON of millions of numbers helps nobody;
- ``pathlib`` paths as their string; ``datetime``/``date``/``time``, pandas ``Timestamp`` and
  ``numpy.datetime64`` as ISO 8601 text; dataclass instances as a mapping of their fields.

Anything else is not JSON, and the caller gets the value as a pickle with the reason. numpy and
pandas are never imported here: a value is recognised by its type's module, and a module that
made the value is already loaded.
"""

from . import plainjson

# json is imported only for values plainjson leaves to it (~7 ms, for re and enum); dataclasses, datetime and pathlib are imported in `_render` only: it runs for values `json`
# cannot render, and a call's start pays for every import (dataclasses brings inspect).

MAX_ELEMENTS = 100_000


def dumps(value):
    """The JSON text of `value`; TypeError or ValueError when it has none."""
    try:
        return plainjson.dumps(value)
    except plainjson.NotPlain:
        import json

        return json.dumps(value, default=_render)


def _render(value):
    """A JSON-ready stand-in for `value`, which `json` could not render itself."""
    import dataclasses
    import datetime
    import pathlib

    package = type(value).__module__.partition(".")[0]
    if package == "numpy":
        return _numpy(value)
    if package == "pandas":
        return _pandas(value)
    if isinstance(value, pathlib.PurePath):
        return str(value)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
    raise TypeError(f"Object of type {_name(value)} is not JSON serializable")


def _numpy(value):
    kind = type(value).__name__
    if kind == "datetime64":
        return str(value)  # ISO 8601 at the value's own precision
    if kind == "timedelta64":
        # Its `.item()` is an int of the unit or a timedelta: neither says what it measures.
        raise TypeError(f"Object of type {_name(value)} is not JSON serializable")
    size = getattr(value, "size", None)
    if hasattr(value, "tolist") and getattr(value, "ndim", 0) > 0:
        _check_size(value, size)
        return value.tolist()
    if hasattr(value, "item"):
        item = value.item()
        if type(item).__module__ == type(value).__module__:
            raise TypeError(f"Object of type {_name(value)} is not JSON serializable")
        return item
    raise TypeError(f"Object of type {_name(value)} is not JSON serializable")


def _pandas(value):
    kind = type(value).__name__
    if kind == "Series":
        _check_size(value, value.size)
        return value.tolist()
    if kind == "DataFrame":
        _check_size(value, value.size)
        return {str(column): value[column].tolist() for column in value.columns}
    if kind == "Timestamp":
        return value.isoformat()
    raise TypeError(f"Object of type {_name(value)} is not JSON serializable")


def _check_size(value, size):
    if size is not None and size > MAX_ELEMENTS:
        raise ValueError(
            f"a {_name(value)} of {size:,} elements is more than the {MAX_ELEMENTS:,} a JSON "
            "result renders"
        )


def _name(value):
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"
