"""lfm serve at K slots against the two bare fork loops that bound it, for each K given.

Usage: python serve_scale.py LFM VENV_PYTHON K...  (bench/serve_scale.sh sets it up)

For each K, on the same noop function with pandas and sklearn imported once:
- `one parent`: one gc.freeze()d parent forks a child per call, K running at a time, each
  returning its value through a pipe (what one zygote could do, without cgroups or Reports);
- `K parents`: K such parents, each forking its share of the calls one at a time (the
  physical limit when several zygotes fork on several cores);
- `lfm serve --slots K` (`--zygotes` as SERVE_ARGS says, else the serve's default), every call
  in its own cgroup with its own Report, every request in flight at once.
Prints calls/s per way and the serve's ratio to each loop. Environment: CALLS (default 2000),
SERVE_ARGS (extra `lfm serve` arguments, e.g. "--zygotes 2"), BACKEND (default auto).
"""

import json
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CALLS = int(os.environ.get("CALLS", "2000"))

FORK_LOOP = r"""
import gc, os, pickle, sys, time, json
import pandas, sklearn
sys.path.insert(0, sys.argv[2])
import serve_fns
gc.freeze()
n, at_once = int(sys.argv[1]), int(sys.argv[3])
go = sys.stdin.readline()  # every parent starts forking together (the K-parents way)
running, launched, done = {}, 0, 0
start = time.perf_counter()
while done < n:
    while launched < n and len(running) < at_once:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(write, pickle.dumps(serve_fns.noop()))
            os._exit(0)
        os.close(write)
        running[pid] = read
        launched += 1
    pid, _ = os.wait()
    read = running.pop(pid)
    os.read(read, 1 << 16)
    os.close(read)
    done += 1
print(json.dumps({"total": time.perf_counter() - start}))
"""


def fork_loops(python, parents, at_once, calls):
    """`parents` loops forking `calls` in all, `at_once` children each; calls/s from the
    moment every parent was told to go to the last one's end."""
    share = [calls // parents + (1 if n < calls % parents else 0) for n in range(parents)]
    loops = [subprocess.Popen([python, "-c", FORK_LOOP, str(count), HERE, str(at_once)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for count in share]
    time.sleep(0.5)
    # Each parent imports pandas before it reads its go: wait for every one to be idle.
    wait_until_idle(loops)
    start = time.perf_counter()
    for loop in loops:
        loop.stdin.write("go\n")
        loop.stdin.flush()
    for loop in loops:
        out, _ = loop.communicate()
        if loop.returncode != 0:
            raise SystemExit(f"a bare fork loop failed (exit {loop.returncode})")
        json.loads(out)
    return calls / (time.perf_counter() - start)


def wait_until_idle(processes, limit=120):
    """Until every process sleeps (blocked on its go line) or `limit` seconds pass."""
    deadline = time.time() + limit
    while time.time() < deadline:
        states = []
        for process in processes:
            with open(f"/proc/{process.pid}/stat") as handle:
                states.append(handle.read().rsplit(")", 1)[1].split()[0])
        if all(state == "S" for state in states):
            return
        time.sleep(0.2)


def request(n):
    return json.dumps({"id": n, "function": "serve_fns.py:noop", "import_module": True}) + "\n"


def lfm_serve(lfm, python, slots, calls):
    """calls/s of `lfm serve --slots K` with every request in flight at once, and its backend."""
    command = [lfm, "serve", "--python", python, "--preload", "pandas,sklearn,serve_fns",
               "--slots", str(slots), "--backend", os.environ.get("BACKEND", "auto"),
               *os.environ.get("SERVE_ARGS", "").split()]
    server = subprocess.Popen(command, cwd=HERE, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, bufsize=1)
    for n in range(-50, 0):  # warm up: the zygotes' imports, the spares, the backend probe
        server.stdin.write(request(n))
        server.stdin.flush()
        reply = json.loads(server.stdout.readline())
        assert reply["ok"], reply
    backend = reply["report"]["backend"]

    def write_all():
        for n in range(calls):
            server.stdin.write(request(n))
        server.stdin.flush()

    writer = threading.Thread(target=write_all)
    start = time.perf_counter()
    writer.start()
    for _ in range(calls):
        reply = json.loads(server.stdout.readline())
        assert reply["ok"], reply
    total = time.perf_counter() - start
    writer.join()
    server.stdin.close()
    server.wait()
    return calls / total, backend


def main():
    lfm, python, sizes = sys.argv[1], sys.argv[2], [int(k) for k in sys.argv[3:]]
    print(f"{CALLS} noop calls per way; {os.cpu_count()} cores; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; SERVE_ARGS={os.environ.get('SERVE_ARGS', '')!r}")
    print(f"{'K':>3} {'serve':>10} {'one parent':>11} {'K parents':>10} {'serve/one':>10} {'serve/K':>8}  backend")
    for k in sizes:
        one = fork_loops(python, 1, k, CALLS)
        many = fork_loops(python, k, 1, CALLS)
        serve, backend = lfm_serve(lfm, python, k, CALLS)
        print(f"{k:>3} {serve:>10.1f} {one:>11.1f} {many:>10.1f} {serve / one:>9.2f}x {serve / many:>7.2f}x  {backend}",
              flush=True)


if __name__ == "__main__":
    main()
