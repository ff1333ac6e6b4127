"""Functions bench/serve_bench.py calls through each way of running a function."""


def noop():
    return None


def sleep_100ms():
    import time

    time.sleep(0.1)
