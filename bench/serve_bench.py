"""lfm serve and lfm call against the ways a workflow could run a noop function otherwise.

Usage: python serve_bench.py LFM VENV_PYTHON  (bench/serve.sh sets it up)
Prints per-call latency (p50/p99) and throughput, and the ratios the goals are stated in.
"""

import json
import os
import statistics
import subprocess
import sys
import time

LFM, PYTHON = sys.argv[1], sys.argv[2]
HERE = os.path.dirname(os.path.abspath(__file__))
CALLS = int(os.environ.get("CALLS", "2000"))


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p / 100))]


def show(name, latencies, total_seconds, calls):
    print(f"{name:44} p50 {percentile(latencies, 50) * 1e3:7.2f} ms  p99 {percentile(latencies, 99) * 1e3:7.2f} ms  "
          f"throughput {calls / total_seconds:8.1f} calls/s")
    return calls / total_seconds


FORK_LOOP = r"""
import gc, os, pickle, sys, time, json
import pandas, sklearn
sys.path.insert(0, sys.argv[2])
import serve_fns
gc.freeze()
n, at_once = int(sys.argv[1]), int(sys.argv[3])
lat, running, launched = [], {}, 0
start = time.perf_counter()
while len(lat) < n:
    while launched < n and len(running) < at_once:
        read, write = os.pipe()
        t = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os.write(write, pickle.dumps(serve_fns.noop()))
            os._exit(0)
        os.close(write)
        running[pid] = (t, read)
        launched += 1
    pid, _ = os.wait()
    t, read = running.pop(pid)
    os.read(read, 1 << 16)
    os.close(read)
    lat.append(time.perf_counter() - t)
print(json.dumps({"total": time.perf_counter() - start, "lat": lat}))
"""

POOL = r"""
import json, sys, time
from concurrent.futures import ProcessPoolExecutor
sys.path.insert(0, sys.argv[2])
import serve_fns

def init():
    import pandas, sklearn

if __name__ == "__main__":
    n = int(sys.argv[1])
    with ProcessPoolExecutor(max_workers=2, initializer=init) as pool:
        pool.submit(serve_fns.noop).result()
        lat = []
        for _ in range(200):
            t = time.perf_counter(); pool.submit(serve_fns.noop).result(); lat.append(time.perf_counter() - t)
        start = time.perf_counter()
        futures = [pool.submit(serve_fns.noop) for _ in range(n)]
        [f.result() for f in futures]
        total = time.perf_counter() - start
    print(json.dumps({"total": total, "lat": lat}))

"""


def python_json(code, *args):
    out = subprocess.run([PYTHON, "-c", code, *map(str, args)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def bare_fork_loop(at_once):
    """A fork per call, `at_once` children running at a time, each returning its value through
    a pipe: what lfm serve with that many slots does, without cgroups, Reports or history."""
    result = python_json(FORK_LOOP, CALLS, HERE, at_once)
    return show(f"bare fork per call, {at_once} at a time", result["lat"], result["total"], CALLS)


def process_pool():
    result = python_json(POOL, CALLS, HERE)
    return show("ProcessPoolExecutor(2), no isolation", result["lat"], result["total"], CALLS)


def cold_start(n=5):
    latencies = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run([PYTHON, "-c", "import pandas, sklearn, serve_fns; serve_fns.noop()"], check=True, cwd=HERE)
        latencies.append(time.perf_counter() - t)
    return show("cold python -c per call (pandas+sklearn)", latencies, sum(latencies), n)


def request(n):
    return json.dumps({"id": n, "function": "serve_fns.py:noop", "import_module": True}) + "\n"


def lfm_serve(slots, backend):
    command = [LFM, "serve", "--python", PYTHON, "--preload", "pandas,sklearn,serve_fns",
               "--slots", str(slots), "--backend", backend]
    server = subprocess.Popen(command, cwd=HERE, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    # Warm up (and wait for the zygote's imports), then sequential latency.
    server.stdin.write(request(-1)); server.stdin.flush(); server.stdout.readline()
    latencies = []
    for n in range(300):
        t = time.perf_counter()
        server.stdin.write(request(n)); server.stdin.flush()
        reply = json.loads(server.stdout.readline())
        latencies.append(time.perf_counter() - t)
        assert reply["ok"], reply
    backend_used = reply["report"]["backend"]
    # Throughput: every request in flight at once (a writer thread keeps the pipe full).
    import threading

    def write_all():
        for n in range(CALLS):
            server.stdin.write(request(n))
        server.stdin.flush()

    start = time.perf_counter()
    writer = threading.Thread(target=write_all)
    writer.start()
    for _ in range(CALLS):
        assert json.loads(server.stdout.readline())["ok"]
    total = time.perf_counter() - start
    writer.join()
    server.stdin.close()
    server.wait()
    return show(f"lfm serve --slots {slots} ({backend_used}, Report per call)", latencies, total, CALLS)


def lfm_call_overhead(n=21):
    """In turns (run, call, run, call...): the host's load comes in bursts, and back-to-back
    blocks of one command's runs let a burst fall on one of them only."""
    def timed(command):
        t = time.perf_counter()
        subprocess.run(command, check=True, cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - t

    runs, calls, slices = [], [], []
    for _ in range(n):
        runs.append(timed([LFM, "run", "--quiet", "--", PYTHON, "-c", "import serve_fns; print(serve_fns.noop())"]))
        calls.append(timed([LFM, "call", "--quiet", "--python", PYTHON, "--import-module", "serve_fns.py:noop"]))
        slices.append(timed([LFM, "call", "--quiet", "--python", PYTHON, "serve_fns.py:noop"]))
    run, call, sliced = statistics.median(runs), statistics.median(calls), statistics.median(slices)
    print(f"lfm run -- python -c (median of {n}) {run * 1e3:7.1f} ms;  lfm call --import-module {call * 1e3:7.1f} ms;"
          f"  overhead {(call - run) * 1e3:+.1f} ms (goal <= 20 ms)")
    print(f"lfm call (slice, the default) {sliced * 1e3:7.1f} ms;  overhead {(sliced - run) * 1e3:+.1f} ms")


def main():
    if os.environ.get("ONLY") == "call":
        return lfm_call_overhead()
    print(f"{CALLS} noop calls each; 2-core machine; pandas+sklearn imported once where a process is reused")
    fork1 = bare_fork_loop(1)
    fork2 = bare_fork_loop(2)
    serve2 = lfm_serve(2, "auto")
    serve1 = lfm_serve(1, "auto")
    rlimit = lfm_serve(2, "rlimit")
    pool = process_pool()
    cold = cold_start()
    print("throughput at equal concurrency (goal >= 0.8x):")
    print(f"lfm serve --slots 2 / bare fork loop 2 at a time: {serve2 / fork2:.2f}x")
    print(f"lfm serve --slots 1 / bare fork loop 1 at a time: {serve1 / fork1:.2f}x")
    print(f"lfm serve rlimit --slots 2 / bare fork loop 2 at a time: {rlimit / fork2:.2f}x")
    print(f"lfm serve --slots 2 / cold start:     {serve2 / cold:.0f}x  (goal >= 100x)")
    print(f"lfm serve --slots 2 / ProcessPoolExecutor: {serve2 / pool:.2f}x")
    lfm_call_overhead()


main()
