"""Figures for bench/monitor.sh: start overhead and measurement accuracy of `lfm run`."""
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import psutil

LFM = sys.argv[1]
RUNS = 200


def median_ms(argv):
    samples = []
    for _ in range(RUNS):
        t = time.perf_counter()
        subprocess.run(argv, check=True, stdin=subprocess.DEVNULL)
        samples.append((time.perf_counter() - t) * 1000)
    return statistics.median(samples)


def lfm_report(backend, command):
    with tempfile.NamedTemporaryFile(suffix=".json") as report:
        subprocess.run([LFM, "run", "--quiet", "--backend", backend, "--report", report.name, "--", *command],
                       stdin=subprocess.DEVNULL)
        return json.load(open(report.name))


def time_v(command):
    out = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    fields = {}
    for line in out.stderr.splitlines():
        key, _, value = line.strip().rpartition(": ")
        fields[key] = value
    user = float(fields["User time (seconds)"])
    system = float(fields["System time (seconds)"])
    wall = fields["Elapsed (wall clock) time (h:mm:ss or m:ss)"].split(":")
    wall_s = float(wall[-1]) + 60 * float(wall[-2])
    return int(fields["Maximum resident set size (kbytes)"]) * 1024, (user + system) / wall_s


def psutil_poll(command, interval=0.1):
    """Poll the tree's summed RSS every `interval` (resource_monitor polls /proc the same way)."""
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    root = psutil.Process(process.pid)
    peak = 0
    before = psutil.Process().cpu_times()
    cpu_start = time.perf_counter()
    while process.poll() is None:
        try:
            tree = [root] + root.children(recursive=True)
            peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(interval)
    usage = psutil.Process().cpu_times()
    wall = time.perf_counter() - cpu_start
    used = (usage.children_user - before.children_user) + (usage.children_system - before.children_system)
    return peak, used / wall


MIB = 1024 * 1024


def compare_memory(title, command):
    """Peak memory of `command` by each lfm backend, /usr/bin/time -v and a psutil poller."""
    print(f"\naccuracy: {title}")
    for backend in backends:
        memory = lfm_report(backend, command)["memory"]
        print(f"  lfm {backend:8}: peak {memory['peak_bytes'] / MIB:7.1f} MiB ({memory['peak_source']}), "
              f"rss {memory['peak_rss_bytes'] / MIB:7.1f} MiB")
    rss, _ = time_v(command)
    print(f"  /usr/bin/time -v : max RSS {rss / MIB:7.1f} MiB (largest single process only)")
    peak, _ = psutil_poll(command)
    print(f"  psutil poll 0.1s : peak tree RSS {peak / MIB:7.1f} MiB")

print(f"start overhead, median of {RUNS} runs")
bare = median_ms(["/bin/true"])
backends = ["rlimit", "cgroup1", "cgroup2"]
for backend in backends:
    ms = median_ms([LFM, "run", "--quiet", "--backend", backend, "--", "/bin/true"])
    print(f"  lfm run --backend {backend:8} -- /bin/true: {ms:6.2f} ms   bare: {bare:5.2f} ms   overhead: {ms - bare:5.2f} ms (goal <= 5 ms)")

vm = ["stress-ng", "--vm", "1", "--vm-bytes", "300M", "--vm-keep", "--vm-populate", "-t", "3s", "--quiet"]
cpu = ["stress-ng", "--cpu", "2", "-t", "3s", "--quiet"]
# tests/workloads/workload.c: touch 300 MiB for 50 ms, free, idle 300 ms.
spike = ["target/test-workloads/workload", "spike", "300", "50", "300"]
compare_memory("stress-ng --vm 1 --vm-bytes 300M (true footprint 300 MiB + stress-ng's own)", vm)
print("\naccuracy: stress-ng --cpu 2 for 3 s (true use ~2 cores)")
for backend in backends:
    report = lfm_report(backend, cpu)
    print(f"  lfm {backend:8}: cores peak {report['cores']['peak']:.2f} avg {report['cores']['average']:.2f}")
_, cores = time_v(cpu)
print(f"  /usr/bin/time -v : avg cores {cores:.2f}")
_, cores = psutil_poll(cpu)
print(f"  psutil poll      : avg cores {cores:.2f}")

compare_memory("a 50 ms spike to 300 MiB (tests/workloads/workload.c spike 300 50 300)", spike)
