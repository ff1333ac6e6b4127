"""samples/engines/workflow.py, unchanged, on lfm.Executor, Parsl HTEX and a Dask
LocalCluster: the same results, the oversized step stopped by lfm, and the auto step run
again larger after its history-sized first attempt ran out of memory."""

import json
import os
import subprocess
import sys

import pytest

SAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                      "samples", "engines")
sys.path.insert(0, SAMPLE)
# Workers (Parsl's, Dask's) import the steps from the sample's directory.
os.environ["PYTHONPATH"] = os.pathsep.join([SAMPLE, os.environ.get("PYTHONPATH", "")])

import workflow  # noqa: E402


def killed_for_memory(category):
    """How many runs of `category` lfm killed for memory, from its history."""
    done = subprocess.run(
        [os.environ["LFM_BIN"], "history", "--category", category, "--format", "json"],
        capture_output=True, text=True, check=True,
    )
    return sum(1 for row in json.loads(done.stdout) if "memory" in row["exceeded"])


@pytest.fixture(scope="module")
def expected_summary():
    with workflow.lfm_engine() as submit:
        return workflow.workflow(submit)["summary"]


# The engines share one history: each one's large call is larger than any before it, so
# that whichever strategy sizes it from that history sizes it too small the first time (a
# strategy that saw an earlier engine's 300 MiB call may size the next one at 300 MiB).
LARGE_MIB = {"lfm": 300, "parsl": 400, "dask": 500}


@pytest.mark.parametrize("engine", ["lfm", "parsl", "dask"])
def test_the_sample_runs_unchanged_on(engine, expected_summary):
    with workflow.ENGINES[engine]() as submit:
        result = workflow.workflow(submit)
        killed_before = killed_for_memory("grow")
        grown = workflow.auto_workflow(submit, big_mib=LARGE_MIB[engine])
    assert result["points"] == 6
    assert result["summary"] == expected_summary
    assert result["oversized"].startswith("LimitExceeded: oversized: limit exceeded: memory")
    assert grown == LARGE_MIB[engine] << 17
    assert killed_for_memory("grow") > killed_before, "the big call's first size ran out"
