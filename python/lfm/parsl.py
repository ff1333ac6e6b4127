"""`LfmHighThroughputExecutor`: Parsl's HighThroughputExecutor with every app run in the
worker node's `lfm serve` (through HTEX's `task_executor` hook, Parsl >= 2025.10.06).

    from lfm.parsl import LfmHighThroughputExecutor, report_of
    config = Config(executors=[LfmHighThroughputExecutor(label="lfm", ...)])
    future = app(x, parsl_resource_specification={"memory": 2000, "cores": 1})

`parsl_resource_specification` keys: `cores`, `memory` and `disk` (MB when numbers, as in
Parsl's WorkQueue and TaskVine executors; or lfm sizes like "2G"), `gpus` (devices the app
holds alone on its node, docs/gpu.md), `running_time_min`, and lfm's own `wall`, `processes`,
`gpu_memory` (MB or a size), `category` (default: the app's function name), `pack`, `auto`,
`max_retries`;
`priority` goes to HTEX as before. The app's future resolves to the raw value or fails with
the app's exception (or lfm.LimitExceeded); `report_of(app_future)` is the call's Report."""

from __future__ import annotations

import datetime
import os
import pickle
import platform
import time
from concurrent.futures import Future
from typing import Any, Callable, Dict, Optional

from parsl.app.errors import wrap_error
from parsl.executors.errors import InvalidResourceSpecification
from parsl.executors.high_throughput.executor import HighThroughputExecutor
from parsl.monitoring.message_type import MessageType
from parsl.monitoring.remote import monitor_wrapper, send_first_message, send_last_message
from parsl.serialize import pack_apply_message, unpack_apply_message

from . import calls, shipped_calls
from .calls import Options
from .errors import Report
from .executor import call

LFM_KEYS = {
    "cores", "memory", "disk", "running_time_min", "wall", "processes", "category", "pack",
    "auto", "max_retries", "gpus", "gpu_memory", "context", "reuse",
}
MB_KEYS = ("memory", "disk", "gpu_memory")
# Every app's module imports parsl (its decorators), and HTEX's worker has it imported: the
# zygote imports it once rather than the first call of each serve (~1 s here, for 470 modules).
PRELOAD = ("parsl",)


class LfmResult:
    """What the worker sends back for a call that returned: its value and its Report."""

    def __init__(self, value: Any, report: Optional[Report]):
        self.value = value
        self.report = report


def options_from_spec(func: Callable, spec: Dict[str, Any]) -> Options:
    """lfm options for one app: an @lfm.task's own, under the resource specification's."""
    overrides: Dict[str, Any] = {}
    for key in ("cores", "wall", "processes", "category", "pack", "auto", "max_retries", "gpus",
                "context", "reuse"):
        if spec.get(key) is not None:
            overrides[key] = spec[key]
    for key in MB_KEYS:
        value = spec.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            overrides[key] = f"{value}M"
        elif value is not None:
            overrides[key] = value
    if spec.get("running_time_min") is not None and "wall" not in overrides:
        minutes = spec["running_time_min"]
        if isinstance(minutes, bool) or not isinstance(minutes, (int, float)):
            raise ValueError(f"running_time_min: minutes as a number, not {minutes!r}")
        overrides["wall"] = minutes * 60
    inner = user_function(func)
    options = calls.options_of(inner).merged(**overrides)
    if options.category is None:
        options = options.merged(category=getattr(inner, "__name__", None))
    return options


def user_function(func: Callable) -> Callable:
    """The app's own function under Parsl's wrap_error (which turns exceptions into values:
    lfm runs the function itself, so the Report sees its exception)."""
    code = getattr(func, "__code__", None)
    if code is not None and _where(code) == _WRAP_ERROR and hasattr(func, "__wrapped__"):
        return func.__wrapped__
    return func


def _where(code: Any) -> tuple:
    return (code.co_filename, code.co_firstlineno, code.co_name)


# functools.wraps gives wrap_error's wrapper the app's name and module, and dill sends it by
# value (a new code object): where its code comes from tells it.
_WRAP_ERROR = _where(wrap_error(lambda: None).__code__)


def _monitor_wrapper_code() -> tuple:
    wrapped, _, _ = monitor_wrapper(
        f=lambda: None, args=(), kwargs={}, x_try_id=0, x_task_id=0, radio_config=None,
        run_id="", logging_level=0, sleep_dur=0, monitor_resources=False, run_dir="")
    return _where(wrapped.__code__)


# With monitoring on, the DFK hands the executor its monitor_wrapper around the app.
_MONITOR_WRAPPER = _monitor_wrapper_code()


def monitoring_of(func: Callable) -> "tuple[Callable, Optional[Dict[str, Any]]]":
    """(the app, the monitoring settings the DFK's monitor_wrapper holds: radio_config, run_id,
    run_dir, sleep_dur, ...) when `func` is that wrapper, else (func, None)."""
    code = getattr(func, "__code__", None)
    if code is None or _where(code) != _MONITOR_WRAPPER or not getattr(func, "__closure__", None):
        return func, None
    settings = dict(zip(code.co_freevars, (cell.cell_contents for cell in func.__closure__)))
    return settings["f"], settings


def resource_message(report: Report, retries: list, settings: Dict[str, Any], task_id: int,
                     try_id: int) -> Dict[str, Any]:
    """The Report as one row of Parsl's monitoring `resource` table (the columns its psutil
    monitor fills): peak memory as the resident size, the call's CPU, I/O and processes; the
    status column says how the call ended, what limit it exceeded and how often sizing ran it
    again. Columns the Report has no figure for stay empty."""
    memory = report.get("memory") or {}
    cpu = report.get("cpu_time") or {}
    node_memory = (report.get("allocation") or {}).get("node_memory_bytes")
    peak = memory.get("peak_bytes")
    status = (report.get("exit") or {}).get("type", "unknown")
    if report.get("limits_exceeded"):
        status += ": limits exceeded: " + ", ".join(sorted(report["limits_exceeded"]))
    if retries:
        status += f" (after {len(retries)} larger attempt(s))"
    return {
        "run_id": settings["run_id"], "task_id": task_id, "try_id": try_id,
        "timestamp": datetime.datetime.fromtimestamp(report.get("end") or time.time()),
        "resource_monitoring_interval": settings.get("sleep_dur"),
        "hostname": platform.node(),
        "psutil_process_pid": None,
        "psutil_process_memory_resident": peak,
        "psutil_process_memory_virtual": report.get("virtual_memory_bytes"),
        "psutil_process_memory_percent": 100.0 * peak / node_memory if peak and node_memory else None,
        "psutil_process_time_user": cpu.get("user"),
        "psutil_process_time_system": cpu.get("system"),
        "psutil_process_disk_read": report.get("bytes_read"),
        "psutil_process_disk_write": report.get("bytes_written"),
        "psutil_process_children_count": max(0, (report.get("total_processes") or 1) - 1),
        "psutil_process_status": f"lfm: {status}",
    }


def execute_task(buffer: bytes, options: Dict[str, Any]) -> LfmResult:
    """On the worker (HTEX's task_executor): run the app in this node's lfm serve, in the
    worker's working directory as HTEX runs it (a bash app's relative `stdout` lands there).
    An exception (the app's, or lfm.LimitExceeded) propagates with `.report` attached.

    With Parsl monitoring on, the worker (which has HTEX's result channel) sends the task's
    first and last messages, as monitor_wrapper would, and between them its Report as a
    resource message: lfm's figures for the call in place of psutil samples of the worker."""
    func, args, kwargs = unpack_apply_message(buffer)
    kwargs.pop("parsl_resource_specification", None)
    func, monitoring = monitoring_of(func)
    if monitoring is not None:
        task_id = kwargs.pop("_parsl_monitoring_task_id")
        try_id = kwargs.pop("_parsl_monitoring_try_id")
        where = (monitoring["radio_config"], monitoring["run_id"], monitoring["run_dir"])
        send_first_message(try_id, task_id, *where)
    done = None
    try:
        done = call(calls.unwrapped(user_function(func)), args, kwargs, Options(**options),
                    preload=PRELOAD, cwd=os.getcwd())
    finally:
        if monitoring is not None:
            if done is not None and done.report and (monitoring.get("sleep_dur") or 0) > 0:
                message = resource_message(done.report, done.retries, monitoring, task_id, try_id)
                monitoring["radio_config"].create_sender().send((MessageType.RESOURCE_INFO, message))
            send_last_message(try_id, task_id, *where)
    assert done is not None
    return LfmResult(done.result(), done.report)


class ShippedResult:
    """What the worker sends back for a shipped app: the serve's reply, its value unopened
    (a bare worker may not import the value's classes; the submit side does)."""

    def __init__(self, reply: Dict[str, Any]):
        self.reply = reply


def execute_shipped(buffer: bytes) -> ShippedResult:
    """On a worker that may have nothing but parsl and lfm: get the app's pack onto this node
    (once per node) and run the call the submit side prepared in the pack's serve, in the
    worker's working directory as HTEX runs apps."""
    return ShippedResult(shipped_calls.run(pickle.loads(buffer), cwd=os.getcwd()))


def report_of(app_future: Any) -> Optional[Report]:
    """The Report of an app run by LfmHighThroughputExecutor (None before it ran)."""
    exec_future = app_future.task_record.get("exec_fu")
    return getattr(exec_future, "report", None)


class LfmFuture(Future):
    """The executor-level future: the raw value (or exception) and the call's Report."""

    report: Optional[Report] = None
    parsl_executor_task_id: Optional[int] = None


class LfmHighThroughputExecutor(HighThroughputExecutor):
    """A HighThroughputExecutor whose workers run each app in their node's lfm serve: the app
    is limited and measured on its own, and an app that exceeds its memory fails alone with
    lfm.LimitExceeded while the worker pool goes on."""

    def validate_resource_spec(self, resource_specification: dict) -> None:
        spec = dict(resource_specification or {})
        super().validate_resource_spec({k: v for k, v in spec.items() if k not in LFM_KEYS})
        lfm_spec = {k: v for k, v in spec.items() if k in LFM_KEYS}
        try:
            options_from_spec(lambda: None, lfm_spec)
        except (TypeError, ValueError) as error:
            key = str(error).split(":", 1)[0]
            raise InvalidResourceSpecification({key}, str(error)) from None

    def monitor_resources(self) -> bool:
        # lfm measures every call itself (the Report); Parsl's psutil sampling would measure
        # the long-lived worker instead.
        return False

    def __init__(self, *args: Any, lfm: Optional[Dict[str, Any]] = None, **kwargs: Any):
        """`lfm`: resource specification keys every app gets unless its own says otherwise,
        e.g. {"pack": True} to ship each app's pack to workers that have nothing."""
        super().__init__(*args, **kwargs)
        self.lfm = dict(lfm or {})
        unknown = set(self.lfm) - LFM_KEYS
        if unknown:
            raise ValueError(f"lfm: unknown key(s) {', '.join(sorted(unknown))}")

    def _get_launch_command(self, block_id: str) -> str:
        """HTEX's command, after starting the node's serve alongside the worker pool (unless
        every app ships its own pack, which runs in that pack's serve): the first app then
        finds it ready instead of waiting for it (lfm/prestart.py)."""
        command = super()._get_launch_command(block_id)
        if self.lfm.get("pack"):
            return command
        return prestart_command(PRELOAD) + command

    def submit(self, func: Callable, resource_specification: dict, *args: Any, **kwargs: Any):
        spec = dict(self.lfm, **(resource_specification or {}))
        self.validate_resource_spec(spec)
        kwargs.pop("parsl_resource_specification", None)
        options = options_from_spec(func, {k: v for k, v in spec.items() if k in LFM_KEYS})
        if options.pack:
            buffer, context = self._shipped(func, args, kwargs, options)
        else:
            buffer = pack_apply_message(func, args, kwargs, buffer_threshold=1 << 20)
            context = {
                "task_executor": {"f": f"{__name__}.execute_task", "k": {"options": options.__dict__}}
            }
        # Only HTEX's own keys: it exports every resource_spec key as a PARSL_* variable.
        if "priority" in spec:
            context["resource_spec"] = {"priority": spec["priority"]}
        inner = self.submit_payload(context, buffer)
        outer = LfmFuture()
        outer.parsl_executor_task_id = inner.parsl_executor_task_id
        inner.add_done_callback(lambda done: _settle(outer, done))
        return outer


    def _shipped(self, func: Callable, args: tuple, kwargs: dict, options: Options):
        """The app prepared here, where its environment is, for a worker that has nothing:
        the pack's reference and the pickled call (Parsl monitoring's task messages are
        not sent for shipped apps)."""
        app, monitoring = monitoring_of(func)
        if monitoring is not None:
            kwargs.pop("_parsl_monitoring_task_id", None)
            kwargs.pop("_parsl_monitoring_try_id", None)
        address = getattr(self, "address", None)
        host = address if address and address not in ("*", "0.0.0.0") else None
        prepared = shipped_calls.prepare(user_function(app), args, kwargs, options, host)
        return pickle.dumps(prepared), {"task_executor": {"f": f"{__name__}.execute_shipped"}}


def prestart_command(preload: tuple) -> str:
    """A shell prefix that starts the node's serve in the background with the interpreter of
    HTEX's worker pool script (its `#!` line), keyed as the pool's workers will key it; where
    the script is not on PATH it does nothing, and the workers start the serve as before.
    No quotes and no shell variables: Parsl's launchers put the command inside quotes
    (`bash -c '...'`) or an unquoted heredoc (expanded where the heredoc is written)."""
    script = "process_worker_pool.py"
    python = f"$(head -n 1 $(command -v {script}) </dev/null | cut -c 3-)"
    modules = ",".join(preload)
    return (
        f"command -v {script} >/dev/null && "
        f"( {python} -m lfm.prestart --script {script} --preload {modules} & ) ; "
    )


def _settle(outer: LfmFuture, inner: Future) -> None:
    error = inner.exception()
    if error is not None:
        outer.report = getattr(error, "report", None)
        outer.set_exception(error)
        return
    result = inner.result()
    if isinstance(result, ShippedResult):
        ok, value, outer.report = calls.outcome(result.reply)
        outer.set_result(value) if ok else outer.set_exception(value)
        return
    if not isinstance(result, LfmResult):
        outer.set_exception(TypeError(f"lfm's task executor returned {type(result).__name__}"))
        return
    outer.report = result.report
    outer.set_result(result.value)
