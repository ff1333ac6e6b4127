"""Running a call where Python's frame stack has room to grow.

CPython 3.11+ keeps its frames on a stack of 16 KiB chunks: a call that does not fit in the
current chunk maps a new one and the return that empties it unmaps it at once. Code that
calls a function in a loop while its frame sits at the end of a chunk therefore maps and
unmaps memory on every iteration: importing pandas and scikit-learn made 3,000 such pairs,
and 16,000 when one or two more frames lay below (the import log's, or the caller's own),
~100 ms of page faults and system time on a 1 s import (docs/benchmarks.md). Where this
happens depends on the exact depth, so it moves with any change to the frames below.

`run` calls the function from a frame that declares a large value stack it never uses: that
frame gets a chunk of its own, 1 MiB, and every frame of the call nests inside the rest of it.
The chunk is mapped once; pages the call never reaches are never touched.
"""

import sys

# Slots (8 bytes each) this frame reserves: its chunk is the next power of two above it (1 MiB)
# and the ~61,000 slots left over hold the call's frames (a few dozen slots each).
RESERVED_SLOTS = 70_000


def run(function, *args):
    return function(*args)


if sys.version_info >= (3, 11):
    run.__code__ = run.__code__.replace(co_stacksize=RESERVED_SLOTS)
