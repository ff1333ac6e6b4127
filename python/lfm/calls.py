"""One call as the serve protocol (docs/serve.md) wants it, and its reply as a value or an
exception. Functions importable on the worker go by name (`pkg.mod:func`, run from their
slice); the others (`__main__`, lambdas, closures) by cloudpickle. Arguments are
cloudpickles; results and exceptions pickles, or cloudpickles when pickle cannot make them
(lfm_runner.call.dumps); all load with `pickle.loads`."""

from __future__ import annotations

import base64
import inspect
import math
import os
import pickle
import re
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union

import cloudpickle

from .errors import (
    CallError,
    LfmError,
    LimitExceeded,
    RemoteError,
    RemoteTraceback,
    Report,
    SerializationError,
)
from .inputs import input_bytes
from .warm import warm_modules

Size = Union[str, int, float, None]
# Arguments whose pickle is larger go to the serve as a file, not base64 in the request line.
ARGS_INLINE_MAX = 1 << 20
LIMIT_KEYS = ("memory", "cores", "wall", "processes", "disk", "gpus", "gpu_memory")
SIZE_KEYS = ("memory", "disk", "gpu_memory")
# The smallest memory limit a call is let ask for. A forked call's own memory (what it copies
# on write of the zygote's pages, and the runner's work) is 1.0-1.2 MiB for `return 2 * x`
# measured here, so under a 1 MiB limit even that fails or passes by chance: a limit no
# Python call can be relied on to run under is refused before anything runs.
MEMORY_MIN = 4 << 20
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
          "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
          "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}
# A limit written without a unit below this is a unit left out (`memory=2` meant 2G): refused,
# as the serve's parser refuses it (monitor/src/limits.rs BARE_LIMIT_MIN).
BARE_LIMIT_MIN = 4 << 20
# Both parsers are checked against the same vectors: tests/fixtures/sizes.json.
_NUMBER_THEN_UNIT = re.compile(r"([0-9.]*)(.*)", re.DOTALL)


class SizeError(ValueError):
    """A size lfm does not take; `kind` as tests/fixtures/sizes.json names it: `not-a-size`,
    `not-positive` or `bare-number-too-small`."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def parse_size(key: str, value: Union[str, int, float]) -> int:
    """The bytes a size means (`"2G"`, `"1.5 MiB"`, 1000: K/M/G/T are powers of 1024), read
    as the serve reads it: a leading decimal number, then the unit."""
    if isinstance(value, str):
        number_text, unit_text = _NUMBER_THEN_UNIT.match(value.strip()).groups()
        unit = _UNITS.get(unit_text.strip().lower())
        try:
            number = float(number_text)
        except ValueError:
            unit = None
        if unit is None:
            raise SizeError("not-a-size", f"{key}: {value!r} is not a size "
                            "(examples: 512M, 2G, 1.5GiB, 1048576)")
    else:
        number, unit = float(value), 1
    size = number * unit
    if not math.isfinite(size) or size < 1:
        raise SizeError("not-positive", f"{key}: must be greater than zero (got {value!r})")
    return int(size)


def limit_size(key: str, value: Union[str, int, float]) -> int:
    """A size given as a limit: `parse_size`, and a bare number below 4 MiB is refused."""
    size = parse_size(key, value)
    unitless = not isinstance(value, str) or not value.strip().lstrip("0123456789.")
    if unitless and size < BARE_LIMIT_MIN:
        raise SizeError("bare-number-too-small",
                        f"{key}: {value!r} is less than 4 MiB and has no unit: write one "
                        "(examples: 512M, 2G, 1.5GiB, 4194304)")
    return size


def size_bytes(value: Union[str, int, float]) -> Optional[float]:
    """The bytes a size means, None for one `parse_size` does not take."""
    try:
        return float(parse_size("size", value))
    except SizeError:
        return None


SELF_CONTAINED = "self-contained"


@dataclass(frozen=True)
class Options:
    """What a call asks of lfm: its limits, its category, and whether sizing picks the memory
    (`auto`, run again larger at most `max_retries` times: default the serve's, 3) or a pack
    carries the function (`pack`: True, or "self-contained" for a pack with its own
    interpreter, which runs on nodes whose Python differs)."""

    memory: Size = None
    cores: Size = None
    wall: Size = None
    processes: Size = None
    disk: Size = None
    gpus: Optional[int] = None
    gpu_memory: Size = None
    category: Optional[str] = None
    pack: Union[bool, str] = False
    auto: bool = False
    max_retries: Optional[int] = None
    # An initialiser (a function, or its "module:qualname") run once per node's zygote: the
    # calls fork with the state it made (docs/python.md "Contexts"). Kept as the name.
    context: Union[str, Callable[[], Any], None] = None
    # True: the node's serve keeps the process of a call for the next calls of the function
    # (same context, same limits but memory), so module globals and a GPU context persist
    # (docs/python.md "Reused processes"). Opt-in only.
    reuse: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.reuse, bool):
            raise TypeError(f"reuse: True or False, not {self.reuse!r}")
        if self.context is not None:
            object.__setattr__(self, "context", context_name(self.context))
        for key in LIMIT_KEYS:
            value = getattr(self, key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise TypeError(f"{key}: a number or a string like '2G' / '10m', not {value!r}")
            if isinstance(value, (int, float)) and value <= 0:
                raise ValueError(f"{key}: must be positive, not {value!r}")
        for key in SIZE_KEYS:
            if getattr(self, key) is not None:
                limit_size(key, getattr(self, key))
        if self.memory is not None:
            wanted = size_bytes(self.memory)
            if wanted is not None and wanted < MEMORY_MIN:
                raise ValueError(
                    f"memory: {self.memory!r} is less than the {MEMORY_MIN >> 20} MiB lfm lets "
                    "a call ask for (a forked Python call needs about 1 MiB of its own to run)"
                )
        if self.pack not in (True, False, SELF_CONTAINED):
            raise ValueError(f"pack: True, False or {SELF_CONTAINED!r}, not {self.pack!r}")
        if self.gpus is not None and (isinstance(self.gpus, bool) or not isinstance(self.gpus, int)):
            raise TypeError(f"gpus: a whole number of devices, not {self.gpus!r}")
        if self.category is not None and not isinstance(self.category, str):
            raise TypeError(f"category: a string, not {self.category!r}")
        retries = self.max_retries
        if retries is not None and (isinstance(retries, bool) or not isinstance(retries, int)
                                    or retries < 0):
            raise ValueError(f"max_retries: a count (0 or more), not {retries!r}")

    def limits(self) -> Dict[str, Any]:
        return {k: getattr(self, k) for k in LIMIT_KEYS if getattr(self, k) is not None}

    def merged(self, **overrides: Any) -> "Options":
        """These options with every override that is not None."""
        unknown = set(overrides) - set(self.__dataclass_fields__)
        if unknown:
            raise TypeError(f"unknown lfm option(s): {', '.join(sorted(unknown))}")
        values = {k: getattr(self, k) for k in self.__dataclass_fields__}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return Options(**values)


def context_name(context: Union[str, Callable[[], Any]]) -> str:
    """`module:qualname` of a context's initialiser: the serve's zygote imports it by that
    name, so it must be a module-level function of an importable module."""
    if isinstance(context, str):
        module, _, qualname = context.partition(":")
        if not module or not qualname or ":" in qualname:
            raise ValueError(f"context: 'module:qualname' or a function, not {context!r}")
        return context
    if not callable(context):
        raise TypeError(f"context: a function or 'module:qualname', not {context!r}")
    module = getattr(context, "__module__", None)
    qualname = getattr(context, "__qualname__", None)
    if not module or not qualname or module == "__main__" or "<" in qualname:
        raise ValueError(
            f"context: {qualname or context!r} of {module or 'no module'} cannot be imported by "
            "name on the node: define the initialiser at the top level of an importable module"
        )
    return f"{module}:{qualname}"


def options_of(fn: Callable) -> Options:
    """The options an @lfm.task declared, or none."""
    return getattr(fn, "lfm_options", None) or Options()


def unwrapped(fn: Callable) -> Callable:
    """The function an @lfm.task wraps (the wrapper itself runs it directly in a serve)."""
    return getattr(fn, "__wrapped__", fn) if getattr(fn, "lfm_options", None) else fn


def importable_target(fn: Callable, roots: Sequence[str]) -> Optional[str]:
    """`pkg.mod:qualname` when the serve (given `roots`) finds the same function by that name."""
    if not inspect.isfunction(fn):
        return None
    module_name, qualname = fn.__module__, fn.__qualname__
    if module_name in (None, "__main__") or "<" in qualname:
        return None
    module = sys.modules.get(module_name)
    file = getattr(module, "__file__", None)
    if not file or not file.endswith(".py"):
        return None
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if found is not fn and unwrapped(found) is not fn:
        return None
    relative = module_name.replace(".", os.sep)
    wanted = {relative + ".py", os.path.join(relative, "__init__.py")}
    file = os.path.realpath(file)
    for root in roots:
        if os.path.relpath(file, os.path.realpath(root)) in wanted:
            return f"{module_name}:{qualname}"
    return None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def function_fields(
    fn: Callable, roots: Sequence[str], name: Optional[str] = None
) -> Dict[str, Any]:
    fn = unwrapped(fn)
    fields = _warm_fields(fn)
    target = importable_target(fn, roots)
    if target is not None:
        return dict(fields, function=target)
    name = name or getattr(fn, "__qualname__", None) or type(fn).__qualname__
    try:
        data = cloudpickle.dumps(fn)
    except Exception as error:
        raise SerializationError(f"could not pickle the function {name}: {error}") from error
    return dict(fields, function_pickle=_b64(data), name=name)


def _warm_fields(fn: Callable) -> Dict[str, Any]:
    """`warm`: what the serve's zygote should import before forking the call (lfm/warm.py)."""
    try:
        modules = warm_modules(fn)
    except Exception:  # noqa: BLE001 - a hint: an odd callable (a proxy's __getattr__) goes without
        return {}
    return {"warm": [list(pair) for pair in modules]} if modules else {}


def request(
    fn: Callable,
    args: Tuple,
    kwargs: Dict[str, Any],
    options: Options,
    roots: Sequence[str],
    name: Optional[str] = None,
    spill_dir: Optional[str] = None,
    cwd: Optional[str] = None,
) -> Dict[str, Any]:
    """The request line for one call (without its id); `name` names a pickled callable in
    the Report (default: its qualified name). Arguments over ARGS_INLINE_MAX go to a file in
    `spill_dir` when given (the caller removes it with `discard` once the reply is in), and
    a large value comes back as a file either way. `cwd`: the call runs in that directory
    instead of its sandbox (the runner reads it with the arguments)."""
    fields = function_fields(fn, roots, name)
    fields.update(call_fields(fn, args, kwargs, options, spill_dir, cwd))
    return fields


def call_fields(
    fn: Any,
    args: Tuple,
    kwargs: Dict[str, Any],
    options: Options,
    spill_dir: Optional[str] = None,
    cwd: Optional[str] = None,
) -> Dict[str, Any]:
    """The request's fields but the function: its arguments, limits and sizing."""
    fields: Dict[str, Any] = {}
    arguments: Tuple = (tuple(args), dict(kwargs))
    if cwd is not None:
        arguments += ({"cwd": cwd},)
    try:
        # cloudpickle: an argument may itself be a lambda or a __main__ function.
        data = cloudpickle.dumps(arguments)
    except Exception as error:
        name = getattr(fn, "__qualname__", repr(fn))
        raise SerializationError(f"could not pickle the arguments of {name}: {error}") from error
    fields["input_bytes"] = input_bytes(args, kwargs, len(data))
    if spill_dir is not None and len(data) > ARGS_INLINE_MAX:
        fields["args_file"] = _spill(data, spill_dir)
    else:
        fields["args_pickle"] = _b64(data)
    fields.update(limits=options.limits(), result="pickle", result_by_file=True)
    if options.category is not None:
        fields["category"] = options.category
    if options.context is not None:
        fields["context"] = options.context
    if options.reuse:
        fields["reuse"] = True
    if options.auto:
        fields["auto"] = True
        if options.max_retries is not None:
            fields["max_retries"] = options.max_retries
    return fields


def _spill(data: bytes, directory: str) -> str:
    os.makedirs(directory, mode=0o700, exist_ok=True)
    handle, path = tempfile.mkstemp(prefix=f"args-{os.getpid()}-", suffix=".pickle", dir=directory)
    with os.fdopen(handle, "wb") as file:
        file.write(data)
    return path


def discard(fields: Dict[str, Any]) -> None:
    """Remove the arguments' file of a request whose reply is in (or that is given up)."""
    if "args_file" in fields:
        try:
            os.unlink(fields["args_file"])
        except OSError:
            pass


def _value_bytes(reply: Dict[str, Any]) -> bytes:
    """The value's pickle: inline, or in the file the serve handed over (read, then removed)."""
    path = reply.get("result_file")
    if path is None:
        return base64.b64decode(reply["result_pickle"])
    try:
        with open(path, "rb") as file:
            return file.read()
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def outcome(reply: Dict[str, Any]) -> Tuple[bool, Any, Optional[Report]]:
    """(True, value, report) or (False, exception to raise, report) for a reply."""
    report = reply.get("report")
    if reply.get("ok"):
        try:
            return True, pickle.loads(_value_bytes(reply)), report
        except Exception as error:
            message = f"the call's result could not be unpickled here: {error}"
            return False, SerializationError(message, report), report
    return False, _exception(reply.get("error") or {}, report), report


def _exception(error: Dict[str, Any], report: Optional[Report]) -> BaseException:
    reason = error.get("reason", "error")
    message = error.get("message") or reason
    if reason == "limits":
        return LimitExceeded(_limits_message(report) or message, report)
    if reason == "malformed":
        return LfmError(f"lfm serve refused the request as malformed: {message}", report)
    if reason != "exception":
        return CallError(f"{reason}: {message}", report, reason)
    return _remote_exception(error, report)


def _limits_message(report: Optional[Report]) -> Optional[str]:
    """`train: limit exceeded: memory (limit 200 MiB, peak 212 MiB)`, from the Report."""
    if not report or not report.get("limits_exceeded"):
        return None
    name = report.get("category") or (report.get("function") or {}).get("target", "the call")
    parts = []
    for key, limit in report["limits_exceeded"].items():
        if key == "memory":
            peak = (report.get("memory") or {}).get("peak_bytes", 0)
            parts.append(f"memory (limit {limit / 2**20:.0f} MiB, peak {peak / 2**20:.0f} MiB)")
        elif key == "gpu_memory":
            peak = (report.get("gpu") or {}).get("memory_peak_bytes") or 0
            parts.append(f"gpu_memory (limit {limit / 2**20:.0f} MiB, peak {peak / 2**20:.0f} MiB)")
        elif key in ("wall", "wall_time"):
            parts.append(f"wall time (limit {limit:g} s)")
        else:
            parts.append(f"{key} (limit {limit})")
    return f"{name}: limit exceeded: {', '.join(parts)}"


def _remote_exception(error: Dict[str, Any], report: Optional[Report]) -> BaseException:
    """The remote exception itself when it unpickles, else a RemoteError naming its type;
    either way with the remote traceback as its cause and the Report attached."""
    traceback = error.get("traceback") or ""
    exception: Optional[BaseException] = None
    if error.get("exception_pickle"):
        try:
            exception = pickle.loads(base64.b64decode(error["exception_pickle"]))
        except Exception:  # its class may not import here: fall back to the text
            exception = None
    if not isinstance(exception, BaseException):
        type_name = error.get("type") or "Exception"
        exception = RemoteError(f"{type_name}: {error.get('message', '')}", report, type_name)
    exception.__cause__ = RemoteTraceback(traceback)
    try:
        exception.report = report  # type: ignore[attr-defined]
    except AttributeError:  # an exception class with __slots__
        pass
    return exception
