"""The helper module of bench/context_bench.py's app (issue 55): a model kept in a module
global, loaded on first use as inference apps keep theirs. `load_model` is also the lfm
context's initialiser. Every load appends a line to $CONTEXT_LOADS, so the bench counts them."""

import os
import time

import numpy

MODEL = None
LOAD_SECONDS = 0.5


def load_model():
    """A 100 x 1000 array that takes 0.5 s to make (as reading weights from disk would)."""
    global MODEL
    started = time.perf_counter()
    rng = numpy.random.default_rng(0)
    model = rng.standard_normal((100, 1000))
    time.sleep(max(0.0, LOAD_SECONDS - (time.perf_counter() - started)))
    MODEL = model
    loads = os.environ.get("CONTEXT_LOADS")
    if loads:
        with open(loads, "a") as handle:
            handle.write(f"{os.getpid()}\n")


def get_model():
    if MODEL is None:
        load_model()
    return MODEL


def infer(seed):
    """20 ms of work with the model (matrix-vector products until 20 ms have passed)."""
    model = get_model()
    vector = numpy.full(1000, float(seed))
    total, deadline = 0.0, time.perf_counter() + 0.02
    while time.perf_counter() < deadline:
        total += float((model @ vector).sum())
    return total
