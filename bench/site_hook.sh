#!/usr/bin/env bash
# The site hook's cost (issue 58), and `lfm usage --site` over one million log lines.
# 1. Two identical copies of this machine's Python installation (binary, libpython, standard
#    library; numpy, pandas and their dependencies copied from the pytest venv), one hooked with
#    `lfm usage --install-hook`: `python -c "import numpy, pandas"` in each, alternating, N
#    times; medians of wall and CPU time (user+sys of the child), and the median of the paired
#    differences (each pair ran back to back, so the load's drift cancels out); where valgrind
#    is installed, the instructions each executes (cachegrind; V=0 skips it), which load does
#    not move.
# 2. One million synthetic lfm-site/1 lines (a file per host and user: ~4,000 files; 20,000
#    processes, 200 users, 20 hosts, 100 distributions, 60 days):
#    the wall time of `lfm usage --site DIR --format json`, best of 3.
# Usage: bash bench/site_hook.sh   (from the repository root; N=40 by default; PARTS=hook or
# PARTS=million runs one part; LFM=path skips the release build and uses that binary)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${LFM:-}" ]; then
  cargo build --release -q
  LFM=$PWD/target/release/lfm
fi
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
LFM=$LFM SCRATCH=$SCRATCH N=${N:-40} PARTS=${PARTS:-hook,million} \
  VENV_PACKAGES=$PWD/target/pytest-venv/lib/python3.11/site-packages python3 - <<'PY'
import os, random, resource, shutil, statistics, subprocess, sys, time

lfm, scratch, n = os.environ["LFM"], os.environ["SCRATCH"], int(os.environ["N"])
version = "python%d.%d" % sys.version_info[:2]
skipped = {"site-packages", "test", "idlelib", "tkinter", "lib2to3", "ensurepip"}

def copy_installation(prefix):
    base = sys.base_prefix
    os.makedirs(os.path.join(prefix, "bin"))
    shutil.copy2(os.path.join(base, "bin", version), os.path.join(prefix, "bin", version))
    os.symlink(version, os.path.join(prefix, "bin", "python3"))
    stdlib, target = os.path.join(base, "lib", version), os.path.join(prefix, "lib", version)
    os.makedirs(target)
    for entry in os.listdir(os.path.join(base, "lib")):
        if entry.startswith("libpython"):
            shutil.copy2(os.path.join(base, "lib", entry), os.path.join(prefix, "lib", entry),
                         follow_symlinks=False)
    for entry in os.listdir(stdlib):
        if entry in skipped or entry.startswith("config-"):
            continue
        source = os.path.join(stdlib, entry)
        copy = shutil.copytree if os.path.isdir(source) else shutil.copy2
        copy(source, os.path.join(target, entry))
    packages = os.path.join(target, "site-packages")
    source = os.environ["VENV_PACKAGES"]
    os.makedirs(packages)
    for entry in os.listdir(source):
        if entry.split("-")[0].split(".")[0] in ("numpy", "pandas", "dateutil", "python_dateutil",
                                                  "tzdata", "six"):
            shutil.copytree(os.path.join(source, entry), os.path.join(packages, entry))
    return os.path.join(prefix, "bin", "python3")

parts = os.environ["PARTS"].split(",")

def hook_part():
    plain = copy_installation(os.path.join(scratch, "plain"))
    hooked = copy_installation(os.path.join(scratch, "hooked"))
    logs = os.path.join(scratch, "logs")
    os.makedirs(logs)
    subprocess.run([lfm, "usage", "--install-hook", os.path.join(scratch, "hooked"), "--site", logs],
                   check=True, stdout=subprocess.DEVNULL)
    code = ["-c", "import numpy, pandas"]

    def once(python):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([python, *code], check=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return wall, cpu

    for python in (plain, hooked, plain, hooked):  # compile .pyc files, warm the page cache
        once(python)
    runs = {"hooked": [], "plain": []}
    for i in range(n):
        order = [("hooked", hooked), ("plain", plain)] if i % 2 else [("plain", plain), ("hooked", hooked)]
        for name, python in order:
            runs[name].append(once(python))
    for i, what in enumerate(["wall", "cpu"]):
        a = statistics.median(r[i] for r in runs["hooked"])
        b = statistics.median(r[i] for r in runs["plain"])
        paired = statistics.median(h[i] - p[i] for h, p in zip(runs["hooked"], runs["plain"]))
        print(f'python -c "import numpy, pandas", median {what} time of {n}: hooked {a*1e3:.1f} ms, '
              f"without the hook {b*1e3:.1f} ms: {100*(a-b)/b:+.2f}%; median of the paired "
              f"differences {paired*1e3:+.2f} ms ({100*paired/b:+.2f}%)")
    # Instructions executed (cachegrind): a figure the machine's load does not move.
    if shutil.which("valgrind") and os.environ.get("V", "1") != "0":
        counts = {}
        for name, python in (("plain", plain), ("hooked", hooked)):
            done = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no",
                                   "--cachegrind-out-file=/dev/null", python, *code],
                                  capture_output=True, text=True, check=True)
            line = next(l for l in done.stderr.splitlines() if "I   refs:" in l)
            counts[name] = int(line.split(":")[1].replace(",", ""))
        a, b = counts["hooked"], counts["plain"]
        print(f"instructions (cachegrind): hooked {a:,}, without the hook {b:,}: {100*(a-b)/b:+.2f}%")
    lines = sum(1 for f in os.listdir(logs) for _ in open(os.path.join(logs, f)))
    print(f"log: {lines} lines for {n + 2} hooked processes ({lines / (n + 2):.0f} per process)")


def million_part():
    big = os.path.join(scratch, "million")
    os.makedirs(big)
    rng = random.Random(58)
    dists = [(f"dist{d:03}", f"{rng.randint(0, 9)}.{rng.randint(0, 20)}") for d in range(100)]
    stdlib = ["json", "os", "re", "csv", "sqlite3", "decimal", "email", "logging", "argparse", "gzip"]
    pythons = ["3.9.18", "3.10.13", "3.11.7", "3.12.1"]
    start_time, written, files = 1_790_000_000.0, 0, {}
    for process in range(20_000):
        host, uid = f"node{process % 20:02}", 1000 + rng.randrange(200)
        job = f"slurm:{rng.randrange(10**6)}" if rng.random() < 0.7 else ""
        when = start_time + rng.random() * 60 * 86_400
        context = f"lfm-site/1\t{uid}\t{host}\t{rng.choice(pythons)}\t/opt/python\t0\t{job}\t{host}:{process}:{int(when):x}"
        if (host, uid) not in files:
            files[host, uid] = open(os.path.join(big, f"{host}.{uid}.log"), "w")
        out = files[host, uid]
        out.write(f"{context}\t{when:.3f}\t\tprocess\t\t\n")
        for k in range(49):
            if k < 10:
                out.write(f"{context}\t{when + k:.3f}\t{stdlib[k]}\tstdlib\t\t\n")
            else:
                name, v = dists[int(rng.paretovariate(1.2)) % 100]
                out.write(f"{context}\t{when + k:.3f}\t{name}_m{k % 3}\tsite\t{name}\t{v}\n")
        written += 50
    for out in files.values():
        out.close()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        subprocess.run([lfm, "usage", "--site", big, "--format", "json"], check=True,
                       stdout=subprocess.DEVNULL)
        best = min(best, time.perf_counter() - start)
    size = sum(os.path.getsize(os.path.join(big, f)) for f in os.listdir(big))
    print(f"lfm usage --site over {written:,} lines ({size / 2**20:.0f} MiB, {len(files)} files, "
          f"{os.cpu_count()} CPUs): {best:.2f} s, best of 3")

if "hook" in parts:
    hook_part()
if "million" in parts:
    million_part()
PY
