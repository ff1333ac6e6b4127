"""A Parsl app as Parsl users write it: numpy is what `fit` needs, parsl is the worker's
(docs/spec.md, The engine)."""

from parsl import python_app


@python_app
def fit(n):
    import numpy as np
    return float(np.arange(n).mean())
