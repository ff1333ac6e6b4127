"""Packs that travel to workers that have nothing (docs/python.md, "Packs that travel").

Submit side: `offer(fn)` builds the function's pack from this interpreter's environment (once
per function and source version, `lfm.packs`), names it by the SHA-256 of its bytes and serves
it from a small HTTP endpoint of this process; the task carries a `PackRef` (hash, size,
where to get it), never the bytes. Node side: `fetch(ref)` gets the pack once per node into
the node cache (a path visible on the node is copied, else the URL is fetched), behind a lock
so concurrent fetches on a node wait for one, and checks the bytes against the hash before
they enter the cache under their final name: a partial or corrupt transfer never does.

Packs travel as parts (docs/pack.md, "Parts"): one per distribution, so a node that holds
numpy's part for one function fetches only the parts it lacks for the next; the environment
is composed there from links to parts unpacked once. LFM_SHIP_PARTS=0 ships whole packs.

The node cache is node-local: LFM_NODE_CACHE, else $TMPDIR/lfm-UID, else /tmp/lfm-UID; never
$HOME, which on a cluster is a shared filesystem.
"""

from __future__ import annotations

import base64
import errno
import fcntl
import glob
import hashlib
import http.server
import json
import os
import secrets
import shutil
import socket
import sys
import sysconfig
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from .errors import LfmError

CHUNK = 1 << 20
FETCH_TIMEOUT = 60.0
TRANSFERS_LOG = "transfers.jsonl"
PARTS_SUFFIX = ".parts.json"


def node_cache() -> str:
    """Node-local storage for shipped and unpacked packs: LFM_NODE_CACHE, $TMPDIR/lfm-UID or
    /tmp/lfm-UID."""
    given = os.environ.get("LFM_NODE_CACHE")
    if given:
        return given
    base = os.environ.get("TMPDIR") or "/tmp"
    return os.path.join(base, f"lfm-{os.getuid()}")


def shipped_dir() -> str:
    return os.path.join(node_cache(), "shipped")


def interpreter() -> Tuple[str, str]:
    """(major.minor, SOABI) of this interpreter, what a pack's compiled files are built for."""
    version = "%d.%d" % sys.version_info[:2]
    return version, sysconfig.get_config_var("SOABI") or ""


@dataclass(frozen=True)
class PackRef:
    """What a task carries of its pack: the hash of its bytes, their size, the interpreter it
    was built for, and where a node gets it (a URL of the submit side; a path, used when it is
    visible on the node)."""

    hash: str
    size: int
    name: str
    python: str
    abi: str
    self_contained: bool = False
    url: Optional[str] = None
    path: Optional[str] = None
    # A pack of parts: {"sha256", "bytes", "name"} of each; `hash` is then its parts manifest's.
    parts: Optional[List[Dict[str, Any]]] = None

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(data: Dict[str, Any]) -> "PackRef":
        unknown = set(data) - set(PackRef.__dataclass_fields__)
        if unknown:
            raise LfmError(f"a pack reference with unknown field(s): {', '.join(sorted(unknown))}")
        return PackRef(**data)


# ---- submit side ---------------------------------------------------------------------------


class PackServer:
    """Serves registered packs by hash, under a random token, from a daemon thread."""

    def __init__(self, host: str, port: int = 0, bind: str = ""):
        self.host = host
        self.token = secrets.token_hex(16)
        self.packs: Dict[str, str] = {}
        self.served: Dict[str, List[int]] = {}
        self._lock = threading.Lock()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner._answer(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.http = http.server.ThreadingHTTPServer((bind, port), Handler)
        self.http.daemon_threads = True
        self.port = self.http.server_address[1]
        thread = threading.Thread(target=self.http.serve_forever, name="lfm-pack-server", daemon=True)
        thread.start()

    def register(self, digest: str, path: str) -> str:
        with self._lock:
            self.packs[digest] = path
        return f"http://{self.host}:{self.port}/{self.token}/{digest}"

    def _answer(self, request: http.server.BaseHTTPRequestHandler) -> None:
        parts = request.path.strip("/").split("/")
        path = self.packs.get(parts[1]) if len(parts) == 2 and parts[0] == self.token else None
        if path is None:
            request.send_error(404, "no such pack")
            return
        size = os.path.getsize(path)
        request.send_response(200)
        request.send_header("Content-Type", "application/zstd")
        request.send_header("Content-Length", str(size))
        request.end_headers()
        sent = 0
        try:
            with open(path, "rb") as handle:
                while True:
                    chunk = handle.read(CHUNK)
                    if not chunk:
                        break
                    request.wfile.write(chunk)
                    sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        with self._lock:
            self.served.setdefault(parts[1], []).append(sent)

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


_server_lock = threading.Lock()
_server: Optional[PackServer] = None
_digests: Dict[Tuple[str, float], Tuple[str, int]] = {}


def server(host: Optional[str] = None) -> PackServer:
    """This process's pack server, started on first use. Its address: LFM_SHIP_HOST, else
    `host` (the engine's own address for workers), else this machine's name; its port:
    LFM_SHIP_PORT, else any free one."""
    global _server
    with _server_lock:
        if _server is None:
            name = os.environ.get("LFM_SHIP_HOST") or host or socket.getfqdn()
            port = int(os.environ.get("LFM_SHIP_PORT") or 0)
            _server = PackServer(name, port)
        return _server


def digest_of(path: str) -> Tuple[str, int]:
    """(SHA-256 hex, size) of a file, remembered per path and modification time."""
    key = (path, os.path.getmtime(path))
    if key not in _digests:
        hasher = hashlib.sha256()
        size = 0
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(CHUNK), b""):
                hasher.update(chunk)
                size += len(chunk)
        _digests[key] = (hasher.hexdigest(), size)
    return _digests[key]


def ships_parts() -> bool:
    """Whether packs travel as parts (the default) or whole (LFM_SHIP_PARTS=0)."""
    return os.environ.get("LFM_SHIP_PARTS", "1") != "0"


def offer(fn: Callable, host: Optional[str] = None, self_contained: bool = False) -> PackRef:
    """`fn`'s pack, built here from this interpreter's environment if not yet, and offered to
    workers: the reference a task carries."""
    from . import packs

    parts = ships_parts()
    path = packs.pack_for(fn, self_contained, parts)
    digest, size = digest_of(path)
    url = server(host).register(digest, path)
    python, abi = interpreter()
    listed = _offer_parts(path, host) if parts else None
    return PackRef(digest, size, os.path.basename(path), python, abi, self_contained, url, path,
                   listed)


def _offer_parts(manifest_path: str, host: Optional[str]) -> List[Dict[str, Any]]:
    """Each part of the parts manifest at `manifest_path`, registered with the server."""
    with open(manifest_path) as handle:
        manifest = json.load(handle)
    store = os.path.dirname(manifest_path)
    listed = []
    for part in manifest["parts"]:
        server(host).register(part["sha256"], os.path.join(store, part["sha256"] + ".tar.zst"))
        listed.append({"sha256": part["sha256"], "bytes": part["bytes"], "name": part["name"]})
    return listed


# ---- node side -----------------------------------------------------------------------------


def check_interpreter(ref: PackRef) -> None:
    """A pack built for another interpreter cannot run here (unless self-contained)."""
    if ref.self_contained:
        return
    python, abi = interpreter()
    if (python, abi) != (ref.python, ref.abi):
        raise LfmError(
            f"pack {ref.name} was built for Python {ref.python} ({ref.abi}), but this worker "
            f"runs Python {python} ({abi}) at {sys.executable}: run the workers with Python "
            f"{ref.python}, or ship a --self-contained pack"
        )


def fetch(ref: PackRef) -> str:
    """The node-local path of `ref`'s pack, transferred here first if no worker of this node
    has yet; for a pack of parts, its parts manifest, the environment composed in the node's
    pack cache from the parts (only those this node lacks are transferred)."""
    if ref.parts is None:
        return _fetch_file(ref, ref.hash + ".tar.zst")
    manifest = _fetch_file(ref, ref.hash + PARTS_SUFFIX)
    if _composed(ref):
        return manifest
    for attempt in (1, 2):
        for part in ref.parts:
            _fetch_file(_part_ref(ref, part), part["sha256"] + ".tar.zst")
        failure = _compose(manifest)
        if failure is None:
            return manifest
        # A part corrupted on this node's disk since its transfer is removed by the
        # composition: the second round fetches it again.
        if attempt == 2 or "corrupt" not in failure:
            raise LfmError(f"could not compose pack {ref.name} on this node: {failure}")
    return manifest


def _fetch_file(ref: PackRef, name: str) -> str:
    directory = shipped_dir()
    final = os.path.join(directory, name)
    if _used(final):
        return final
    os.makedirs(directory, mode=0o700, exist_ok=True)
    with open(os.path.join(directory, ref.hash + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _used(final):
            return final
        # Whoever left a partial file held this lock and died: nothing else writes one.
        for stale in glob.glob(os.path.join(directory, ref.hash + ".part-*")):
            os.unlink(stale)
        _transfer(ref, directory, final)
    evict(directory, keep=final)
    return final


def _part_ref(ref: PackRef, part: Dict[str, Any]) -> PackRef:
    digest = part["sha256"]
    url = ref.url.rsplit("/", 1)[0] + "/" + digest if ref.url else None
    path = os.path.join(os.path.dirname(ref.path), digest + ".tar.zst") if ref.path else None
    return PackRef(digest, part["bytes"], f"{ref.name} (part {part['name']})", ref.python,
                   ref.abi, ref.self_contained, url, path)


def packs_cache() -> str:
    """Where this node's serves unpack packs and compose parts (node.py sets LFM_CACHE_DIR
    to the node cache for them)."""
    return os.path.join(os.environ.get("LFM_CACHE_DIR") or node_cache(), "packs")


def _composed(ref: PackRef) -> bool:
    """Whether the composition and every part it links to are complete in the pack cache."""
    cache = packs_cache()
    roots = [ref.hash] + [part["sha256"] for part in ref.parts or ()]
    return all(os.path.exists(os.path.join(cache, root, ".lfm-complete")) for root in roots)


def _compose(manifest: str) -> Optional[str]:
    """Compose the environment now (parts unpacked and compiled by this worker's Python),
    before a serve starts on it; None, or why it failed."""
    import subprocess

    from .binary import find_binary

    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    done = subprocess.run([find_binary(), "unpack", manifest, "--cache", packs_cache()],
                          capture_output=True, text=True, env=dict(os.environ, PATH=path))
    return None if done.returncode == 0 else (done.stderr.strip() or f"exit {done.returncode}")


def _used(path: str) -> bool:
    """Whether the pack is here, marking it used now (what eviction goes by)."""
    try:
        os.utime(path)
        return True
    except FileNotFoundError:
        return False
    except PermissionError:  # another user's read-only file: here all the same
        return os.path.exists(path)


DEFAULT_CEILING = 20 << 30
DEFAULT_SHARE = 0.25
EVICT_GRACE_SECONDS = 600.0


def budget(directory: str, held: int) -> int:
    """The shipped packs' budget: LFM_PACK_CACHE_MAX (as the unpacked packs'), else 25% of
    what the filesystem could give them (its free space plus what they hold), at most 20 GiB."""
    given = os.environ.get("LFM_PACK_CACHE_MAX")
    if given:
        from .calls import size_bytes

        value = size_bytes(given)
        if value is None:
            raise LfmError(f"LFM_PACK_CACHE_MAX: a size like 10G, not {given!r}")
        return int(value)
    free = shutil.disk_usage(directory).free
    return int(min(DEFAULT_CEILING, DEFAULT_SHARE * (free + held)))


def evict(directory: str, keep: str) -> List[str]:
    """Remove least recently used shipped packs over the budget, never `keep` nor one used in
    the last ten minutes (a serve may be about to unpack it; its unpacked copy is
    evicted on its own terms, docs/pack.md). Each goes under its lock, taken without waiting."""
    packs = []
    for name in os.listdir(directory):
        if name.endswith(".tar.zst") or name.endswith(PARTS_SUFFIX):
            path = os.path.join(directory, name)
            try:
                stat = os.stat(path)
            except FileNotFoundError:
                continue
            packs.append((stat.st_mtime, stat.st_size, path))
    held = sum(size for _, size, _ in packs)
    limit = budget(directory, held)
    removed = []
    for used, size, path in sorted(packs):
        if held <= limit:
            break
        if path == keep or time.time() - used < EVICT_GRACE_SECONDS:
            continue
        with open(_lock_of(path), "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            _remove(path)
        held -= size
        removed.append(path)
    return removed


def _lock_of(path: str) -> str:
    for suffix in (".tar.zst", PARTS_SUFFIX):
        if path.endswith(suffix):
            return path[: -len(suffix)] + ".lock"
    return path + ".lock"


def _sources(ref: PackRef) -> List[Tuple[str, str]]:
    found = []
    if ref.path and os.access(ref.path, os.R_OK):
        found.append(("path", ref.path))
    if ref.url:
        found.append(("url", ref.url))
    return found


def _transfer(ref: PackRef, directory: str, final: str) -> None:
    _check_room(ref, directory)
    failures = []
    for kind, source in _sources(ref):
        partial = os.path.join(directory, f"{ref.hash}.part-{os.getpid()}-{threading.get_ident()}")
        started = time.monotonic()
        try:
            moved = _copy_checked(ref, kind, source, partial)
        except OSError as error:
            _remove(partial)
            if error.errno == errno.ENOSPC:
                raise _no_room(ref, directory, error) from None
            failures.append(f"{source}: {error}")
            continue
        except LfmError as error:
            _remove(partial)
            failures.append(f"{source}: {error}")
            continue
        os.chmod(partial, 0o444)
        os.replace(partial, final)
        _log(directory, ref, kind, moved, time.monotonic() - started)
        return
    if not failures:
        raise LfmError(f"pack {ref.name} has no source this node can reach (no url, no visible path)")
    raise LfmError(f"could not get pack {ref.name} onto this node: " + "; ".join(failures))


def _copy_checked(ref: PackRef, kind: str, source: str, partial: str) -> int:
    hasher = hashlib.sha256()
    moved = 0
    reader = open(source, "rb") if kind == "path" else urllib.request.urlopen(source, timeout=FETCH_TIMEOUT)
    with reader, open(partial, "wb") as out:
        for chunk in iter(lambda: reader.read(CHUNK), b""):
            hasher.update(chunk)
            out.write(chunk)
            moved += len(chunk)
        out.flush()
        os.fsync(out.fileno())
    if moved != ref.size or hasher.hexdigest() != ref.hash:
        raise LfmError(
            f"got {moved} bytes with SHA-256 {hasher.hexdigest()[:16]}..., expected {ref.size} "
            f"bytes with {ref.hash[:16]}... (a partial or corrupt transfer: not used)"
        )
    return moved


def _check_room(ref: PackRef, directory: str) -> None:
    free = shutil.disk_usage(directory).free
    if free < ref.size:
        raise _no_room(ref, directory, OSError(errno.ENOSPC, f"{free} bytes free"))


def _no_room(ref: PackRef, directory: str, error: OSError) -> LfmError:
    return LfmError(
        f"the node cache {directory} has no room for pack {ref.name} ({ref.size} bytes): "
        f"{error.strerror or error}; free space there or set LFM_NODE_CACHE to a larger "
        "node-local directory"
    )


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _log(directory: str, ref: PackRef, kind: str, moved: int, seconds: float) -> None:
    """One line per transfer onto this node: what the tests and bench/ship.sh count."""
    line = {"hash": ref.hash, "name": ref.name, "bytes": moved, "source": kind,
            "seconds": round(seconds, 3), "pid": os.getpid(), "time": time.time()}
    with open(os.path.join(directory, TRANSFERS_LOG), "a") as handle:
        handle.write(json.dumps(line) + "\n")


def transfers(directory: Optional[str] = None) -> List[Dict[str, Any]]:
    """The transfers onto this node so far (from its log)."""
    path = os.path.join(directory or shipped_dir(), TRANSFERS_LOG)
    try:
        with open(path) as handle:
            return [json.loads(line) for line in handle if line.strip()]
    except FileNotFoundError:
        return []


# ---- a shipped call ------------------------------------------------------------------------


def prepare(fn: Callable, args: Tuple, kwargs: Dict[str, Any], options: Any,
            host: Optional[str] = None) -> Dict[str, Any]:
    """On the submit side: a call as a bare worker can forward it, the pack's reference and
    the serve's request fields (the function and arguments pickled here, where they import)."""
    from . import calls

    ref = offer(calls.unwrapped(fn), host, options.pack == calls.SELF_CONTAINED)
    fields = calls.request(fn, args, kwargs, options, _importable_roots(calls.unwrapped(fn)))
    return {"pack": ref.to_dict(), "request": fields}


def _importable_roots(fn: Callable) -> List[str]:
    """The directory the function's top package sits in, so it is sent by name: the pack's
    app/ holds that module under the same name."""
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    file = getattr(module, "__file__", None)
    if not file or fn.__module__ == "__main__":
        return []
    depth = fn.__module__.count(".") + 1
    root = os.path.realpath(file)
    for _ in range(depth):
        root = os.path.dirname(root)
    return [root]


class _ArgumentsIn:
    """Pickles as the call's arguments (opened only in the call) run in `cwd`."""

    def __init__(self, data: bytes, cwd: str):
        self.data, self.cwd = data, cwd

    def __reduce__(self) -> Tuple[Any, ...]:
        from lfm_runner.opaque import arguments_in

        return (arguments_in, (self.data, self.cwd))


def run(call: Dict[str, Any], cwd: Optional[str] = None) -> Dict[str, Any]:
    """On a worker: run a prepared call in this node's serve of its pack (in `cwd` when
    given, else its sandbox); the serve's reply with the value's pickle inline and unopened
    (a bare worker may not import its classes)."""
    import pickle

    from . import node

    ref = PackRef.from_dict(call["pack"])
    check_interpreter(ref)
    key = node.ServeKey.here(fetch(ref), ())
    fields = dict(call["request"])
    if cwd is not None and "args_pickle" in fields:
        inner = base64.b64decode(fields["args_pickle"])
        outer = pickle.dumps(_ArgumentsIn(inner, cwd))
        fields["args_pickle"] = base64.b64encode(outer).decode("ascii")
    done = threading.Event()
    outcome: Dict[str, Any] = {}

    def settle(reply: Optional[Dict[str, Any]], error: Optional[BaseException]) -> None:
        outcome.update(reply=reply, error=error)
        done.set()

    node.CALLS.send(key, fields, settle)
    done.wait()
    if outcome["error"] is not None:
        raise outcome["error"]
    return inline(outcome["reply"])


def inline(reply: Dict[str, Any]) -> Dict[str, Any]:
    """The reply with a value handed over as a node-local file read into it."""
    path = reply.get("result_file")
    if path is None:
        return reply
    with open(path, "rb") as handle:
        data = handle.read()
    _remove(path)
    reply = dict(reply)
    del reply["result_file"]
    reply["result_pickle"] = base64.b64encode(data).decode("ascii")
    return reply


class ShippedFunction:
    """`fn` with its pack, callable on any worker, bare or not: each call runs in the node's
    serve of the pack, the value coming back unopened where it cannot be opened (an
    lfm_runner.opaque.Opaque, which opens wherever it is unpickled next: the submit side, the
    next shipped call). Made on the submit side by `shipped(fn, **options)`; its pickle holds
    the pack's reference and the function as the serve loads it, never `fn` itself."""

    def __init__(self, fn: Callable, options: Any, host: Optional[str] = None):
        from . import calls

        inner = calls.unwrapped(fn)
        self.__name__ = getattr(inner, "__name__", "shipped")
        self.__qualname__ = getattr(inner, "__qualname__", self.__name__)
        if options.category is None:
            options = options.merged(category=self.__name__)
        self.options = options
        self.pack = offer(inner, host, options.pack == calls.SELF_CONTAINED).to_dict()
        self.function = calls.function_fields(inner, _importable_roots(inner))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from lfm_runner.opaque import opened

        from . import calls, node

        fields = dict(self.function)
        fields.update(calls.call_fields(self, args, kwargs, self.options, node.spill_dir()))
        try:
            reply = run({"pack": self.pack, "request": fields})
        finally:
            calls.discard(fields)
        _tell_dask(reply.get("report"))
        if not reply.get("ok"):
            raise calls.outcome(reply)[1]
        return opened(base64.b64decode(reply["result_pickle"]))

    def __repr__(self) -> str:
        return f"<lfm shipped {self.__qualname__}, pack {self.pack['hash'][:12]}>"


def shipped(fn: Callable, host: Optional[str] = None, **options: Any) -> ShippedFunction:
    """`fn` ready for workers that have nothing: its pack built here and offered by this
    process; `options` are lfm's (memory, cores, wall, category, auto, ...)."""
    from .calls import Options

    return ShippedFunction(fn, Options(**options), host)


def _tell_dask(report: Optional[Dict[str, Any]]) -> None:
    """In a Dask worker, the Report joins the scheduler's "lfm-report" events."""
    if report is None or "distributed" not in sys.modules:
        return
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return
    worker.log_event("lfm-report", {"key": str(getattr(worker, "get_current_task", lambda: None)()),
                                    "report": report})
