"""Per-task overhead of lfm inside Parsl HTEX and Dask, against the same engine without lfm,
on noop and 100 ms tasks and on a typical app (defined here, in `__main__`, so the engines
send it by value; it imports numpy and pandas inside, as Parsl's documentation asks, builds a
small frame and works 100 ms), all measured in one run (bench/engines.sh).

Each way runs a batch of tasks submitted at once on 2 workers; the figure is the batch's
makespan (median of ROUNDS, ways interleaved). Overhead per task = (lfm - plain) makespan x
workers / tasks: the time each task costs a worker more with lfm."""

import contextlib
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))
sys.path.insert(0, HERE)

import engines_fns  # noqa: E402

WORKERS = int(os.environ.get("WORKERS", "2"))
ROUNDS = int(os.environ.get("ROUNDS", "5"))


def typical():
    import time

    import numpy
    import pandas

    frame = pandas.DataFrame(numpy.arange(10_000).reshape(1000, 10))
    time.sleep(0.1)
    return int(frame.sum().sum())


TASKS = {"noop": int(os.environ.get("NOOP_TASKS", "400")),
         "100 ms": int(os.environ.get("SLEEP_TASKS", "60")),
         "typical": int(os.environ.get("TYPICAL_TASKS", "40"))}
TASKS = {kind: n for kind, n in TASKS.items() if n > 0}
FUNCTIONS = {"noop": engines_fns.noop, "100 ms": engines_fns.sleep100, "typical": typical}
ENGINES = os.environ.get("ENGINES", "parsl dask").split()


@contextlib.contextmanager
def parsl_ways():
    import parsl
    from parsl.config import Config
    from parsl.executors import HighThroughputExecutor
    from parsl.providers import LocalProvider

    from lfm.parsl import LfmHighThroughputExecutor

    def htex(cls, label):
        return cls(label=label, cores_per_worker=1, max_workers_per_node=WORKERS,
                   encrypted=False, provider=LocalProvider(init_blocks=1, max_blocks=1))

    executors = [htex(HighThroughputExecutor, "plain"), htex(LfmHighThroughputExecutor, "lfm")]
    with tempfile.TemporaryDirectory() as run_dir:
        with parsl.load(Config(executors=executors, strategy="none", run_dir=run_dir)):
            yield {label: (lambda fn, label=label: parsl.python_app(fn, executors=[label])())
                   for label in ("plain", "lfm")}


@contextlib.contextmanager
def dask_ways():
    import dask
    from distributed import Client, LocalCluster

    from lfm.dask import LfmPlugin

    cluster = LocalCluster(n_workers=WORKERS, threads_per_worker=1, processes=True,
                           dashboard_address=":0")
    with cluster, Client(cluster) as client:
        client.register_plugin(LfmPlugin())

        def lfm_submit(fn):
            with dask.annotate(executor="lfm"):
                return client.submit(fn, pure=False)

        yield {"plain": lambda fn: client.submit(fn, pure=False), "lfm": lfm_submit}


def makespan(submit, fn, tasks):
    start = time.perf_counter()
    futures = [submit(fn) for _ in range(tasks)]
    for future in futures:
        future.result()
    return time.perf_counter() - start


def measure(ways):
    for submit in ways.values():  # warm: workers up, the node's lfm serve started
        makespan(submit, engines_fns.noop, 20)
    times = {(kind, way): [] for kind in TASKS for way in ways}
    for _ in range(ROUNDS):
        for kind, tasks in TASKS.items():
            for way, submit in ways.items():
                times[(kind, way)].append(makespan(submit, FUNCTIONS[kind], tasks))
    return {key: statistics.median(values) for key, values in times.items()}


def load() -> str:
    with open("/proc/loadavg") as handle:
        return " ".join(handle.read().split()[:3])


def main():
    print(f"load average at start: {load()}; lfm serve --backend {os.environ.get('LFM_BACKEND', 'auto')}")
    print(f"{WORKERS} workers, median of {ROUNDS} rounds; tasks per batch: "
          + ", ".join(f"{kind} {n}" for kind, n in TASKS.items()))
    print(f"{'engine':8} {'task':7} {'tasks':>5} {'plain s':>8} {'lfm s':>8} "
          f"{'plain/task':>11} {'lfm/task':>9} {'overhead/task':>14} {'overhead':>9}")
    for engine, ways in (("parsl", parsl_ways), ("dask", dask_ways)):
        if engine not in ENGINES:
            continue
        with ways() as submits:
            medians = measure(submits)
        for kind, tasks in TASKS.items():
            plain, lfm = medians[(kind, "plain")], medians[(kind, "lfm")]
            per_plain, per_lfm = plain * WORKERS / tasks, lfm * WORKERS / tasks
            print(f"{engine:8} {kind:7} {tasks:>5} {plain:>8.2f} {lfm:>8.2f} "
                  f"{per_plain * 1e3:>8.1f} ms {per_lfm * 1e3:>6.1f} ms "
                  f"{(per_lfm - per_plain) * 1e3:>11.1f} ms {(lfm / plain - 1) * 100:>8.1f}%")
    print(f"load average at end: {load()}")


if __name__ == "__main__":
    main()
