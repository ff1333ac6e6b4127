"""The Python side of `lfm call` and `lfm serve`, run inside the target interpreter.

lfm embeds this package in its binary and writes it to a cache directory before use, so the
target interpreter needs nothing installed. It owns loading a function (its analyzer-computed
slice, its whole module, or a pickle), calling it with its arguments, and writing the outcome;
and, for `lfm serve`, the zygote that forks one child per call. It knows nothing of limits or
measurement: the lfm process that started it does that from outside.

Only the standard library is used here (cloudpickle only when a caller sends a pickled function).
"""

FORMAT = "lfm-call-request/1"
