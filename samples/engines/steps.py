"""The steps of the sample workflow: each declares what it needs with @lfm.task, and runs
as it is on lfm.Executor, Parsl (LfmHighThroughputExecutor) and Dask (LfmPlugin)."""

import numpy as np
import pandas as pd

import lfm


@lfm.task(memory="200M", cores=1, wall="2m", category="simulate")
def simulate(alpha, beta, n):
    """One point of the parameter sweep: a damped random walk, scored by its spread."""
    rng = np.random.default_rng(abs(hash((alpha, beta))) % 2**32)
    steps = rng.normal(alpha, beta, size=n)
    walk = np.cumsum(steps) * np.exp(-np.arange(n) / n)
    return {"alpha": alpha, "beta": beta, "score": float(np.std(walk))}


@lfm.task(memory="400M", cores=1, wall="2m", category="summarize")
def summarize(rows, copies):
    """The sweep as a table, widened `copies` times (the step needs more memory than a
    point), reduced to the best beta per alpha."""
    frame = pd.concat([pd.DataFrame(rows)] * copies, ignore_index=True)
    frame["noise"] = np.random.default_rng(0).random(len(frame))
    best = frame.groupby("alpha")["score"].min()
    return {float(alpha): round(float(score), 6) for alpha, score in best.items()}


@lfm.task(memory="150M", wall="2m", category="oversized")
def oversized(mib):
    """Asks for more than its declared memory: lfm stops it alone."""
    return int(np.ones(mib << 17).sum())  # mib MiB of float64


@lfm.task(wall="2m", category="grow", auto=True, max_retries=5)
def grow(mib):
    """No memory declared: sized from the history of its category, retried larger when a
    call outgrows the size the history suggests."""
    return int(np.ones(mib << 17).sum())
