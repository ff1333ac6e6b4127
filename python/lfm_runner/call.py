"""One call: load the function, read its arguments, run it, write the outcome.

The outcome (a small JSON file, written atomically) says whether the function returned or
raised; the value goes to its own file, as JSON or as a pickle. lfm reads both after the
process is gone, so a call that dies (a signal, `os._exit`, a limit) simply has no outcome.
"""

import os
import sys

from . import headroom
from . import plainjson
from . import results
from . import target as targets

# pickle, traceback and importlib are imported where needed, and json not at all for plain
# values (plainjson.py): every millisecond of imports here is added to each `lfm call`.


def read_arguments(spec):
    """(args, kwargs). A pickle may hold a third item, `{"cwd": DIR}`: the call then runs in
    DIR (the caller's working directory, as engines run tasks) instead of its sandbox."""
    if "pickle_file" in spec or "pickle" in spec:
        import pickle
    if "pickle_file" in spec:
        with open(spec["pickle_file"], "rb") as handle:
            loaded = pickle.load(handle)
    elif "pickle" in spec:
        import base64

        loaded = pickle.loads(base64.b64decode(spec["pickle"]))
    else:
        loaded = spec.get("json", [[], {}])
    if not isinstance(loaded, (list, tuple)) or len(loaded) not in (2, 3):
        raise TypeError("arguments must be (a list, a dict) or (a list, a dict, call options)")
    args, kwargs = loaded[0], loaded[1]
    if not isinstance(args, (list, tuple)) or not isinstance(kwargs, dict):
        raise TypeError("arguments must be (a list, a dict)")
    if len(loaded) == 3:
        where = (loaded[2] or {}).get("cwd")
        if where is not None:
            os.chdir(where)
    return list(args), dict(kwargs)


def dumps(value):
    """A value's or an exception's pickle: with pickle, and when pickle cannot (a class or a
    function made in the call, a lambda) with cloudpickle, which sends those by value as the
    client sends arguments (Parsl's serializer does the same with dill). cloudpickle is
    imported only then (~20 ms). Either loads with `pickle.loads` where cloudpickle is
    installed."""
    import pickle

    try:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as error:  # PicklingError, AttributeError, TypeError: pickle's refusals
        try:
            import cloudpickle
        except ImportError:
            raise error from None
    return cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def write_atomically(path, data):
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "wb") as handle:
        handle.write(data)
    os.replace(temporary, path)


RUNNER_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "")


def user_traceback(error):
    """The traceback as the caller sees it: lfm's own frames left out wherever they are (the
    runner's, before the user's first frame, and the import log's statement hook, between the
    user's own frames: pytest hides its own frames the same way), with the import system's
    frames the runner's load went through; in each exception of the chain."""
    import traceback

    shown = traceback.TracebackException(type(error), error, error.__traceback__)
    for described in chained(shown):
        described.stack = traceback.StackSummary.from_list(users_frames(described.stack))
    return "".join(shown.format())


def chained(described):
    """Every TracebackException of an exception's chain (causes, contexts, groups), once."""
    seen, pending = set(), [described]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        pending.extend([current.__cause__, current.__context__])
        pending.extend(getattr(current, "exceptions", None) or [])


def users_frames(frames):
    import importlib

    importlib_dir = os.path.join(os.path.dirname(os.path.abspath(importlib.__file__)), "")
    kept, leading = [], True
    for frame in frames:
        runner = frame.filename.startswith(RUNNER_DIR)
        importing = frame.filename.startswith(("<frozen importlib", importlib_dir))
        leading = leading and (runner or importing)
        if not (runner or leading):
            kept.append(frame)
    return kept


def full_traceback(error):
    """The traceback with every frame, lfm's own included (the Report keeps it)."""
    import traceback

    return "".join(traceback.format_exception(type(error), error, error.__traceback__))


def describe_exception(error):
    described = {
        "type": type(error).__qualname__,
        "module": type(error).__module__,
        "message": str(error),
        "traceback": user_traceback(error),
    }
    full = full_traceback(error)
    if full != described["traceback"]:
        described["full_traceback"] = full
    return described


def encode_result(value, result_spec):
    """(bytes to write, outcome fields) for a returned value."""
    fields = {"type": f"{type(value).__module__}.{type(value).__qualname__}"}
    if result_spec.get("format") == "pickle":
        data = dumps(value)
    else:
        try:
            data = results.dumps(value).encode()
        except (TypeError, ValueError) as error:
            fields["not_json"] = str(error)
            data = dumps(value)
            fields["format"] = "pickle"
    fields.setdefault("format", result_spec.get("format", "json"))
    fields["bytes"] = len(data)
    return data, fields


def own_io():
    """(read_bytes, write_bytes) of this process and the children it reaped."""
    try:
        with open("/proc/self/io") as handle:
            fields = dict(line.split(":", 1) for line in handle if ":" in line)
        return [int(fields["read_bytes"]), int(fields["write_bytes"])]
    except (OSError, KeyError, ValueError):
        return None


def reset_peak():
    """This process's resident bytes now, with the kernel's high-water mark (VmHWM) reset to
    them (`clear_refs` 5, Linux 4.0+): a forked call's VmHWM starts at the zygote's size, so
    only its rise above this says what the call itself needed. None where it cannot be reset."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return status_bytes("VmRSS:")
    except (OSError, ValueError):
        return None


def peak_growth(baseline):
    """How far this process's resident size rose above `baseline` (from `reset_peak`) at its
    highest, between two samples or not; None without a baseline."""
    if baseline is None:
        return None
    try:
        return max(0, status_bytes("VmHWM:") - baseline)
    except (OSError, ValueError):
        return None


def status_bytes(field):
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    raise ValueError(f"no {field} in /proc/self/status")


def call_function(request, log=None):
    """The outcome of the call, the value's bytes when it returned, the exception if it raised.
    The import log stops when the function returns or raises: what the runner imports to
    describe the outcome is not the call's. A context the zygote did not load for the call is
    loaded here first, as the call's own work (contexts.py)."""
    context = None
    if request.get("context"):
        from . import contexts

        try:
            context = contexts.ensure(request["context"])
        except BaseException as error:  # the initialiser is user code
            stop(log)
            outcome = failure("context", error)
            outcome["context"] = {"name": request["context"], "loaded": "call"}
            return outcome, None, error
    # A reused process (reuse.py) keeps the module its first call loaded: later calls see
    # its globals as the first call left them.
    reused = context is not None or bool(request.get("reuse"))
    outcome, data, error = call_loaded(request, log, reuse_loaded=reused)
    if context is not None:
        outcome["context"] = context
    return outcome, data, error


def call_loaded(request, log, reuse_loaded=False):
    try:
        function = targets.load(request["target"], reuse_loaded)
        args, kwargs = read_arguments(request.get("args", {}))
    except BaseException as error:  # the user's module may raise anything, SystemExit too
        stop(log)
        return failure("load", error), None, error
    try:
        value = function(*args, **kwargs)
    except BaseException as error:
        stop(log)
        return failure("call", error), None, error
    stop(log)
    try:
        data, fields = encode_result(value, request.get("result", {}))
    except BaseException as error:
        return failure("result", error), None, error
    return {"ok": True, "result": fields}, data, None


def stop(log):
    if log is not None:
        log.stop()


def failure(stage, error):
    return {"ok": False, "stage": stage, "exception": describe_exception(error)}


def write_exception(path, error):
    """The exception itself, pickled, for a caller that re-raises it (serve, with pickles);
    one that does not pickle (an unpicklable argument, say) is left out."""
    try:
        data = dumps(error)
    except BaseException:  # pickling runs arbitrary __reduce__ code
        return
    write_atomically(path, data)


def execute(request, import_log_fd=None, forked=False):
    """Run the call a request describes: (outcome, the value's bytes or None). The pickled
    exception, if the caller wants it, is written here; the outcome and value are not.
    `import_log_fd`: the import log, opened already (a spare opens it before its call).
    `forked`: the call runs in a child of the zygote, and measures its own memory peak unless
    the request's `memory_growth` is false (its cgroup keeps a peak of its own: the reset and
    the two reads of /proc/self/status cost a served noop call ~0.7 ms of its ~5 ms)."""
    log = None
    # Only a forked call needs its own peak: a process of its own has its whole VmHWM.
    growth = forked and request.get("memory_growth", True)
    baseline = reset_peak() if growth else None
    # The slice's code, before the import log starts: compiling it (ast, when no compiled
    # slice is kept) is the runner's work, not the call's imports. A file that does not
    # compile is left for the load to report.
    targets.remember(request["target"])
    if request.get("import_log"):
        from . import imports

        log = imports.start(request["import_log"], import_log_fd)
    outcome, data, error = headroom.run(call_function, request, log)
    if error is not None and request.get("exception_file"):
        write_exception(request["exception_file"], error)
    outcome["io"] = own_io()
    outcome["memory_growth"] = peak_growth(baseline)
    return outcome, data


def write_outcome(request, outcome, data):
    """The value's file first, then the outcome's: an outcome names a complete value."""
    if data is not None:
        write_atomically(request["result_file"], data)
    write_atomically(request["outcome_file"], results.dumps(outcome).encode())


def run(request):
    """Run the call a request describes; write and return its outcome (also on exceptions)."""
    outcome, data = execute(request)
    write_outcome(request, outcome, data)
    return outcome


def main(request_path):
    with open(request_path, encoding="utf-8") as handle:
        request = plainjson.loads(handle.read())
    # lfm prints the value on its stdout: the function's own output goes to stderr.
    sys.stdout.flush()
    os.dup2(2, 1)
    outcome = run(request)
    sys.stdout.flush()
    sys.stderr.flush()
    # lfm prints the traceback from the outcome.
    return 0 if outcome["ok"] else 1
