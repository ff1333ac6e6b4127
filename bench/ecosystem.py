#!/usr/bin/env python3
"""Driver of bench/ecosystem.sh (issue 53): every top-level module of the corpus venv imported
with plain python and through each lfm path, and the closure recall of the same imports.

Per top-level module (from the installed distributions' RECORD), bench/ecosystem_probe.py's
`observe` runs under: plain python; `lfm call`; a fresh `lfm serve`'s first call and, once its
zygote has learned the module, a warm call; and a pack of the module (`lfm pack MODULE
--parts`, composed by `lfm unpack`, its `run python3`). A module differs on a path when it
imports under plain python and, on that path, fails or shows another face (class, loader, file,
public names). Recall: the distributions plain python's import loaded (files in `sys.modules`
after it, less what the interpreter loaded at start-up) against `lfm analyze --closure import
MODULE`'s distributions. lfm run has no import log (it runs any command), so it is no path here.

Environment: LFM, PY (the corpus venv's interpreter); PATHS (comma-separated, default
call,serve,pack), ONLY (comma-separated modules), JOBS (default 2), OUT (the JSON report),
PACK_MAX_GB (a module whose import loads more is not packed, and is listed so; default: no
limit: every module's parts go to one directory and are unpacked into one cache, as on a node,
so torch's part is written and unpacked once for the corpus, and both are removed at the end),
RECALL=0 (no closure recall), REUSE (an earlier OUT: its imports again, the recall anew; with
ONLY, of those modules alone: `PATHS= RECALL=0 OUT=plain.json` once, then `REUSE=plain.json
ONLY=torch` for each turn on the closure rules).
Never imports the corpus in this interpreter: only PY does.
"""

import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from closure_truth import closures, run_json  # noqa: E402

BENCH = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 300
# Loaded by every interpreter of the venv before any code runs (site, .pth files).
STARTUP = r"""
import json, sys
print(json.dumps({n: getattr(m, "__file__", None) for n, m in list(sys.modules.items())}))
"""


class Bench:
    def __init__(self, lfm, python, scratch):
        self.lfm, self.python, self.scratch = lfm, python, scratch
        # The probe alone in its directory: nothing beside it shadows a corpus module.
        self.probe_dir = os.path.join(scratch, "probe")
        os.makedirs(self.probe_dir)
        shutil.copy(os.path.join(BENCH, "ecosystem_probe.py"), self.probe_dir)
        self.probe = os.path.join(self.probe_dir, "ecosystem_probe.py")
        self.owners, self.sizes = {}, {}
        # Modules whose imports load more than this are not packed (none by default).
        self.pack_max = float(os.environ.get("PACK_MAX_GB", "inf")) * 2**30
        # One parts directory and one unpack cache for every module, as a node keeps them.
        self.parts = os.path.join(scratch, "parts")
        self.unpacked = os.path.join(scratch, "packs")

    def run(self, command, **kwargs):
        try:
            return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT,
                                  stdin=subprocess.DEVNULL, cwd=self.probe_dir, **kwargs)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(command, -1, "", f"timed out after {TIMEOUT}s")

    def plain(self, module):
        done = self.run([self.python, self.probe, module])
        if done.returncode != 0:
            return {"face": {"ok": False, "error": f"exit {done.returncode}"}, "files": {}}
        return json.loads(done.stdout.strip().splitlines()[-1])

    def call(self, module):
        cache = os.path.join(self.scratch, "call")
        done = self.run([self.lfm, "call", "--quiet", "--python", self.python,
                         "--history", os.path.join(cache, "history.sqlite"),
                         "--cache-dir", cache, "--args", json.dumps([module]),
                         "ecosystem_probe.py:observe"])
        return reply_of(done)

    def serve(self, module):
        """The first call of a fresh serve, and a warm one once its zygote learned `module`."""
        cache = os.path.join(self.scratch, f"serve-{os.getpid()}-{module}")
        serve = subprocess.Popen(
            [self.lfm, "serve", "--backend", "rlimit", "--no-history", "--slots", "1",
             "--python", self.python, "--cache-dir", cache],
            cwd=self.probe_dir, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True)
        try:
            return self.first_and_warm(serve, module)
        except (OSError, ValueError, KeyError) as error:
            failed = {"ok": False, "error": f"serve: {type(error).__name__}: {error}"[:200]}
            return failed, failed
        finally:
            serve.kill()
            serve.wait()
            shutil.rmtree(cache, ignore_errors=True)

    def first_and_warm(self, serve, module):
        def ask(request):
            serve.stdin.write(json.dumps(request) + "\n")
            serve.stdin.flush()
            return json.loads(serve.stdout.readline())

        request = {"function": "ecosystem_probe.py:observe", "args": [module]}
        first = ask({"id": "first", **request})
        self.wait_for_learning(ask, module)
        warm = ask({"id": "warm", **request})
        return served(first), served(warm)

    @staticmethod
    def wait_for_learning(ask, module, settled=3.0, longest=120.0):
        """Until the zygote has learned `module`, or what it learned has not changed for
        `settled` seconds (the serve learns only some modules: installed ones a call loaded)."""
        started = last_change = time.monotonic()
        learned = None
        while time.monotonic() - started < longest:
            zygote = ask({"id": "status", "status": True})["status"].get("zygote") or {}
            if module in (zygote.get("learned") or []):
                return
            if zygote.get("learned") != learned:
                learned, last_change = zygote.get("learned"), time.monotonic()
            elif time.monotonic() - last_change > settled:
                return
            time.sleep(0.5)

    def loaded_bytes(self, files):
        """Installed bytes of the distributions an import loaded (what its pack would hold)."""
        owners = {self.owners.get(os.path.realpath(f)) for f in files.values()}
        return sum(self.sizes.get(owner, 0) for owner in owners if owner)

    def pack(self, module):
        """The module's face from its pack: its parts written beside every other module's
        (a distribution's part is written once) and composed from the shared unpack cache."""
        packed = self.run([self.lfm, "pack", "--quiet", "--python", self.python, "--level", "1",
                           "--parts", self.parts, self.importer(module)])
        if packed.returncode != 0:
            return {"ok": False, "error": "lfm pack: " + last_line(packed.stderr)}
        manifest = packed.stdout.strip().splitlines()[-1]
        unpacked = self.run([self.lfm, "unpack", "--cache", self.unpacked, manifest])
        if unpacked.returncode != 0:
            return {"ok": False, "error": "lfm unpack: " + last_line(unpacked.stderr)}
        root = unpacked.stdout.strip().splitlines()[-1]
        done = self.run([os.path.join(root, "run"), "python3", self.probe, module])
        if done.returncode != 0:
            return {"ok": False, "error": f"exit {done.returncode}: {last_line(done.stderr)}"}
        return json.loads(done.stdout.strip().splitlines()[-1])["face"]


    def importer(self, module):
        """A file whose top level is `import module`: the pack's target. (Naming the installed
        module itself as the target packs its `__init__.py` as the function's own file, which
        shadows the rest of its distribution on the worker: reported, not the bench's to fix.)"""
        directory = os.path.join(self.scratch, "importers", module)
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, "eco_importer.py")
        with open(path, "w") as file:
            file.write(f"import {module}\n")
        return path


def last_line(text):
    lines = text.strip().splitlines()
    return lines[-1][:200] if lines else ""


def reply_of(done):
    if done.returncode != 0:
        return {"ok": False, "error": f"exit {done.returncode}: {last_line(done.stderr)}"}
    return json.loads(done.stdout)


def served(reply):
    if reply.get("ok"):
        return reply["result"]
    error = reply.get("error") or {}
    message = error.get("message", "") if isinstance(error, dict) else str(error)
    return {"ok": False, "error": f"serve: {message}"[:200]}


def top_level_modules(index):
    """Each top-level module of the venv once, with the distribution that installs it."""
    modules = {}
    for dist, tops in sorted(index["tops"].items()):
        for top in tops:
            if top not in ("tests", "test", "testing", "docs", "examples", "benchmarks"):
                modules.setdefault(top, dist)
    return modules


def startup_dists(python, owners):
    loaded = run_json([python, "-c", STARTUP])
    return {owners[os.path.realpath(f)] for f in loaded.values()
            if f and os.path.realpath(f) in owners}


def truth(files, owners, startup):
    used = {}
    for name, file in files.items():
        owner = owners.get(os.path.realpath(file))
        if owner and owner not in startup:
            used.setdefault(owner, name)
    return used


def differs(plain_face, seen):
    """Why `seen` is not what plain python showed, or None."""
    if seen == plain_face:
        return None
    if not seen.get("ok"):
        return f"fails: {seen.get('error')}"
    changed = sorted(k for k in set(plain_face) | set(seen) if plain_face.get(k) != seen.get(k))
    return "; ".join(f"{k} {plain_face.get(k)!r} -> {seen.get(k)!r}" for k in changed)


def measure_module(bench, module, paths):
    plain = bench.plain(module)
    row = {"plain": plain["face"], "files": plain["files"], "paths": {}}
    if not plain["face"].get("ok"):
        return row
    if "call" in paths:
        row["paths"]["lfm call"] = bench.call(module)
    if "serve" in paths:
        row["paths"]["serve, first call"], row["paths"]["serve, warm call"] = bench.serve(module)
    if "pack" in paths:
        loaded = bench.loaded_bytes(plain["files"])
        if loaded <= bench.pack_max:
            row["paths"]["pack"] = bench.pack(module)
        else:
            row["not_packed"] = f"loads {loaded / 2**30:.1f} GiB of distributions"
    return row


def measure(bench, modules, paths, jobs):
    rows = {}
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = {pool.submit(measure_module, bench, m, paths): m for m in modules}
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            module = futures[future]
            rows[module] = future.result()
            verdicts = [p for p, seen in rows[module]["paths"].items()
                        if differs(rows[module]["plain"], seen)]
            print(f"[{done}/{len(modules)}] {module}: plain "
                  f"{'ok' if rows[module]['plain'].get('ok') else 'fails'}"
                  f"{'; differs: ' + ', '.join(verdicts) if verdicts else ''}",
                  file=sys.stderr, flush=True)
    return rows


def recall(bench, rows, owners, startup):
    """Truth distributions covered by each imported module's import closure."""
    imported = sorted(m for m, row in rows.items() if row["plain"].get("ok"))
    found = closures(bench.lfm, bench.python, imported, batch=25)
    needed = covered = 0
    misses = []
    for module in imported:
        used = truth(rows[module]["files"], owners, startup)
        closure = found.get(module)
        if closure is None:
            misses.append({"module": module, "distribution": "(not analysed)", "via": ""})
            closure = set()
        needed += len(used)
        covered += len(used.keys() & closure)
        misses += [{"module": module, "distribution": d, "via": used[d]}
                   for d in sorted(used.keys() - closure)]
    # Closure sizes weigh precision: what each target lists, whether or not the import ran it.
    listed = {module: sorted(found.get(module) or ()) for module in imported}
    return {"truth_distributions": needed, "covered": covered, "misses": misses,
            "recall": covered / needed if needed else 1.0,
            "closure_distributions": sum(len(names) for names in listed.values()),
            "closures": listed}


def print_table(rows, dists, paths_run, closure_recall):
    imported = [m for m, row in rows.items() if row["plain"].get("ok")]
    print(f"corpus: {len(dists)} distributions, {len(rows)} top-level modules, "
          f"{len(imported)} import under plain python")
    print("| path | imported modules | differ |")
    print("|---|---|---|")
    print(f"| plain python | {len(imported)} | - |")
    for path in paths_run:
        ran = [m for m in imported if path in rows[m]["paths"]]
        differing = [m for m in ran if differs(rows[m]["plain"], rows[m]["paths"][path])]
        print(f"| {path} | {len(ran)} | {len(differing)} |")
    if closure_recall:
        r = closure_recall
        print(f"| closure recall (`lfm analyze --closure import`) | {len(imported)} | "
              f"{100 * r['recall']:.2f}% of {r['truth_distributions']} distributions loaded, "
              f"{len(r['misses'])} missed; closures list {r['closure_distributions']} |")
    for path in paths_run:
        for module in (m for m in imported if path in rows[m]["paths"]):
            why = differs(rows[module]["plain"], rows[module]["paths"][path])
            if why:
                print(f"  {path}: {module}: {why}")
    for miss in (closure_recall or {}).get("misses", []):
        print(f"  closure miss: {miss['module']} loads {miss['distribution']} "
              f"(first module {miss['via']})")
    for module in sorted(m for m in imported if "not_packed" in rows[m]):
        print(f"  not packed: {module} ({rows[module]['not_packed']})")
    for module in sorted(set(rows) - set(imported)):
        print(f"  not importable under plain python: {module} ({rows[module]['plain']['error']})")


def main():
    lfm, python = os.path.abspath(os.environ["LFM"]), os.path.abspath(os.environ["PY"])
    paths = [p for p in os.environ.get("PATHS", "call,serve,pack").split(",") if p]
    jobs = int(os.environ.get("JOBS", "2"))
    with tempfile.TemporaryDirectory(prefix="lfm-ecosystem-") as scratch:
        bench = Bench(lfm, python, scratch)
        index = run_json([python, bench.probe, "--index"])
        owners = index["owners"]
        bench.owners, bench.sizes = owners, index["sizes"]
        modules = top_level_modules(index)
        if os.environ.get("ONLY"):
            modules = {m: modules.get(m, "?") for m in os.environ["ONLY"].split(",")}
        if os.environ.get("REUSE"):
            with open(os.environ["REUSE"]) as earlier:
                rows = json.load(earlier)["rows"]
            # ONLY with REUSE: the recall of those modules alone, the quickest turn on it.
            rows = {m: row for m, row in rows.items() if m in modules}
        else:
            rows = measure(bench, sorted(modules), paths, jobs)
        closure_recall = None
        if os.environ.get("RECALL", "1") == "1":
            closure_recall = recall(bench, rows, owners, startup_dists(python, owners))
    paths_run = [p for p in ("lfm call", "serve, first call", "serve, warm call", "pack")
                 if any(p in row["paths"] for row in rows.values())]
    print_table(rows, index["tops"], paths_run, closure_recall)
    if os.environ.get("OUT"):
        with open(os.environ["OUT"], "w") as out:
            json.dump({"rows": rows, "recall": closure_recall}, out)


if __name__ == "__main__":
    main()
