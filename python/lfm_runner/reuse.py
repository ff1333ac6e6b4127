"""Reused call processes: a forked child that runs the next calls of its function after its
first (the request's `"reuse": true`, docs/serve.md "Reused processes").

Module globals, loaded models and a GPU driver's context then persist from call to call, as
they do in an engine's long-lived worker; each call still has its own figures and its own
files. The child's loop, after a call:
- it says the call is over on its `done` socket (zygote.py's message, with `"reuse": true` and
  `"calls": N`, how many calls this process ran) and waits on that socket;
- lfm writes the next call there, `{"dir": DIR, "request": {...}}` (or `"request_path"` when
  it does not fit one message), or closes its end to end the process;
- the child points stdout and stderr at the new call's files, moves to its sandbox, resets
  what a call measures of itself (its VmHWM, by call.py's `reset_peak`; its I/O counted from
  here) and runs the call as a forked call runs.

CPU time is sent as the process's total so far (the reaped children's included), as a
one-call child sends it: lfm keeps the previous call's total and counts the difference, which
also holds when the process dies mid-call and only its exit's totals remain.

Rlimits stay the process's: lfm reuses a process only for calls of the same limits but memory
(which is the call's cgroup's, or lfm's sampler's), so the rlimits the zygote set at the fork
hold for every call (an unprivileged process could not raise them again anyway). A call that dies (a limit, a signal) takes the process with it; lfm forks
a fresh one for the next call.
"""

import json
import os
import sys

from . import call as calls

# A next call's message stays below this (lfm writes larger requests to a file).
MAX_NEXT = 1 << 16


def wants_reuse(request):
    return bool(request.get("reuse"))


def serve_calls(done, request, outcome, data, say_done):
    """After the process's first call (its `outcome` and value `data`): say it is over, then
    run each next call lfm sends, until lfm closes the socket. `say_done(done, request,
    outcome, data, extra, wait)` sends the done message. Returns when the process is to exit."""
    calls_run = 1
    while True:
        say_done(done, request, outcome, data, {"reuse": True, "calls": calls_run}, False)
        handed = next_call(done)
        if handed is None:
            return
        request = enter_call(handed)
        outcome, data = run_again(request)
        calls_run += 1


def next_call(done):
    """The next call's message, or None once lfm closed its end (or is gone)."""
    try:
        data = done.recv(MAX_NEXT)
    except OSError:
        return None
    if not data:
        return None
    return json.loads(data)


def enter_call(handed):
    """The next call's request, with this process's stdio and working directory moved to its
    call directory."""
    directory = handed["dir"]
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, name in ((1, "stdout"), (2, "stderr")):
        out = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, fd)
        os.close(out)
    os.chdir(os.path.join(directory, "sandbox"))
    if "request_path" in handed:
        with open(handed["request_path"]) as handle:
            request = json.load(handle)
    else:
        request = handed["request"]
    os.environ.update(request.get("env") or {})
    return request


def run_again(request):
    """Run a call in this process as its first ran; its I/O is its own (the process's
    counters less what they were before it)."""
    before = calls.own_io()
    outcome, data = calls.execute(request, forked=True)
    outcome["io"] = io_difference(before, outcome.get("io"))
    sys.stdout.flush()
    sys.stderr.flush()
    return outcome, data


def io_difference(before, after):
    if before is None or after is None:
        return after
    return [max(0, now - then) for now, then in zip(after, before)]
