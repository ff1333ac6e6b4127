"""Shipped calls: a function run on workers that have nothing but the engine and lfm
(docs/python.md, "Packs that travel"). The submit side prepares the call where the function
and its arguments import (`prepare`, `shipped`); the worker gets the pack onto its node
(lfm.pack_transport) and runs the call in the node's serve of the pack (`run`), keeping the
value unopened where it cannot be opened (lfm_shared.opaque)."""

from __future__ import annotations

import base64
import os
import pickle
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from lfm_shared.opaque import arguments_in, opened

from . import calls, node, pack_transport
from .calls import Options
from .engine_events import tell_dask
from .pack_transport import PackRef


def prepare(fn: Callable, args: Tuple, kwargs: Dict[str, Any], options: Any,
            host: Optional[str] = None) -> Dict[str, Any]:
    """On the submit side: a call as a bare worker can forward it, the pack's reference and
    the serve's request fields (the function and arguments pickled here, where they import)."""
    ref = pack_transport.offer(calls.unwrapped(fn), host, options.pack == calls.SELF_CONTAINED)
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
        return (arguments_in, (self.data, self.cwd))


def run(call: Dict[str, Any], cwd: Optional[str] = None) -> Dict[str, Any]:
    """On a worker: run a prepared call in this node's serve of its pack (in `cwd` when
    given, else its sandbox); the serve's reply with the value's pickle inline and unopened
    (a bare worker may not import its classes)."""
    ref = PackRef.from_dict(call["pack"])
    pack_transport.check_interpreter(ref)
    key = node.ServeKey.here(pack_transport.fetch(ref), ())
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
    try:
        os.unlink(path)
    except OSError:
        pass
    reply = dict(reply)
    del reply["result_file"]
    reply["result_pickle"] = base64.b64encode(data).decode("ascii")
    return reply


class ShippedFunction:
    """`fn` with its pack, callable on any worker, bare or not: each call runs in the node's
    serve of the pack, the value coming back unopened where it cannot be opened (an
    lfm_shared.opaque.Opaque, which opens wherever it is unpickled next: the submit side, the
    next shipped call). Made on the submit side by `shipped(fn, **options)`; its pickle holds
    the pack's reference and the function as the serve loads it, never `fn` itself."""

    def __init__(self, fn: Callable, options: Any, host: Optional[str] = None):
        inner = calls.unwrapped(fn)
        self.__name__ = getattr(inner, "__name__", "shipped")
        self.__qualname__ = getattr(inner, "__qualname__", self.__name__)
        if options.category is None:
            options = options.merged(category=self.__name__)
        self.options = options
        self_contained = options.pack == calls.SELF_CONTAINED
        self.pack = pack_transport.offer(inner, host, self_contained).to_dict()
        self.function = calls.function_fields(inner, _importable_roots(inner))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        fields = dict(self.function)
        fields.update(calls.call_fields(self, args, kwargs, self.options, node.spill_dir()))
        try:
            reply = run({"pack": self.pack, "request": fields})
        finally:
            calls.discard(fields)
        tell_dask(reply.get("report"))
        if not reply.get("ok"):
            raise calls.outcome(reply)[1]
        return opened(base64.b64decode(reply["result_pickle"]))

    def __repr__(self) -> str:
        return f"<lfm shipped {self.__qualname__}, pack {self.pack['hash'][:12]}>"


def shipped(fn: Callable, host: Optional[str] = None, **options: Any) -> ShippedFunction:
    """`fn` ready for workers that have nothing: its pack built here and offered by this
    process; `options` are lfm's (memory, cores, wall, category, auto, ...)."""
    return ShippedFunction(fn, Options(**options), host)

