"""Contexts: state a function's calls share, made once by an initialiser the user names.

A context is named by reference, "module:qualname" (`@lfm.task(context=load_model)` sends
`helper:load_model`). The initialiser takes no arguments and fills what the function reads,
as users already write it: a module global (`helper.MODEL = ...`). Its return value is not
passed on: the same function then runs unchanged under plain Python, Parsl or Dask.

In `lfm serve` the zygote runs the initialiser once (`{"op": "context", "name": NAME}`) and
every call forked after inherits its state copy-on-write; a call forked before runs the
initialiser itself, in its own process (so its Report carries the load). A call's writes to
the state are its own: other calls never see them.

No zygote may hold a GPU driver's state: a forked CUDA context is unusable. After a context
and after each module it learns, the zygote asks `device_initialised()`; a context that
initialised a device is refused (the serve then starts a fresh zygote without it).
"""

import importlib
import os
import sys
import time

# The contexts loaded in this process (the zygote's, inherited by its forks), by name.
LOADED = {}

# Device files a GPU driver opens in a process that initialised it: NVIDIA's, AMD's (KFD)
# and the DRM render nodes (Intel, AMD).
DEVICE_FILES = ("/dev/nvidia", "/dev/kfd", "/dev/dri/")


class ContextError(Exception):
    """A context name that cannot name an initialiser."""


def resolve(name):
    """The initialiser "module:qualname" names, imported."""
    if not isinstance(name, str) or name.count(":") != 1:
        raise ContextError(f"a context is named 'module:qualname', not {name!r}")
    module_name, qualname = name.split(":")
    if not module_name or not qualname:
        raise ContextError(f"a context is named 'module:qualname', not {name!r}")
    found = importlib.import_module(module_name)
    for part in qualname.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise ContextError(f"context {name}: {module_name} has no {qualname}") from None
    if not callable(found):
        raise ContextError(f"context {name}: {qualname} is not callable")
    return found


def load(name):
    """Run the initialiser `name` names in this process, once: the seconds it took (0 when it
    was loaded already)."""
    if name in LOADED:
        return 0.0
    started = time.perf_counter()
    LOADED[name] = resolve(name)()
    return time.perf_counter() - started


def ensure(name):
    """In a call: the context's entry for the outcome (where it was loaded, and what its load
    cost the call). Raises what the initialiser raised."""
    if name in LOADED:
        return {"name": name, "loaded": "zygote"}
    seconds = load(name)
    return {"name": name, "loaded": "call", "seconds": seconds}


def load_in_zygote(name):
    """The zygote's answer to `{"op": "context"}`: loaded, failed (the traceback; the zygote
    forgets the modules the initialiser imported), or refused because it initialised a
    device (the zygote must then be replaced: `device` says what was seen)."""
    before = set(sys.modules)
    try:
        seconds = load(name)
    except BaseException as error:  # noqa: BLE001 - the initialiser is user code
        from .call import describe_exception

        for module in set(sys.modules) - before:
            del sys.modules[module]
        LOADED.pop(name, None)
        answer = {"op": "context", "name": name, "ok": False,
                  "error": describe_exception(error)}
        return with_device_check(answer)
    return with_device_check({"op": "context", "name": name, "ok": True, "seconds": seconds})


def with_device_check(answer):
    device = device_initialised()
    if device is not None:
        answer.update(ok=False, device=device)
    return answer


def device_initialised():
    """What shows that a GPU driver was initialised in this process, or None: an open device
    file of a driver, or a framework that says so (torch.cuda.is_initialized())."""
    opened = open_device_file()
    if opened is not None:
        return f"{opened} is open"
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    is_initialized = getattr(cuda, "is_initialized", None)
    try:
        if callable(is_initialized) and is_initialized():
            return "torch.cuda.is_initialized() is true"
    except Exception:  # noqa: BLE001 - a half-imported torch answers nothing
        return None
    return None


def open_device_file():
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return None
    for fd in names:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(DEVICE_FILES):
            return target
    return None
