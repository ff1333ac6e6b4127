"""Arguments and results through lfm.Executor against a ProcessPoolExecutor (issue 29 §3).

Usage: python data_bench.py  (bench/data.sh sets LFM_BIN, PYTHONPATH and the venv up)
One worker each; a `__main__` function that returns its numpy argument, and one that takes a
large argument and returns a small result. Each size is called CALLS times (default 3) after a
first, warming call; prints the median wall time per call and the ratio lfm / pool.
"""

import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy

import lfm

SIZES_MIB = [int(s) for s in os.environ.get("SIZES", "1 10 100 1000").split()]
CALLS = int(os.environ.get("CALLS", "3"))


def echo(array):
    return array


def length(array):
    return len(array)


def timed(executor, fn, value):
    start = time.perf_counter()
    executor.submit(fn, value).result()
    return time.perf_counter() - start


def median_call(executor, fn, value):
    timed(executor, fn, value[:1])
    return statistics.median(timed(executor, fn, value) for _ in range(CALLS))


def main():
    memory = f"{max(SIZES_MIB) * 4 + 512}M"
    print(f"{'function':8} {'MiB':>6} {'lfm.Executor':>14} {'ProcessPool':>13} {'ratio':>7}")
    with lfm.Executor(max_workers=1, memory=memory) as served, ProcessPoolExecutor(1) as pool:
        for fn in (echo, length):
            for mib in SIZES_MIB:
                value = numpy.ones(mib << 17)  # float64: 8 bytes each
                ours = median_call(served, fn, value)
                theirs = median_call(pool, fn, value)
                print(f"{fn.__name__:8} {mib:6} {ours * 1e3:11.1f} ms {theirs * 1e3:10.1f} ms "
                      f"{ours / theirs:6.2f}x", flush=True)


if __name__ == "__main__":
    sys.exit(main())
