"""Round trip of a no-op call through `lfm.Executor(max_workers=1)`, with `reuse=True` (the
call runs in a kept process) against forked calls, in one run: ms a call, 200 calls after 10,
ROUNDS rounds alternating. Run from the repository root with the engines venv's python:
LFM_BIN=target/release/lfm PYTHONPATH=python:bench python bench/reuse_latency.py"""

import os
import time

import lfm
import reuse_noop

CALLS = int(os.environ.get("CALLS", "200"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))


def ms_a_call(reuse):
    with lfm.Executor(max_workers=1, reuse=reuse) as executor:
        for i in range(10):
            executor.submit(reuse_noop.noop, i).result()
        started = time.perf_counter()
        for i in range(CALLS):
            executor.submit(reuse_noop.noop, i).result()
        return (time.perf_counter() - started) / CALLS * 1e3


def main():
    for _ in range(ROUNDS):
        reused, forked = ms_a_call(True), ms_a_call(False)
        with open("/proc/loadavg") as handle:
            load = " ".join(handle.read().split()[:3])
        print(f"reuse {reused:.2f} ms/call, forked {forked:.2f} ms/call (load {load})")


if __name__ == "__main__":
    main()
