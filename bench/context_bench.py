"""Issue 55's app: a Parsl (and Dask) app whose helper module keeps a model loaded on first
use in a module global (bench/context_model.py: 0.5 s to load, 20 ms of work a call), 40 calls
on 2 workers after 2 to warm up. Plain engine against lfm with reused call processes
(`reuse`: the app's own load on first use, once per kept process) and with the model as a
context (and, once, lfm with neither: loaded in every call), in one run; model loads counted
per way.

Figures: each way's makespan for the 40 calls, best and median of ROUNDS (plain interleaved
with each lfm way in turn: reuse first, before any zygote holds the context, whose model
fresh processes would inherit); loads: lines context_model.py appended during that way's runs
(warm-ups included)."""

import contextlib
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))
sys.path.insert(0, HERE)
# Set once: Dask's spawned workers run this module's top level again (as __mp_main__), and
# must append to the same file.
LOADS = os.environ.setdefault("CONTEXT_LOADS", tempfile.mktemp(prefix="context-loads-"))

import context_model  # noqa: E402

CONTEXT = "context_model:load_model"
WORKERS = int(os.environ.get("WORKERS", "2"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
CALLS = int(os.environ.get("CALLS", "40"))
WARM = 2
ENGINES = os.environ.get("ENGINES", "parsl dask").split()


def loads():
    try:
        with open(LOADS) as handle:
            return sum(1 for _ in handle)
    except FileNotFoundError:
        return 0


@contextlib.contextmanager
def parsl_ways():
    import parsl
    from parsl.config import Config
    from parsl.executors import HighThroughputExecutor
    from parsl.providers import LocalProvider

    from lfm.parsl import LfmHighThroughputExecutor

    def htex(cls, label, **extra):
        return cls(label=label, cores_per_worker=1, max_workers_per_node=WORKERS,
                   encrypted=False, provider=LocalProvider(init_blocks=1, max_blocks=1), **extra)

    executors = [htex(HighThroughputExecutor, "plain"), htex(LfmHighThroughputExecutor, "lfm")]
    with tempfile.TemporaryDirectory() as run_dir:
        with parsl.load(Config(executors=executors, strategy="none", run_dir=run_dir)):
            apps = {label: parsl.python_app(context_model.infer, executors=[label])
                    for label in ("plain", "lfm")}
            context = {"context": CONTEXT}
            reuse = {"reuse": True}
            yield {
                "plain": lambda i: apps["plain"](i),
                "lfm, no context": lambda i: apps["lfm"](i),
                "lfm, reuse": lambda i: apps["lfm"](i, parsl_resource_specification=reuse),
                "lfm, context": lambda i: apps["lfm"](i, parsl_resource_specification=context),
            }


@contextlib.contextmanager
def dask_ways():
    import dask
    from distributed import Client, LocalCluster

    from lfm.dask import LfmPlugin

    cluster = LocalCluster(n_workers=WORKERS, threads_per_worker=1, processes=True,
                           dashboard_address=":0")
    with cluster, Client(cluster) as client:
        client.register_plugin(LfmPlugin())

        def lfm_submit(options):
            def submit(i):
                with dask.annotate(executor="lfm", lfm=options):
                    return client.submit(context_model.infer, i, pure=False)
            return submit

        yield {"plain": lambda i: client.submit(context_model.infer, i, pure=False),
               "lfm, reuse": lfm_submit({"reuse": True}),
               "lfm, context": lfm_submit({"context": CONTEXT})}


def makespan(submit, calls):
    start = time.perf_counter()
    futures = [submit(i) for i in range(calls)]
    for future in futures:
        future.result()
    return time.perf_counter() - start


def measure(ways):
    """{way: (makespans, loads)}: the way with neither first (once: before any zygote holds
    the model), then plain interleaved with reuse, then with the context (the zygote holds
    the model from the context's first call on), each warmed with WARM calls first."""
    results = {}
    for way in [w for w in ways if "no context" in w]:
        before = loads()
        makespan(ways[way], WARM)
        results[way] = ([makespan(ways[way], CALLS)], loads() - before)
    for group in (["plain", "lfm, reuse"], ["plain", "lfm, context"]):
        timed = interleaved(ways, [way for way in group if way in ways])
        for way, (times, counted) in timed.items():
            earlier, earlier_loads = results.get(way, ([], 0))
            results[way] = (earlier + times, earlier_loads + counted)
    return results


def interleaved(ways, others):
    """{way: (makespans, loads)} of ROUNDS rounds of `others`, one after the other."""
    counted = {way: 0 for way in others}
    for way in others:
        before = loads()
        makespan(ways[way], WARM)
        counted[way] += loads() - before
    times = {way: [] for way in others}
    for _ in range(ROUNDS):
        for way in others:
            before = loads()
            times[way].append(makespan(ways[way], CALLS))
            counted[way] += loads() - before
    return {way: (times[way], counted[way]) for way in others}


def load_average():
    with open("/proc/loadavg") as handle:
        return " ".join(handle.read().split()[:3])


def main():
    print(f"load average at start: {load_average()}; lfm serve --backend "
          f"{os.environ.get('LFM_BACKEND', 'auto')}")
    print(f"{WORKERS} workers, {CALLS} calls after {WARM} warm-ups, {ROUNDS} rounds "
          "(the way without a context: one round)")
    print(f"{'engine':7} {'way':16} {'best s':>7} {'median s':>9} {'x plain':>8} {'loads':>6}")
    for engine, ways in (("parsl", parsl_ways), ("dask", dask_ways)):
        if engine not in ENGINES:
            continue
        with ways() as submits:
            results = measure(submits)
        plain = statistics.median(results["plain"][0])
        for way, (times, counted) in results.items():
            median = statistics.median(times)
            print(f"{engine:7} {way:16} {min(times):>7.2f} {median:>9.2f} "
                  f"{median / plain:>7.2f}x {counted:>6}")
    print(f"load average at end: {load_average()}")
    os.unlink(LOADS) if os.path.exists(LOADS) else None


if __name__ == "__main__":
    main()
