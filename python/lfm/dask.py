"""`LfmPlugin`: a Dask WorkerPlugin that adds an executor named "lfm" to every worker, so
tasks annotated with it run in the worker node's `lfm serve`, limited and measured each.

    client.register_plugin(LfmPlugin())
    with dask.annotate(executor="lfm", lfm={"memory": "2G", "wall": "10m"}):
        future = client.submit(train, data)
    future = client.submit(train, data, resources={"memory": 2e9})   # with LfmPlugin(default=True)

Limits come from the `lfm` annotation (lfm options: memory, cores, wall, processes, disk,
gpus, gpu_memory, category, pack, auto, max_retries) over the task's `resources` (`memory` in bytes,
`cores`, `GPU` as Dask's GPU examples name it: Dask schedules on them, lfm enforces them and
gives the task devices of its own; workers must declare them) over an @lfm.task's own. Each Report
goes to the scheduler's event log under "lfm-report" ({"key", "report"}): `reports(client)`;
and with the task: `report_of(future)` (its metadata on the scheduler, or its exception).

For workers that have nothing but distributed and lfm, `shipped(fn, **options)` builds `fn`'s
pack here and gives a callable to submit in its place (docs/python.md, "Packs that travel").
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import threading
from typing import Any, Callable, Dict, Optional

from distributed.diagnostics.plugin import WorkerPlugin

from . import calls, node
from .calls import Options
from .engine_events import DASK_TOPIC as TOPIC
from .executor import call, options_dict
from .shipped_calls import ShippedFunction, shipped  # noqa: F401  (lfm.dask.shipped: bare workers)

METADATA_KEY = "lfm-report"
# Unpickling a task imports dask's task classes (and their imports: ~200 modules, ~150 ms a
# call on a 2-core VM): the zygote imports them once.
PRELOAD = ("dask._task_spec",)


def options_for(worker: Any, run_spec: Any, defaults: Optional[Options] = None) -> Options:
    """The lfm options of one task, from its annotations and resource restrictions, over an
    @lfm.task's own, over the plugin's (`defaults`)."""
    key = getattr(run_spec, "key", None)
    state = worker.state.tasks.get(key)
    func = getattr(run_spec, "func", None)
    options = defaults or Options()
    if func is not None:
        options = options.merged(**options_dict(calls.options_of(func)))
    overrides: Dict[str, Any] = {}
    resources = {k.lower(): v for k, v in (getattr(state, "resource_restrictions", None) or {}).items()}
    if resources.get("memory") is not None:
        overrides["memory"] = int(resources["memory"])
    if resources.get("cores") is not None:
        overrides["cores"] = resources["cores"]
    # Dask counts GPUs as any resource (`resources={"GPU": 1}`); lfm needs whole devices.
    gpus = resources.get("gpu", resources.get("gpus"))
    if gpus is not None:
        overrides["gpus"] = max(1, math.ceil(float(gpus)))
    annotations = (getattr(state, "annotations", None) or {}).get("lfm") or {}
    if not isinstance(annotations, dict):
        raise TypeError(f"the lfm annotation is a dict of lfm options, not {annotations!r}")
    overrides.update(annotations)
    options = options.merged(**overrides)
    if options.category is None and func is not None:
        options = options.merged(category=getattr(calls.unwrapped(func), "__name__", None))
    return options


class LfmTask:
    """Stands for the task's run_spec in Dask's own task runner: calling it runs the run_spec
    in the serve instead, so Dask's timings, error messages and states stay its own."""

    def __init__(self, worker: Any, run_spec: Any, options: Options):
        self.worker, self.run_spec, self.options = worker, run_spec, options

    def __call__(self, data: dict) -> Any:
        func = getattr(self.run_spec, "func", None)
        name = getattr(calls.unwrapped(func), "__qualname__", None) if func else None
        done = call(self.run_spec, (data,), {}, self.options, name, PRELOAD)
        key = getattr(self.run_spec, "key", None)
        self.worker.log_event(TOPIC, {"key": str(key), "report": done.report})
        # The task's metadata goes to the scheduler with the finished task and stays while
        # the task is held there (the event log keeps the last 1000 events of a topic).
        state = self.worker.state.tasks.get(key)
        if state is not None and done.report is not None:
            state.metadata[METADATA_KEY] = done.report
        return done.result()


class LfmWorkerExecutor(cf.Executor):
    """The worker's "lfm" executor. Dask hands it (_run_task_simple, run_spec, data, delay);
    it runs that in a thread of its own with the run_spec swapped for an LfmTask."""

    def __init__(self, worker: Any, threads: int, defaults: Optional[Options] = None):
        self.worker = worker
        self.defaults = defaults
        self._threads = cf.ThreadPoolExecutor(threads, thread_name_prefix="lfm-task")

    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> cf.Future:  # type: ignore[override]
        run_spec, rest = args[0], args[1:]
        if isinstance(getattr(run_spec, "func", None), ShippedFunction):
            return self._threads.submit(fn, run_spec, *rest, **kwargs)  # it runs in lfm itself
        try:
            task = LfmTask(self.worker, run_spec, options_for(self.worker, run_spec, self.defaults))
        except (TypeError, ValueError) as error:
            failed: cf.Future = cf.Future()
            failed.set_exception(error)
            return failed
        return self._threads.submit(fn, task, *rest, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._threads.shutdown(wait=wait, cancel_futures=cancel_futures)


class LfmPlugin(WorkerPlugin):
    """Adds the "lfm" executor to each worker (and, with default=True, makes it the worker's
    default executor, so every task runs in lfm without an annotation)."""

    idempotent = True
    name = "lfm"

    def __init__(self, default: bool = False, context: Any = None, reuse: bool = False):
        """`context`: an initialiser (a function, or "module:qualname") every task this
        plugin runs gets: the node's zygote runs it once (docs/python.md "Contexts").
        `reuse`: every task's function runs in a process kept from task to task
        (docs/python.md "Reused processes")."""
        if not isinstance(reuse, bool):
            raise TypeError(f"reuse: True or False, not {reuse!r}")
        self.default = default
        self.context = calls.context_name(context) if context is not None else None
        self.reuse = reuse

    def setup(self, worker: Any) -> None:
        defaults = Options(context=self.context, reuse=self.reuse)
        executor = LfmWorkerExecutor(worker, worker.state.nthreads, defaults)
        worker.executors["lfm"] = executor
        if self.default:
            worker.executors["default"] = executor
        # The node's serve starts now, in the background, rather than when the first task
        # needs it (that task would wait for it and its zygote's preloads).
        threading.Thread(target=_connect_to_serve, name="lfm-serve-start", daemon=True).start()

    def teardown(self, worker: Any) -> None:
        executor = worker.executors.pop("lfm", None)
        if executor is not None:
            executor.shutdown(wait=False)


def _connect_to_serve() -> None:
    try:
        node.CALLS.connect(node.ServeKey.here(preload=PRELOAD))
    except Exception:  # noqa: BLE001 - the first task tries again, and its error says why
        pass


def reports(client: Any) -> Dict[str, Optional[Dict[str, Any]]]:
    """The Reports of the tasks lfm ran so far, by task key (the latest run of each), from
    the scheduler's event log, which keeps the last `distributed.admin.low-level-log-length`
    (default 1000) of them: `report_of(future)` has any task's while it is held."""
    return {event["key"]: event["report"] for _, event in client.get_events(TOPIC)}


def report_of(future: Any) -> Optional[Dict[str, Any]]:
    """The Report of the task a done future stands for (None for a task lfm did not run):
    a failed task's is on its exception (`.report`), a finished task's in the metadata the
    scheduler holds with the task as long as any client holds it."""
    if future.status == "error":
        return getattr(future.exception(), "report", None)
    key = future.key

    def held(dask_scheduler: Any) -> Optional[Dict[str, Any]]:
        state = dask_scheduler.tasks.get(key)
        return (state.metadata or {}).get(METADATA_KEY) if state is not None else None

    return future.client.run_on_scheduler(held)
