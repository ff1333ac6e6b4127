"""Functions bench/serve_bench.py calls through each way of running a function."""


def noop():
    return None


def sleep_100ms():
    import time

    time.sleep(0.1)


def heavy_imports():
    import pandas  # noqa: F401
    import sklearn.linear_model  # noqa: F401


def stamped_sleep(seconds):
    """Sleep; return when the function itself started and ended (bench/serve_latency.py)."""
    import time

    started = time.time()
    time.sleep(seconds)
    return [started, time.time()]
