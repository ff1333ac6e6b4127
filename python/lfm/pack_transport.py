"""Packs that travel to workers that have nothing (docs/python.md, "Packs that travel"): how a
pack gets from the submit side onto a node.

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

Shipped packs live in the node cache's shipped/ (lfm.node.node_cache), bounded as the unpacked
packs are: the binary evicts them (`lfm cache --shipped`).
"""

from __future__ import annotations

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
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import packs
from .binary import find_binary
from .errors import LfmError
from .node import node_cache

CHUNK = 1 << 20
FETCH_TIMEOUT = 60.0
TRANSFERS_LOG = "transfers.jsonl"
PARTS_SUFFIX = ".parts.json"


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
    pack cache from the parts (only those this node lacks are transferred). After a transfer,
    shipped packs over the budget leave."""
    transferred: List[str] = []
    path = _fetch_pack(ref, transferred)
    if transferred:
        evict(shipped_dir())
    return path


def _fetch_pack(ref: PackRef, transferred: List[str]) -> str:
    if ref.parts is None:
        return _fetch_file(ref, ref.hash + ".tar.zst", transferred)
    manifest = _fetch_file(ref, ref.hash + PARTS_SUFFIX, transferred)
    if _composed(ref):
        return manifest
    for attempt in (1, 2):
        for part in ref.parts:
            _fetch_file(_part_ref(ref, part), part["sha256"] + ".tar.zst", transferred)
        failure = _compose(manifest)
        if failure is None:
            return manifest
        # A part corrupted on this node's disk since its transfer is removed by the
        # composition: the second round fetches it again.
        if attempt == 2 or "corrupt" not in failure:
            raise LfmError(f"could not compose pack {ref.name} on this node: {failure}")
    return manifest


def _fetch_file(ref: PackRef, name: str, transferred: List[str]) -> str:
    """The file `name` of the shipped packs, transferred from `ref`'s sources if it is not
    there yet (then added to `transferred`)."""
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
    transferred.append(final)
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


def evict(directory: str) -> None:
    """Shipped packs over the budget leave, decided by the binary as for every pack store
    (packer/src/cache/shipped.rs): least recently used first, down to LFM_PACK_CACHE_MAX (the
    unpacked packs' budget), else 25% of what the filesystem could give them, at most 20 GiB;
    never one used in the last ten minutes (a serve may be about to unpack it) nor one whose
    lock is held."""
    done = subprocess.run([find_binary(), "cache", "--shipped", directory, "--prune"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        why = done.stderr.strip() or f"exit {done.returncode}"
        raise LfmError(f"could not keep the shipped packs in {directory} to their budget: {why}")


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

