"""First and later calls of the functions a workflow really sends, through lfm.Executor and a
ProcessPoolExecutor, one worker each (issue 29 §1): a `__main__` function that uses pandas
imported at the script's top (sent by value), and a function of an installed package
(`sklearn.utils.check_random_state`, sent by reference). Each way gets a fresh worker (a
fresh lfm serve: LFM_IDLE_TIMEOUT and its own runtime directory, see bench/serve.sh).

Usage: python serve_warm.py   (bench/serve.sh sets LFM_BIN and PYTHONPATH)
"""

import os
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

import pandas as pd

import lfm

CALLS = int(os.environ.get("WARM_CALLS", "10"))


def total(n):
    return int(pd.Series(range(n)).sum())


def timings(executor, fn, arg):
    times = []
    for _ in range(CALLS):
        start = time.perf_counter()
        executor.submit(fn, arg).result()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def row(name, way, times):
    later = times[1:]
    print(f"{name:34} {way:22} first {times[0]:7.1f} ms  second {later[0]:7.1f} ms  "
          f"later median {statistics.median(later[1:]):6.1f} ms  max {max(later[1:]):6.1f} ms")


def main():
    from sklearn.utils import check_random_state

    print(f"{CALLS} calls each, one worker; 'later' excludes the first two")
    for name, fn, arg in (("__main__ function using pandas", total, 100),
                          ("sklearn.utils.check_random_state", check_random_state, 3)):
        os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="lfm-warm-")  # a fresh serve
        with lfm.Executor(max_workers=1) as executor:
            row(name, "lfm.Executor", timings(executor, fn, arg))
        with ProcessPoolExecutor(1) as pool:
            row(name, "ProcessPoolExecutor", timings(pool, fn, arg))


if __name__ == "__main__":
    main()
