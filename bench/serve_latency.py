"""Where a 100 ms call's time goes in `lfm serve`, from a client sending its next request as
soon as it has a reply (bench/serve_latency.sh). Per call, medians: request sent -> Report
start (the hand-over), Report start -> the function's first line, the function's return ->
Report end, Report end -> reply read, and the round trip; then the CPU time of the serve and
everything under it (zygote, children, cleanup thread) per call, from the serve's rusage."""

import base64
import json
import os
import pickle
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

LFM, BACKEND = sys.argv[1], sys.argv[2]
CALLS, CLIENTS, WARM = int(os.environ.get("CALLS", "60")), int(os.environ.get("CLIENTS", "1")), 3
SLEEP = float(os.environ.get("SLEEP", "0.1"))
HERE = os.path.dirname(os.path.abspath(__file__))
FAILURES = []


def client(path, rows):
    args = base64.b64encode(pickle.dumps(((SLEEP,), {}))).decode()
    request = json.dumps({"id": 1, "function": "serve_fns.py:stamped_sleep", "args_pickle": args,
                          "result": "pickle"}) + "\n"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(path)
        sock.settimeout(30)  # a lost reply fails the bench rather than hanging it
        stream = sock.makefile("rw")
        for n in range(CALLS + WARM):
            sent = time.time()
            stream.write(request)
            stream.flush()
            try:
                reply = json.loads(stream.readline())
            except (OSError, ValueError) as error:
                FAILURES.append(f"call {n}: no reply ({error!r})")
                return
            got = time.time()
            began, ended = pickle.loads(base64.b64decode(reply["result_pickle"]))
            report = reply["report"]
            if n >= WARM:
                rows.append((report["start"] - sent, began - report["start"], report["end"] - ended,
                             got - report["end"], got - sent))


def main():
    scratch = tempfile.mkdtemp()
    path = os.path.join(scratch, "serve.sock")
    serve = subprocess.Popen([LFM, "serve", "--backend", BACKEND, "--history", os.path.join(scratch, "h.sqlite"),
                              "--root", HERE, "--socket", path, "--slots", str(CLIENTS)], cwd=HERE)
    while not os.path.exists(path):
        time.sleep(0.02)
    rows = []
    try:
        threads = [threading.Thread(target=client, args=(path, rows)) for _ in range(CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        own = [own_cpu(serve.pid)] + [own_cpu(pid) for pid in children(serve.pid)]
    finally:
        serve.terminate()
        serve.wait()
    if FAILURES:
        raise SystemExit(f"{BACKEND}: " + "; ".join(FAILURES))
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    m = [1e3 * statistics.median(column) for column in zip(*rows)]
    print(f"{BACKEND}, {CLIENTS} client(s), median of {len(rows)} calls of a {SLEEP * 1e3:g} ms sleep: sent -> start "
          f"{m[0]:.1f} | start -> function {m[1]:.1f} | return -> end {m[2]:.1f} | end -> reply "
          f"{m[3]:.1f} | round trip {m[4]:.1f} ms")
    calls = CLIENTS * (CALLS + WARM)
    print(f"  CPU of the serve and everything under it, per call (its start included): user "
          f"{cpu.ru_utime / calls * 1e3:.1f} ms, system {cpu.ru_stime / calls * 1e3:.1f} ms")
    print(f"  of which the serve process itself {own[0] / calls * 1e3:.1f} ms, the zygote (and "
          f"spare) {sum(own[1:]) / calls * 1e3:.1f} ms")


def own_cpu(pid):
    """User + system seconds of one live process (all its threads, not its children)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid):
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as listed:
                found += [int(p) for p in listed.read().split()]
        except FileNotFoundError:
            pass  # a thread that ended since it was listed
    return found


if __name__ == "__main__":
    main()
