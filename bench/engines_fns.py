"""The tasks bench/engines_bench.py runs: importable on the workers (bench/ is on PYTHONPATH)."""

import time


def noop():
    return None


def sleep100():
    time.sleep(0.1)
