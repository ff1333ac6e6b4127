"""`lfm.Executor`: a concurrent.futures.Executor whose calls run in the node's lfm serve."""

from __future__ import annotations

import collections
import concurrent.futures as cf
import os
import threading
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple, Union

from . import calls, node, packs
from .calls import Options, Size
from .errors import Report


class Future(cf.Future):
    """A concurrent.futures.Future that also carries the call's Report once it is done, and
    for an auto call run again larger, the earlier attempts that ran out (`retries`:
    [{limits, limits_exceeded, peak_memory_bytes}], docs/serve.md)."""

    report: Optional[Report] = None
    retries: List[Dict[str, Any]] = []


def run_call(
    fn: Callable,
    args: Tuple,
    kwargs: Dict[str, Any],
    options: Options,
    future: Future,
    name: Optional[str] = None,
    preload: Tuple[str, ...] = (),
    cwd: Optional[str] = None,
) -> None:
    """Send one call to the node's serve; `future` gets its value or exception, and Report.
    `cwd`: the directory the call runs in (default: its own sandbox)."""
    fields: Dict[str, Any] = {}

    def done(reply: Optional[Dict[str, Any]], error: Optional[BaseException]) -> None:
        calls.discard(fields)
        if reply is not None:
            ok, value, future.report = calls.outcome(reply)
            future.retries = list(reply.get("retries") or [])
            error = None if ok else value
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    try:
        self_contained = options.pack == calls.SELF_CONTAINED
        pack = packs.pack_for(calls.unwrapped(fn), self_contained) if options.pack else None
        key = node.ServeKey.here(pack, preload)
        fields.update(calls.request(
            fn, args, kwargs, options, key.roots, name, node.spill_dir(), cwd))
        node.CALLS.send(key, fields, done)
    except Exception as error:  # no binary, no serve, unpicklable: the future says why
        calls.discard(fields)
        if not future.done():
            future.set_exception(error)


def call(
    fn: Callable,
    args: Tuple,
    kwargs: Dict[str, Any],
    options: Options,
    name: Optional[str] = None,
    preload: Tuple[str, ...] = (),
    cwd: Optional[str] = None,
) -> Future:
    """Run one call in the node's serve and wait for it: a done Future (value or exception,
    and the Report). `preload`: modules the serve's zygote should have imported (part of
    which serve is used); `cwd`: the directory the call runs in (default: its sandbox)."""
    future = Future()
    future.set_running_or_notify_cancel()
    run_call(fn, args, kwargs, options, future, name, preload, cwd)
    cf.wait([future])
    return future


class Executor(cf.Executor):
    """Runs each submitted call in the node's `lfm serve`, limited and measured on its own.

    At most `max_workers` calls (default: one per core) are in flight from this executor;
    the rest wait here. The limits given here apply to every call; an @lfm.task function's
    own options take precedence over them. `context`: an initialiser the node's zygote runs
    once for every call (docs/python.md "Contexts"); `reuse`: calls of one function run in a
    process kept from call to call (docs/python.md "Reused processes")."""

    def __init__(
        self,
        max_workers: Optional[int] = None,
        memory: Size = None,
        cores: Size = None,
        wall: Size = None,
        category: Optional[str] = None,
        pack: Union[bool, str] = False,
        auto: bool = False,
        max_retries: Optional[int] = None,
        gpus: Optional[int] = None,
        gpu_memory: Size = None,
        context: Union[str, Callable[[], Any], None] = None,
        reuse: bool = False,
    ):
        if max_workers is not None and (not isinstance(max_workers, int) or max_workers < 1):
            raise ValueError(f"max_workers: a positive integer, not {max_workers!r}")
        self.max_workers = max_workers or os.cpu_count() or 1
        self.options = Options(
            memory=memory, cores=cores, wall=wall, category=category, pack=pack, auto=auto,
            max_retries=max_retries, gpus=gpus, gpu_memory=gpu_memory, context=context,
            reuse=reuse,
        )
        self._lock = threading.Lock()
        self._running = 0
        self._waiting: Deque[Tuple[Callable[[], None], Future]] = collections.deque()
        self._futures: "set[Future]" = set()
        self._shutdown = False
        self._local = threading.local()

    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> Future:  # type: ignore[override]
        options = self.options.merged(**options_dict(calls.options_of(fn)))
        future = Future()
        start = lambda: run_call(fn, args, kwargs, options, future)  # noqa: E731
        future.add_done_callback(self._finished)
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot submit to an lfm.Executor after shutdown")
            self._futures.add(future)
            if self._running >= self.max_workers:
                self._waiting.append((start, future))
                return future
            self._running += 1
        self._launch(start, future)
        return future

    def _launch(self, start: Callable[[], None], future: Future) -> None:
        """Start a call; one that finishes at once (no binary, say) starts the next waiting
        one from this loop, not from a deeper and deeper chain of done-callbacks."""
        local = self._local
        if getattr(local, "queue", None) is not None:
            local.queue.append((start, future))
            return
        local.queue = [(start, future)]
        try:
            while local.queue:
                start, future = local.queue.pop()
                if future.set_running_or_notify_cancel():
                    start()
                else:
                    self._finished(future, started=True)
        finally:
            local.queue = None

    def _finished(self, future: cf.Future, started: bool = False) -> None:
        with self._lock:
            self._futures.discard(future)  # type: ignore[arg-type]
            if future.cancelled() and not started:
                return  # it was still waiting here: it held no place
            self._running -= 1
            if not self._waiting:
                return
            start, following = self._waiting.popleft()
            self._running += 1
        self._launch(start, following)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            waiting = [f for _, f in self._waiting] if cancel_futures else []
            pending = list(self._futures)
        for future in waiting:
            future.cancel()
        if wait:
            cf.wait(pending)


def options_dict(options: Options) -> Dict[str, Any]:
    """The options an @lfm.task set, to lay over an executor's (False and None: not set)."""
    return {k: v for k, v in options.__dict__.items() if v not in (None, False)}
