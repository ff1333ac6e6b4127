"""Where a served call's CPU goes, against a bare fork loop, in turns (bench/serve.sh's venv).

Usage: python bench/serve_cpu.py VENV_PYTHON TURNS LFM [LFM...]   (CALLS=N, default 1000;
SERVE_ARGS="--zygotes 2": more `lfm serve` arguments, for every binary given)
Each turn runs the bare loop (2 children at a time), the same loop giving each call a v1
memory and cpuacct cgroup of its own (made before the fork, joined by the child, read and
removed after it, as lfm does; where this process may make them), and, for each lfm binary given, `lfm serve
--slots 2` with cgroups (auto) and with rlimit, CALLS noop calls in flight. Prints calls/s and
the CPU each call cost each process, read from /proc: the bare loop's parent (its own time,
its imports included) and children; the zygote's own time and its reaped children's (the
calls); each serve thread's.
"""

import json
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
PYTHON, TURNS, BINARIES = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
CALLS = int(os.environ.get("CALLS", "1000"))
TICK = os.sysconf("SC_CLK_TCK")

BARE = r"""
import gc, os, pickle, resource, sys, time
import pandas, sklearn
sys.path.insert(0, sys.argv[2])
import serve_fns
gc.freeze()
n, at_once, cgroups = int(sys.argv[1]), int(sys.argv[3]), sys.argv[4:]


def made(call):
    # The call's cgroups (one per v1 hierarchy given), made before its fork.
    dirs = [os.path.join(root, f"bare-{os.getpid()}-{call}") for root in cgroups]
    for path in dirs:
        os.mkdir(path)
    return dirs


def measured(dirs):
    # What lfm reads of a call's cgroups at its end, then their removal.
    for path in dirs:
        for name in ("memory.max_usage_in_bytes", "memory.stat", "cpuacct.usage"):
            try:
                with open(os.path.join(path, name)) as handle:
                    handle.read()
            except FileNotFoundError:
                pass
        os.rmdir(path)


running, launched, finished = {}, 0, 0
start = time.perf_counter()
while finished < n:
    while launched < n and len(running) < at_once:
        read, write = os.pipe()
        dirs = made(launched)
        pid = os.fork()
        if pid == 0:
            for path in dirs:
                with open(os.path.join(path, "cgroup.procs"), "w") as procs:
                    procs.write(str(os.getpid()))
            os.write(write, pickle.dumps(serve_fns.noop()))
            os._exit(0)
        os.close(write)
        running[pid] = (read, dirs)
        launched += 1
    pid, _ = os.wait()
    read, dirs = running.pop(pid)
    os.read(read, 1 << 16)
    os.close(read)
    measured(dirs)
    finished += 1
total = time.perf_counter() - start
own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(n / total, (own.ru_utime + own.ru_stime) / n * 1e3, (children.ru_utime + children.ru_stime) / n * 1e3)
"""


def bare(cgroups=()):
    command = [PYTHON, "-c", BARE, str(CALLS), HERE, "2", *cgroups]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    rate, parent, children = map(float, out.stdout.split())
    name = "bare + cgroups" if cgroups else "bare loop"
    return f"{name:18} {rate:6.0f} calls/s  parent {parent:5.2f}  children {children:5.2f} ms a call"


def v1_cgroups():
    """This process's memory and cpuacct cgroups (v1, where writable): the bare loop's calls
    each get one of each, made, joined, read and removed as lfm does; none elsewhere."""
    roots = []
    for line in open("/proc/self/cgroup"):
        _, controllers, path = line.rstrip("\n").split(":", 2)
        for controller in ("memory", "cpuacct"):
            if controller in controllers.split(","):
                root = f"/sys/fs/cgroup/{controller}{path}"
                if os.access(root, os.W_OK):
                    roots.append(root)
    return roots if len(roots) == 2 else []


def ticks(pid):
    """(own, reaped children's) CPU ticks of a process."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


def zygote_ticks(pids):
    """(own, reaped children's) CPU ticks of every zygote (SERVE_ARGS may ask for several)."""
    each = [ticks(pid) for pid in pids]
    return sum(own for own, _ in each), sum(children for _, children in each)


def thread_ticks(pid):
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        stat = open(f"/proc/{pid}/task/{tid}/stat").read()
        name = "janitor" if "janit" in stat.split(")")[0] else "main+others"
        fields = stat.rsplit(")", 1)[1].split()
        out[name] = out.get(name, 0) + int(fields[11]) + int(fields[12])
    return out


def serve(lfm, backend):
    command = [lfm, "serve", "--python", PYTHON, "--preload", "pandas,sklearn,serve_fns", "--slots", "2",
               "--backend", backend, *os.environ.get("SERVE_ARGS", "").split()]
    server = subprocess.Popen(command, cwd=HERE, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def request(n):
        return json.dumps({"id": n, "function": "serve_fns.py:noop", "import_module": True}) + "\n"

    for _ in range(20):
        server.stdin.write(request(-1))
        server.stdin.flush()
        assert json.loads(server.stdout.readline())["ok"]
    zygotes = [int(line.split()[0]) for line in subprocess.check_output(["ps", "-o", "pid=,args=", "--ppid", str(server.pid)], text=True).splitlines() if "zygote" in line]
    zygote_before, threads_before = zygote_ticks(zygotes), thread_ticks(server.pid)
    start = time.perf_counter()

    def write_all():
        for n in range(CALLS):
            server.stdin.write(request(n))
        server.stdin.flush()

    writer = threading.Thread(target=write_all)
    writer.start()
    for _ in range(CALLS):
        assert json.loads(server.stdout.readline())["ok"]
    total = time.perf_counter() - start
    zygote_after, threads_after = zygote_ticks(zygotes), thread_ticks(server.pid)
    writer.join()
    server.stdin.close()
    server.wait()
    per_call = lambda t: t / TICK / CALLS * 1e3  # noqa: E731
    threads = "  ".join(f"serve {name} {per_call(threads_after[name] - threads_before.get(name, 0)):4.2f}" for name in sorted(threads_after))
    return (f"{os.path.basename(lfm)[:10]:10} {backend:6} {CALLS / total:6.0f} calls/s  "
            f"zygote {per_call(zygote_after[0] - zygote_before[0]):5.2f}  children {per_call(zygote_after[1] - zygote_before[1]):5.2f}  {threads} ms a call")


CGROUPS = v1_cgroups()
if not CGROUPS:
    print("no writable v1 memory and cpuacct cgroups here: the bare loop with cgroups is left out")
for turn in range(TURNS):
    print(f"turn {turn + 1} (load {open('/proc/loadavg').read().split()[0]})")
    print(" ", bare(), flush=True)
    if CGROUPS:
        print(" ", bare(CGROUPS), flush=True)
    for lfm in BINARIES:
        for backend in ("auto", "rlimit"):
            print(" ", serve(lfm, backend), flush=True)
