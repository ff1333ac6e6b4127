"""The call's frames nest in a chunk of their own: no memory mapped and unmapped per call."""

import resource
import sys

import pytest

from lfm_runner import headroom


def leaf():
    return None


def faults_of_a_hot_loop():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(2000):
        leaf()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def at_depth(n):
    return faults_of_a_hot_loop() if n == 0 else at_depth(n - 1)


def worst_over_depths():
    """Page faults of the loop at the worst of 300 depths: one depth puts it at a chunk's end."""
    return max(at_depth(n) for n in range(300))


def test_run_passes_arguments_and_returns_the_value():
    assert headroom.run(lambda a, b: (a, b), 1, "x") == (1, "x")


def test_a_hot_loop_at_any_depth_maps_no_memory_per_iteration():
    if sys.version_info < (3, 11):
        pytest.skip("frames live on a chunked stack from Python 3.11 on")
    unprotected = worst_over_depths()
    if unprotected < 1000:
        pytest.skip(f"this CPython does not unmap a chunk per call ({unprotected} faults)")
    assert headroom.run(worst_over_depths) < 100
