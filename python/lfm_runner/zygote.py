"""The zygote of `lfm serve`: imports once, forks one child per call.

lfm starts it with a control socket (SOCK_SEQPACKET) on the fd its config names. Messages are
JSON; lfm sends `{"op": "call", "id": N, "request": PATH, "dir": DIR, "rlimits": [...]}` with
the call's `cgroup.procs` descriptors attached (SCM_RIGHTS), and `{"op": "exit"}`. The zygote
answers `{"op": "ready"}` once, then `{"op": "started", "id", "pid"}` for every fork,
`{"op": "done", "id", "pid", "user", "system"}` when a child has run its call (its outcome
written, its output flushed, its CPU time so far) and is about to exit, and
`{"op": "exited", "id", "pid", "status", "user", "system", "maxrss"}` when a child is reaped.
`done` comes first because a forked child's exit unmaps the zygote's whole address space,
which takes ~1.5 ms for a 10 MB zygote and ~6 ms for 100 MB: no reply needs to wait for it.
A child that dies (a limit, a signal) sends no `done`.

A spare is a call forked before its request exists: `{"op": "spare", "id", "dir", "rlimits"}`
(with descriptors) forks a child that does all of a call's setup, cgroups included, then waits;
`{"op": "go", "id", "request": PATH}` hands it the request, `{"op": "drop", "id"}` sends it away. Joining a cgroup v1 costs the child
an RCU grace period (~10 ms), which a spare pays between calls instead of during one. A spare
whose zygote dies reads end-of-file and leaves without running anything.

A child puts itself into the call's cgroups before any user code runs (writing its pid to each
descriptor lfm opened, checking every write), leaves the zygote's state behind (signals, fds,
random seeds, stdio), runs the call as `lfm call` does, and `os._exit`s.
"""

import array
import gc
import importlib
import json
import os
import random
import resource
import selectors
import signal
import socket
import sys

from . import call as calls
from . import imports
from . import target as targets

MAX_MESSAGE = 1 << 16
EXIT_CGROUP_JOIN_FAILED = 97
EXIT_CHILD_SETUP_FAILED = 98


def send(sock, message):
    sock.send(json.dumps(message).encode())


def receive(sock):
    """(message, fds) or (None, []) when lfm closed the socket."""
    fds = array.array("i")
    data, ancillary, _flags, _addr = sock.recvmsg(MAX_MESSAGE, socket.CMSG_SPACE(64 * fds.itemsize))
    if not data:
        return None, []
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    return json.loads(data), list(fds)


def limit_threads(cores):
    """Before numpy & co. are imported: one slot's cores, not the whole node's."""
    threads = str(max(1, int(cores)))
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
        os.environ.setdefault(name, threads)


def preload(config):
    """Import the preloaded modules and load the registered functions once."""
    for directory in reversed(config.get("sys_path", [])):
        if directory not in sys.path:
            sys.path.insert(0, directory)
    for name in config.get("preload", []):
        importlib.import_module(name)
    for name, spec in config.get("functions", {}).items():
        targets.REGISTERED[name] = targets.load(spec)


def join_cgroups(fds):
    pid = str(os.getpid()).encode()
    for fd in fds:
        if os.write(fd, pid) != len(pid):
            raise OSError(f"short write to cgroup.procs fd {fd}")
        os.close(fd)


def reseed():
    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(int.from_bytes(os.urandom(4), "little"))


def child(message, fds, control, done, go=None):
    """In the forked child: never returns. `done`: the socket to say the call is over on; `go`: a
    spare's pipe, the request's path comes on it."""
    code = EXIT_CHILD_SETUP_FAILED
    try:
        try:
            join_cgroups(fds)
        except OSError as error:
            os.write(2, f"lfm zygote: cannot join the call's cgroup: {error}\n".encode())
            os._exit(EXIT_CGROUP_JOIN_FAILED)
        os.setpgid(0, 0)
        for number, value in message.get("rlimits", []):
            resource.setrlimit(number, (value, value))
        signal.set_wakeup_fd(-1)
        for number in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGPIPE):
            signal.signal(number, signal.SIG_DFL)
        control.close()
        directory = message["dir"]
        for fd, name in ((1, "stdout"), (2, "stderr")):
            out = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(out, fd)
            os.close(out)
        os.chdir(os.path.join(directory, "sandbox"))
        reseed()
        gc.enable()
        path = message["request"] if go is None else wait_for_go(go)
        with open(path) as handle:
            request = json.load(handle)
        # The call's own devices (CUDA_VISIBLE_DEVICES): CUDA reads it when user code first
        # initialises it, which is after this (the zygote must not initialise CUDA itself).
        os.environ.update(request.get("env") or {})
        calls.run(request)
        sys.stdout.flush()
        sys.stderr.flush()
        say_done(done)
        code = 0
    except BaseException as error:  # noqa: BLE001 - report anything, then leave
        try:
            os.write(2, f"lfm zygote child: {error!r}\n".encode())
        except OSError:
            pass
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def say_done(done):
    """The call is over: its CPU time (its own and its reaped children's, as wait4 would count
    it) on the `done` pipe; the zygote passes it on while this process exits."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    usage = {"user": own.ru_utime + children.ru_utime, "system": own.ru_stime + children.ru_stime}
    try:
        os.write(done, json.dumps(usage).encode())
        # Exit once the zygote has passed it on (it closes its end): exiting at once would
        # keep this CPU until the exit is over, and the zygote, woken on it, waiting.
        os.read(done, 1)
    except OSError:
        pass  # the zygote is gone: the exit is all lfm will see


def relay_done(control, fd, selector, dones):
    """A child's word that its call is over (nothing: it died first, and its exit says how)."""
    call_id, pid = dones.pop(fd)
    try:
        data = os.read(fd, 4096)
    except OSError:
        data = b""
    selector.unregister(fd)
    if data:
        send(control, {"op": "done", "id": call_id, "pid": pid, **json.loads(data)})
    os.close(fd)


def wait_for_go(go):
    """The request's path, once lfm has one for this spare; none (the zygote died, or lfm
    dropped the spare): leave quietly."""
    data = b""
    while True:
        chunk = os.read(go, 1 << 16)
        if not chunk:
            break
        data += chunk
    os.close(go)
    if not data:
        os._exit(0)
    return json.loads(data)["request"]


def reap(control, running):
    while True:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        call_id = running.pop(pid, None)
        send(control, {
            "op": "exited", "id": call_id, "pid": pid, "status": status,
            "user": usage.ru_utime, "system": usage.ru_stime, "maxrss": usage.ru_maxrss * 1024,
        })


def serve(control):
    wakeup_read, wakeup_write = os.pipe()
    os.set_blocking(wakeup_write, False)
    os.set_blocking(wakeup_read, False)
    signal.set_wakeup_fd(wakeup_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ, "control")
    selector.register(wakeup_read, selectors.EVENT_READ, "child")
    running = {}
    spares = {}  # id -> the write end of the spare's pipe
    dones = {}  # the read end of a child's done pipe -> (id, pid)
    while True:
        for key, _ in selector.select():
            if key.data == "done":
                relay_done(control, key.fd, selector, dones)
                continue
            if key.data == "child":
                while True:
                    try:
                        if not os.read(wakeup_read, 512):
                            break
                    except BlockingIOError:
                        break
                reap(control, running)
                continue
            message, fds = receive(control)
            if message is None or message.get("op") == "exit":
                return 0
            if message.get("op") in ("go", "drop"):
                go(spares, message)
                targets.remember(message.get("target"))
                continue
            pid = fork_call(message, fds, control, selector, (wakeup_read, wakeup_write), spares, dones)
            running[pid] = message["id"]
            send(control, {"op": "started", "id": message["id"], "pid": pid})
            targets.remember(message.get("target"))
        reap(control, running)


def fork_call(message, fds, control, selector, wakeup, spares, dones):
    """Fork the child of a call (`op` call) or of a spare (`op` spare); the child's pid."""
    go_read = None
    if message.get("op") == "spare":
        go_read, go_write = os.pipe()
    ours, theirs = socket.socketpair()
    done_read, done_write = ours.detach(), theirs.detach()
    sys.stdout.flush()
    sys.stderr.flush()
    imports.loaded_before()  # taken here, so the child's import log does not copy it
    pid = os.fork()
    if pid == 0:
        selector.close()
        for fd in wakeup + tuple(spares.values()) + tuple(dones) + (done_read,):
            os.close(fd)
        if go_read is not None:
            os.close(go_write)
        child(message, fds, control, done_write, go_read)
    os.close(done_write)
    dones[done_read] = (message["id"], pid)
    selector.register(done_read, selectors.EVENT_READ, "done")
    for fd in fds:
        os.close(fd)
    if go_read is not None:
        os.close(go_read)
        spares[message["id"]] = go_write
    return pid


def go(spares, message):
    """Hand a spare its request (`go`), or send it away (`drop`: it exits without running
    anything); an unknown id (a spare already gone) is ignored."""
    write_end = spares.pop(message.get("id"), None)
    if write_end is None:
        return
    try:
        if message["op"] == "go":
            os.write(write_end, json.dumps({"request": message["request"]}).encode())
    except OSError:
        pass  # the spare died: its exit reports the call
    finally:
        os.close(write_end)


def main(config_path):
    with open(config_path) as handle:
        config = json.load(handle)
    limit_threads(config.get("cores_per_slot", 1))
    control = socket.socket(fileno=config["control_fd"])
    gc.disable()
    # What the runner imports in a call only when it needs it (a `lfm call` pays for what it
    # uses): forked calls would each import them again.
    for name in ("ast", "base64", "pickle", "traceback", "lfm_runner.imports"):
        importlib.import_module(name)
    try:
        preload(config)
    except BaseException as error:  # noqa: BLE001 - the preload is user code
        send(control, {"op": "failed", "error": calls.describe_exception(error)})
        return 1
    gc.freeze()
    send(control, {"op": "ready", "pid": os.getpid()})
    return serve(control)
