"""A sample workflow that runs unchanged on three engines, every step in the node's lfm serve:

    python workflow.py lfm      # lfm.Executor
    python workflow.py parsl    # Parsl HighThroughputExecutor (LocalProvider, 2 workers) + lfm
    python workflow.py dask     # Dask LocalCluster (2 worker processes) + lfm

The workflow only needs `submit(fn, *args) -> future` (anything with .result()): a numpy
parameter sweep, a pandas summary with a larger memory need, a step that exceeds its memory
(lfm.LimitExceeded, the workers survive), and a step sized by lfm from its history (auto)."""

import contextlib
import os
import sys
import tempfile

import lfm
from steps import grow, oversized, simulate, summarize

ALPHAS = (0.0, 0.5, 1.0)
BETAS = (0.5, 1.0)


def workflow(submit, points=20_000, copies=2_000, oversized_mib=400):
    sweep = [submit(simulate, a, b, points) for a in ALPHAS for b in BETAS]
    rows = [future.result() for future in sweep]
    summary = submit(summarize, rows, copies).result()
    try:
        submit(oversized, oversized_mib).result()
        over = "returned"
    except lfm.LimitExceeded as error:
        over = f"LimitExceeded: {error}"
    return {"points": len(rows), "summary": summary, "oversized": over}


def auto_workflow(submit, small_mib=20, runs=10, big_mib=300):
    """History first (greedy bucketing needs ten runs before it sizes below its default),
    then a call larger than the history: lfm's first size is too small, the retry fits."""
    for _ in range(runs):
        submit(grow, small_mib).result()
    return submit(grow, big_mib).result()


@contextlib.contextmanager
def lfm_engine():
    with lfm.Executor(max_workers=2) as executor:
        yield executor.submit


@contextlib.contextmanager
def parsl_engine():
    import parsl
    from parsl.config import Config
    from parsl.providers import LocalProvider

    from lfm.parsl import LfmHighThroughputExecutor

    executor = LfmHighThroughputExecutor(
        label="lfm", cores_per_worker=1, max_workers_per_node=2, encrypted=False,
        provider=LocalProvider(init_blocks=1, max_blocks=1),
    )
    with tempfile.TemporaryDirectory(prefix="parsl-") as run_dir:
        config = Config(executors=[executor], strategy="none", run_dir=run_dir)
        with parsl.load(config):
            yield lambda fn, *args: parsl.python_app(fn, executors=["lfm"])(*args)


@contextlib.contextmanager
def dask_engine():
    import dask
    from distributed import Client, LocalCluster

    from lfm.dask import LfmPlugin

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           dashboard_address=":0")
    with cluster, Client(cluster) as client:
        client.register_plugin(LfmPlugin())

        def submit(fn, *args):
            with dask.annotate(executor="lfm"):
                return client.submit(fn, *args, pure=False)

        yield submit


ENGINES = {"lfm": lfm_engine, "parsl": parsl_engine, "dask": dask_engine}


def main(engine):
    # Workers import the steps from here.
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    with ENGINES[engine]() as submit:
        result = workflow(submit)
        result["grow"] = auto_workflow(submit)
    for key, value in result.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ENGINES:
        sys.exit(f"usage: python workflow.py {'|'.join(ENGINES)}")
    main(sys.argv[1])
