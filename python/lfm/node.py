"""The node's `lfm serve`: one per user, interpreter, source roots and pack, shared by every
client on the node. The first client to need it starts it behind an fcntl lock; it listens
on a Unix socket and exits by itself once no client is connected for a while
(`lfm serve --idle-timeout`). A client keeps one connection per serve and closes it when it
has had no call for LFM_IDLE_TIMEOUT seconds (default 60), so an idle node frees its serve.

If the serve dies, every call in flight fails with a ServeError naming it, and the next call
starts a fresh one."""

from __future__ import annotations

import errno
import fcntl
import functools
import hashlib
import itertools
import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from lfm_shared.installed import is_installed

from .binary import find_binary
from .errors import ServeError

Callback = Callable[[Optional[Dict[str, Any]], Optional[BaseException]], None]
START_TIMEOUT = 120.0


def idle_timeout() -> float:
    text = os.environ.get("LFM_IDLE_TIMEOUT", "60")
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"LFM_IDLE_TIMEOUT: seconds, not {text!r}") from None
    if value <= 0:
        raise ValueError(f"LFM_IDLE_TIMEOUT: must be positive, not {text!r}")
    return value


def runtime_dir() -> str:
    """Private to the user and local to the node: $XDG_RUNTIME_DIR/lfm, else /tmp/lfm-UID."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and os.path.isdir(base) and os.access(base, os.W_OK):
        return os.path.join(base, "lfm")
    return os.path.join("/tmp", f"lfm-{os.getuid()}")


def node_cache() -> str:
    """Node-local storage for shipped and unpacked packs: LFM_NODE_CACHE, else $TMPDIR/lfm-UID,
    else /tmp/lfm-UID; never $HOME, which on a cluster is a shared filesystem."""
    given = os.environ.get("LFM_NODE_CACHE")
    if given:
        return given
    base = os.environ.get("TMPDIR") or "/tmp"
    return os.path.join(base, f"lfm-{os.getuid()}")


def spill_dir() -> str:
    """Where large arguments wait for their call (in memory where the runtime dir is tmpfs)."""
    return os.path.join(runtime_dir(), "data")


def source_roots() -> List[str]:
    """This process's own source directories on sys.path: not the stdlib nor site-packages,
    which the interpreter has anyway, nor Dask's per-worker scratch directories (each worker
    puts its own on sys.path: they would give every worker a serve of its own). The serve
    finds by-name functions and the modules of pickled arguments on them."""
    return list(_source_roots(tuple(sys.path), os.getcwd()))


@functools.lru_cache(maxsize=16)
def _source_roots(path: Tuple[str, ...], cwd: str) -> Tuple[str, ...]:
    roots: List[str] = []
    for entry in path:
        real = os.path.realpath(entry or cwd)
        if not os.path.isdir(real) or real in roots or DASK_SCRATCH in real.split(os.sep):
            continue
        if is_installed(real):
            continue
        roots.append(real)
    return tuple(roots)


DASK_SCRATCH = "dask-scratch-space"


# What every call of the client may need and the zygote imports once, instead of each forked
# call: cloudpickle reconstructs pickled functions.
DEFAULT_PRELOAD = ("cloudpickle",)


def preloads(extra: Tuple[str, ...] = ()) -> Tuple[str, ...]:
    """DEFAULT_PRELOAD, what the caller needs, and LFM_PRELOAD (comma-separated modules)."""
    from_env = tuple(m.strip() for m in os.environ.get("LFM_PRELOAD", "").split(",") if m.strip())
    return tuple(sorted(set(DEFAULT_PRELOAD + tuple(extra) + from_env)))


@dataclass(frozen=True)
class ServeKey:
    """What makes two clients able to share a serve."""

    binary: str
    python: str
    roots: Tuple[str, ...]
    pack: Optional[str] = None
    preload: Tuple[str, ...] = ()
    backend: str = "auto"
    node_memory: Optional[str] = None

    @staticmethod
    def here(pack: Optional[str] = None, preload: Tuple[str, ...] = ()) -> "ServeKey":
        # A pack holds what its function needs: nothing more is preloaded from it.
        modules = tuple(preload) if pack else preloads(preload)
        roots = tuple(source_roots())
        return ServeKey(find_binary(), sys.executable, roots, pack, modules, backend(), node_memory())

    @property
    def stem(self) -> str:
        digest = hashlib.sha256(json.dumps(self.__dict__, sort_keys=True).encode())
        return os.path.join(runtime_dir(), "serve-" + digest.hexdigest()[:16])

    def command(self, socket_path: str) -> List[str]:
        argv = [self.binary, "serve", "--socket", socket_path]
        argv += ["--idle-timeout", f"{idle_timeout()}s", "--slots", str(slots())]
        argv += ["--pack", self.pack] if self.pack else ["--python", self.python]
        if self.preload:
            argv += ["--preload", ",".join(self.preload)]
        argv += ["--backend", self.backend]
        if self.node_memory:
            argv += ["--node-memory", self.node_memory]
        for root in self.roots:
            argv += ["--root", root]
        return argv


BACKENDS = ("auto", "cgroup2", "cgroup1", "rlimit")


def backend() -> str:
    """How the serve contains calls: LFM_BACKEND, else auto (lfm serve --backend)."""
    name = os.environ.get("LFM_BACKEND", "auto")
    if name not in BACKENDS:
        raise ValueError(f"LFM_BACKEND: one of {', '.join(BACKENDS)}, not {name!r}")
    return name


def node_memory() -> Optional[str]:
    """The memory the node's serve admits calls against: LFM_NODE_MEMORY (`6G`), else what
    the serve detects (lfm serve --node-memory)."""
    return os.environ.get("LFM_NODE_MEMORY") or None


def slots() -> int:
    """Calls the node's serve runs at once: LFM_SLOTS, else one per core."""
    text = os.environ.get("LFM_SLOTS")
    if not text:
        return os.cpu_count() or 1
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"LFM_SLOTS: a positive integer, not {text!r}")
    return int(text)


def _connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except BaseException:
        sock.close()
        raise
    return sock


def _log_tail(path: str, size: int = 2000) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.path.getsize(path) - size))
            text = handle.read().decode(errors="replace").strip()
    except OSError:
        return "(no log)"
    return text or "(empty log)"


NOT_LISTENING = (errno.ENOENT, errno.ECONNREFUSED)
# The serves this process started, by socket: how one that died ended can then be told.
_STARTED: Dict[str, "subprocess.Popen[bytes]"] = {}


def _how_it_ended(path: str) -> str:
    process = _STARTED.get(path)
    if process is None:
        return ""
    try:
        status = process.wait(timeout=2)
    except subprocess.TimeoutExpired:
        return ", still running"
    if status < 0:
        return f", killed by signal {-status}"
    return f", exited with status {status}"


def open_serve(key: ServeKey) -> Tuple[socket.socket, str]:
    """A connection to the serve for `key`, started first if nobody listens."""
    path = key.stem + ".sock"
    try:
        return _connect(path), path
    except OSError as error:
        if error.errno not in NOT_LISTENING:
            raise ServeError(f"connecting to lfm serve at {path}: {error}") from error
    os.makedirs(runtime_dir(), mode=0o700, exist_ok=True)
    with open(key.stem + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one starter per serve; the others wait, then connect
        try:
            return _connect(path), path
        except OSError as error:
            if error.errno not in NOT_LISTENING:
                raise ServeError(f"connecting to lfm serve at {path}: {error}") from error
        if os.path.lexists(path):
            os.unlink(path)  # a dead server's socket: nobody accepts on it
        return _start(key, path), path


def _pack_environment(key: ServeKey) -> Dict[str, str]:
    """A pack's serve unpacks into node-local storage (never $HOME, shared on clusters), and
    its `run` script finds this worker's interpreter first as `python3`."""
    env = {"PATH": os.path.dirname(key.python) + os.pathsep + os.environ.get("PATH", "")}
    if not os.environ.get("LFM_CACHE_DIR"):
        env["LFM_CACHE_DIR"] = node_cache()
    return env


def _start(key: ServeKey, path: str) -> socket.socket:
    log = key.stem + ".log"
    env = dict(os.environ, LFM_IN_SERVE="1")
    if key.pack:
        env.update(_pack_environment(key))
    with open(log, "ab") as out:
        starter = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
        out.write(f"--- {time.ctime()} {starter} (pid {os.getpid()}) starts lfm serve\n".encode())
        out.flush()
        try:
            process = subprocess.Popen(
                key.command(path), stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                cwd=runtime_dir(), env=env, start_new_session=True,
            )
        except OSError as error:
            raise ServeError(f"could not start lfm serve ({key.binary}): {error}") from error
        out.write(f"--- lfm serve pid {process.pid}\n".encode())
    # Reap it when it exits (idle), so no zombie stays behind this process.
    threading.Thread(target=process.wait, name="lfm-serve-reaper", daemon=True).start()
    _STARTED[path] = process
    with open(key.stem + ".pid", "w") as handle:
        handle.write(f"{process.pid}\n")
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        status = process.poll()
        if status is not None:
            raise ServeError(
                f"lfm serve exited with status {status} before listening on {path}; "
                f"its log ({log}):\n{_log_tail(log)}"
            )
        try:
            return _connect(path)
        except OSError:
            time.sleep(0.02)
    process.kill()
    raise ServeError(f"lfm serve did not listen on {path} within {START_TIMEOUT:.0f} s; log: {log}")


class Connection:
    """One client connection to a serve: requests go out with fresh ids, a reader thread
    hands each reply to the callback registered under its id."""

    _ids = itertools.count(1)

    def __init__(self, key: ServeKey, on_close: Callable[["Connection"], None]):
        self.key = key
        self.sock, self.path = open_serve(key)
        self._on_close = on_close
        self._lock = threading.Lock()
        self._pending: Dict[int, Callback] = {}
        self.closed = False
        self._reader = threading.Thread(target=self._read, name="lfm-serve-reader", daemon=True)
        self._reader.start()

    def send(self, fields: Dict[str, Any], callback: Callback) -> bool:
        """Send one call; False when this connection is closed or breaks as it is sent (the
        caller takes another: a serve that lost the connection kills its calls, so this one
        cannot be running there)."""
        call_id = next(self._ids)
        line = (json.dumps(dict(fields, id=call_id)) + "\n").encode()
        with self._lock:
            if self.closed:
                return False
            self._pending[call_id] = callback
            try:
                self.sock.sendall(line)
                return True
            except OSError as error:
                self._pending.pop(call_id, None)
                broken = error
        self._fail(f"{self._name()} closed the connection (sending failed: {broken})")
        return False

    def _read(self) -> None:
        # A reply line may be long (a value inline, a Report): its pieces are joined once.
        pieces: List[bytes] = []
        idle = idle_timeout()
        self.sock.settimeout(idle)
        while True:
            try:
                data = self.sock.recv(1 << 20)
            except socket.timeout:
                if self._close_if_idle():
                    return
                continue
            except OSError as error:
                self._fail(f"{self._name()} closed the connection ({error})")
                return
            if not data:
                self._fail(f"{self._name()} closed the connection")
                return
            if b"\n" not in data:
                pieces.append(data)
                continue
            *lines, rest = data.split(b"\n")
            lines[0] = b"".join(pieces + [lines[0]])
            pieces = [rest] if rest else []
            for line in lines:
                self._dispatch(line)

    def _dispatch(self, line: bytes) -> None:
        try:
            reply = json.loads(line)
        except ValueError:
            return  # not ours to answer: every reply line is JSON
        with self._lock:
            callback = self._pending.pop(reply.get("id"), None)
        if callback is not None:
            callback(reply, None)

    def _close_if_idle(self) -> bool:
        with self._lock:
            if self._pending or self.closed:
                return self.closed
            self.closed = True
        self._on_close(self)
        self.sock.close()
        return True

    def _name(self) -> str:
        try:
            with open(self.key.stem + ".pid") as handle:
                pid = handle.read().strip()
        except OSError:
            pid = "?"
        return f"lfm serve (pid {pid}, socket {self.path})"

    def _gone_error(self, why: str) -> ServeError:
        log = self.key.stem + ".log"
        ended = _how_it_ended(self.path)
        return ServeError(
            f"{why}{ended}; the call is lost. The serve's log ({log}) ends:\n{_log_tail(log)}"
        )

    def _fail(self, why: str) -> None:
        """The serve is gone: fail every call in flight, and let the next open a new one."""
        with self._lock:
            self.closed = True
            pending, self._pending = self._pending, {}
        self._on_close(self)
        try:
            self.sock.close()
        except OSError:
            pass
        for callback in pending.values():
            callback(None, self._gone_error(why + f" while {len(pending)} call(s) ran"))


class Calls:
    """This process's connections, one per serve key."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._connections: Dict[ServeKey, Connection] = {}

    def send(self, key: ServeKey, fields: Dict[str, Any], callback: Callback) -> None:
        for _ in range(3):  # a connection that closes between lookup and send: take a new one
            if self._connection(key).send(fields, callback):
                return
        raise ServeError(f"could not keep a connection to lfm serve for {key.stem}")

    def connect(self, key: ServeKey) -> None:
        """Connect to `key`'s serve now, starting it if need be, so that the first call finds
        it ready (an engine's worker calls this as it starts)."""
        self._connection(key)

    def _connection(self, key: ServeKey) -> Connection:
        with self._lock:
            connection = self._connections.get(key)
            if connection is None or connection.closed:
                connection = Connection(key, self._forget)
                self._connections[key] = connection
            return connection

    def _forget(self, connection: Connection) -> None:
        with self._lock:
            if self._connections.get(connection.key) is connection:
                del self._connections[connection.key]


CALLS = Calls()


def _forget_after_fork() -> None:
    # A forked child has the connections' sockets but not their reader threads.
    global CALLS
    CALLS = Calls()


os.register_at_fork(after_in_child=_forget_after_fork)
