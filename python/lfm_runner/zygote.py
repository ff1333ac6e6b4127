"""The zygote of `lfm serve`: imports once, forks one child per call.

lfm starts it with a control socket (SOCK_SEQPACKET) on the fd its config names. Messages are
JSON; lfm sends `{"op": "call", "id": N, "request": PATH, "dir": DIR, "rlimits": [...]}` with
the call's `cgroup.procs` descriptors attached (SCM_RIGHTS), and `{"op": "exit"}`. The zygote
answers `{"op": "ready"}` once, then `{"op": "started", "id", "pid"}` for every fork, and
`{"op": "exited", "id", "pid", "status", "user", "system", "maxrss"}` when a child is reaped.

`started` carries the read end of the child's `done` socket (SOCK_SEQPACKET): lfm itself hears
the call end there, without the zygote in between. The child sends one message once its call
has run, `{"user", "system"}` (its CPU time so far) plus, when they fit in one message, the
outcome and the value (`"outcome": {...}, "result": BASE64`); otherwise it wrote them to the
request's files first. It then waits for lfm to close its end before it exits: a forked
child's exit unmaps the zygote's whole address space (~1.5 ms for a 10 MB zygote, ~6 ms for
100 MB), which no reply needs to wait for, and the exit's CPU is better spent after lfm has
its message. A child that dies (a limit, a signal) sends nothing; lfm reads end-of-file.

A spare is a call forked before its request exists: `{"op": "spare", "id", "dir", "rlimits"}`
(with descriptors) forks a child that does all of a call's setup, cgroups included, then waits
on a pipe whose write end comes to lfm with `started` (after the done socket). lfm writes the
request there (`{"request": {...}}`, or `{"request_path": PATH}` when it does not fit the pipe)
and closes it; closing it without writing sends the spare away, and so does lfm's end. Joining
a cgroup v1 costs the child an RCU grace period (~10 ms), which a spare pays between calls
instead of during one. `{"op": "remember", "target": {...}}` tells the zygote what a call ran,
so that it compiles the function's slice once for the calls after it.

`{"op": "learn", "modules": [[NAME, FILE or null], ...]}` names modules a call imported: the
zygote imports those of the standard library and of installed distributions (never a file of
the user's own tree: its top level is the user's code) so that the next calls find them
loaded, and answers `{"op": "learned", "imported", "packages", "installed", "failed", "skipped",
"seconds", "rss"}` (counts, the top-level names it imported and those of them from installed
distributions, its resident size after).

`{"op": "context", "name": "module:qualname"}` runs a context's initialiser once, so that the
calls forked after inherit its state (contexts.py), and answers `{"op": "context", "name",
"ok", "seconds"}`, or with `ok` false its `error` (the traceback; the modules it imported are
forgotten) or `device` (it initialised a GPU driver here: the zygote is spoilt and must be
replaced). A learned module that initialises a device ends its `learned` answer early with
`device: {"module", "seen"}`; the serve replaces the zygote and names the module in the next
one's config (`device_modules`), which never learns it again.

A child puts itself into the call's cgroups before any user code runs (writing its pid to each
descriptor lfm opened, checking every write), leaves the zygote's state behind (signals, fds,
random seeds, stdio), runs the call as `lfm call` does, and `os._exit`s.
"""

import array
import errno
import gc
import importlib
import json
import os
import resource
import selectors
import signal
import socket
import sys

from lfm_shared.installed import installed_dirs, is_installed

from . import call as calls
from . import contexts
from . import imports
from . import reuse
from . import target as targets

MAX_MESSAGE = 1 << 16
# A done message with the outcome and value in it stays below what lfm reads at once.
MAX_DONE = 60_000
EXIT_CGROUP_JOIN_FAILED = 97
EXIT_CHILD_SETUP_FAILED = 98
# Top-level modules that initialised a GPU driver when this serve's zygote learned them
# (the config's `device_modules`): a zygote never imports them again, calls do.
DEVICE_MODULES = set()


def send(sock, message):
    sock.send(json.dumps(message).encode())


def send_fds(sock, data, fds):
    """`socket.send_fds` (3.9+) by hand, for 3.8: one message carrying `fds` (SCM_RIGHTS)."""
    rights = array.array("i", fds)
    sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])


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
    DEVICE_MODULES.update(config.get("device_modules", []))
    device = contexts.device_initialised()
    if device is not None:
        raise RuntimeError(
            f"a GPU driver was initialised in the zygote while it preloaded ({device}): every "
            "forked call would inherit an unusable device context; preload no module that "
            "initialises a device at import"
        )


def learnable(name, file, prefixes):
    """A module the zygote may import for later calls: loaded from the standard library or an
    installed distribution (or built in), under a parent that is loaded already."""
    if name.startswith(("lfm_runner", "__main__")):
        return False
    if name.partition(".")[0] in DEVICE_MODULES:
        return False
    parent = name.rpartition(".")[0]
    if parent and parent not in sys.modules:
        return False
    if file is None:
        return name in sys.builtin_module_names or bool(parent)
    return is_installed(file, prefixes)


def learn(modules):
    """Import what calls imported, where it is the standard library's or installed (see
    `learnable`), so that the next forks have it: the `learned` answer."""
    import time

    started = time.perf_counter()
    modules = [(name, file) for name, file in modules if name not in sys.modules]
    if not modules:
        return {"op": "learned", "imported": 0, "failed": 0, "skipped": 0, "packages": [],
                "installed": [], "seconds": time.perf_counter() - started, "rss": resident_bytes()}
    before = set(sys.modules)
    prefixes = installed_dirs()
    failed, skipped = 0, 0
    for name, file in modules:
        if name in sys.modules:
            continue
        if not learnable(name, file, prefixes):
            skipped += 1
            continue
        try:
            importlib.import_module(name)
        except BaseException:  # noqa: BLE001 - an import may raise anything; the call had it
            failed += 1
        device = contexts.device_initialised()
        if device is not None:
            # This zygote is spoilt for every fork: the serve replaces it, without the module.
            return {"op": "learned", "imported": 0, "failed": failed, "skipped": skipped,
                    "packages": [], "installed": [], "seconds": time.perf_counter() - started,
                    "rss": resident_bytes(),
                    "device": {"module": name.partition(".")[0], "seen": device}}
    gc.freeze()
    new = set(sys.modules) - before
    packages = sorted({name.partition(".")[0] for name in new})
    return {
        "op": "learned", "imported": len(new), "failed": failed, "skipped": skipped,
        "packages": packages, "installed": [p for p in packages if from_distribution(p)],
        "seconds": time.perf_counter() - started, "rss": resident_bytes(),
    }


def from_distribution(name):
    """A module loaded from site-packages (an installed distribution), not the stdlib."""
    # Read as stored: a lazily loaded module would load itself (python/tests/test_imports.py).
    file = imports.stored_attribute(sys.modules.get(name), "__file__") or ""
    return "site-packages" in file or "dist-packages" in file


def resident_bytes():
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def join_cgroups(fds):
    pid = str(os.getpid()).encode()
    for fd in fds:
        if os.write(fd, pid) != len(pid):
            raise OSError(f"short write to cgroup.procs fd {fd}")
        os.close(fd)


def reseed():
    """Python's `random` reseeds itself in a forked child (an at-fork hook of its own, 3.7+):
    only numpy's global generator is left to reseed."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(int.from_bytes(os.urandom(4), "little"))


def child(message, fds, control, done, go=None):
    """In the forked child: never returns. `done`: the socket to say the call is over on; `go`: a
    spare's pipe, the request comes on it."""
    code = EXIT_CHILD_SETUP_FAILED
    try:
        try:
            join_cgroups(fds)
        except OSError as error:
            # A spare's cgroup that is gone was dropped by the serve (it ends, or replaces the
            # zygote) before the zygote got to fork it: nothing to say.
            if go is None or error.errno not in (errno.ENODEV, errno.ENOENT):
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
        log_path, log_fd = None, None
        if go is None:
            with open(message["request"]) as handle:
                request = json.load(handle)
        else:
            # The spare's own files are made now, not once its call has come.
            log_path = os.path.join(directory, "imports.log")
            log_fd = imports.open_log(log_path)
            request = wait_for_go(go)
        if request.get("import_log") != log_path and log_fd is not None:
            os.close(log_fd)
            log_fd = None
        # The call's own devices (CUDA_VISIBLE_DEVICES): CUDA reads it when user code first
        # initialises it, which is after this (the zygote must not initialise CUDA itself).
        os.environ.update(request.get("env") or {})
        outcome, data = calls.execute(request, log_fd, forked=True)
        sys.stdout.flush()
        sys.stderr.flush()
        if reuse.wants_reuse(request):
            reuse.serve_calls(done, request, outcome, data, say_done)
        else:
            say_done(done, request, outcome, data)
        code = 0
    except BaseException as error:  # noqa: BLE001 - report anything, then leave
        # A spare whose directory is gone was dropped by the serve (it ends) while it was
        # still getting ready: nothing to say.
        dropped = go is not None and not os.path.isdir(message.get("dir", ""))
        try:
            if not dropped:
                os.write(2, f"lfm zygote child: {error!r}\n".encode())
        except OSError:
            pass
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def say_done(done, request, outcome, data, extra=None, wait=True):
    """The call is over: its CPU time (its own and its reaped children's, as wait4 would count
    it), with the outcome and value when they fit in the message (else in their files).
    `extra`: more fields (a reused process's, reuse.py); `wait`: wait for lfm to close its end
    (a reused process waits for its next call instead)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    usage = {"user": own.ru_utime + children.ru_utime, "system": own.ru_stime + children.ru_stime}
    usage.update(extra or {})
    message = None
    if data is None or len(data) < MAX_DONE:
        whole = dict(usage, outcome=outcome)
        if data is not None:
            import base64

            whole["result"] = base64.b64encode(data).decode("ascii")
        message = json.dumps(whole).encode()
    if message is None or len(message) > MAX_DONE:
        calls.write_outcome(request, outcome, data)
        message = json.dumps(usage).encode()
    try:
        done.send(message)
        # Exit once lfm has it (it closes its end): exiting at once would keep this CPU
        # until the exit is over, with lfm woken on it and waiting.
        if wait:
            done.recv(1)
    except OSError:
        pass  # lfm is gone: nobody waits for the call


def wait_for_go(go):
    """The request, once lfm has one for this spare; none (lfm dropped the spare, or is
    gone): leave quietly."""
    data = b""
    while True:
        chunk = os.read(go, 1 << 16)
        if not chunk:
            break
        data += chunk
    os.close(go)
    if not data:
        os._exit(0)
    handed = json.loads(data)
    if "request_path" in handed:
        with open(handed["request_path"]) as handle:
            return json.load(handle)
    return handed["request"]


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
    while True:
        for key, _ in selector.select():
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
            if message.get("op") == "remember":
                targets.remember(message.get("target"))
                continue
            if message.get("op") == "learn":
                send(control, learn(message.get("modules", [])))
                continue
            if message.get("op") == "context":
                send(control, contexts.load_in_zygote(message.get("name")))
                gc.freeze()
                continue
            pid = fork_call(message, fds, control, selector, (wakeup_read, wakeup_write))
            running[pid] = message["id"]
            targets.remember(message.get("target"))
        reap(control, running)


def fork_call(message, fds, control, selector, wakeup):
    """Fork the child of a call (`op` call) or of a spare (`op` spare), and tell lfm (handing it
    the child's done socket, and a spare's go pipe); the child's pid."""
    go_read = go_write = None
    if message.get("op") == "spare":
        go_read, go_write = os.pipe()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sys.stdout.flush()
    sys.stderr.flush()
    imports.loaded_before()  # taken here, so the child's import log does not copy it
    pid = os.fork()
    if pid == 0:
        selector.close()
        for fd in wakeup:
            os.close(fd)
        ours.close()
        if go_write is not None:
            os.close(go_write)
        child(message, fds, control, theirs, go_read)
    theirs.close()
    handed = [ours.fileno()] + ([go_write] if go_write is not None else [])
    send_fds(control, json.dumps({"op": "started", "id": message["id"], "pid": pid}).encode(), handed)
    ours.close()
    for fd in fds:
        os.close(fd)
    if go_read is not None:
        os.close(go_read)
        os.close(go_write)
    return pid


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
