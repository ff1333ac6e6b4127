"""The no-op call of bench/reuse_latency.py (by name: a module of a source root)."""


def noop(x):
    return x
