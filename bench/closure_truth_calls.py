#!/usr/bin/env python3
"""The closure truth oracle at function level: real test suites, called one test at a time.

Each project's sdist (pinned, from PyPI, cached under --cache) is unpacked and analysed as local
code. Every plain test function of its own suite (module level, `def test_*()` with no
parameters, so no fixtures) runs through `lfm call`, which executes the function's slice and
logs every module the call loads; the Report's `imports.not_in_closure` names what the
analyzer's closure of that function lacks. For the calls that succeed, prints per project:
tests, succeeded, calls with misses, recall (imported distributions and local modules the
closure lists), precision (closure distributions and local modules the call imported), and each
miss with its cause. A test that fails by its slice is run again with its whole module imported:
if it passes then, the slice lacked something, a miss too. `--json` prints the same as one JSON
object.
"""

import argparse
import ast
import collections
import concurrent.futures
import json
import os
import pathlib
import re
import subprocess
import sys
import tarfile
import tempfile

# name: (pinned sdist, directories of its own tests, where its package is), relative to the
# unpacked sdist.
PROJECTS = {
    "toolz": ("toolz==0.12.1", ["toolz/tests"], "."),
    "boltons": ("boltons==24.1.0", ["tests"], "."),
    "funcy": ("funcy==2.0", ["tests"], "."),
    "six": ("six==1.16.0", ["."], "."),
    # Half its plain tests import inside the function (`from dateutil import tz`).
    "python-dateutil": ("python-dateutil==2.9.0.post0", ["tests"], "src"),
}

# Tests that once failed by their slice (an analyzer miss the oracle found), in every sample.
REGRESSIONS = {
    "funcy": ["tests/test_colls.py:test_all", "tests/test_colls.py:test_any"],
}

# An import whose module name is computed at run time: the one miss the analyzer cannot see.
DYNAMIC = re.compile(r"import_module\(|__import__\(|importlib\.|pkgutil|entry_points")
# A test that reads its own module's names at run time (`sys.modules[__name__]`, `globals()`):
# what its slice lacks is a dynamic use too.
DYNAMIC_SELF = re.compile(r"sys\.modules\[__name__\]|globals\(\)|locals\(\)|vars\(\)")


class Unavailable(Exception):
    """An sdist could not be fetched (PyPI unreachable): the oracle cannot run."""


def sdist(python, pin, cache):
    """The unpacked sdist of `pin`, downloaded once with the environment's pip."""
    name, version = pin.split("==")
    found = sorted(cache.glob(f"{name}-{version}"))
    if found:
        return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([python, "-m", "pip", "download", "--quiet",
                           "--disable-pip-version-check", "--no-binary", ":all:", "--no-deps",
                           "--dest", str(cache), pin], capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        raise Unavailable(f"cannot download the sdist {pin} from PyPI: {last}")
    archive = next(cache.glob(f"{name}-{version}.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(cache, filter="data")
    return cache / f"{name}-{version}"


def plain_tests(root, test_dirs):
    """`file.py:test_name` of every module-level test function that takes no parameters."""
    found = []
    for test_dir in test_dirs:
        pattern = "test*.py" if test_dir == "." else "**/test*.py"
        for path in sorted((root / test_dir).glob(pattern)):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for node in tree.body:
                if (isinstance(node, ast.FunctionDef) and node.name.startswith("test")
                        and not any(vars(node.args).values())):
                    found.append(f"{path.relative_to(root)}:{node.name}")
    return found


def sample(names, count):
    """Every n-th name, so a sample spreads over the whole suite, the same each run."""
    if not count or count >= len(names):
        return names
    stride = len(names) / count
    return [names[int(i * stride)] for i in range(count)]


def call(lfm, python, root, source, target, whole=False):
    """Run one test through `lfm call` from the sdist `root`, its package under `source`, by
    its slice (or, `whole`, importing its module); (succeeded, the Report's imports, error)."""
    mode = ["--import-module"] if whole else []
    with tempfile.NamedTemporaryFile(suffix=".json") as report:
        done = subprocess.run(
            [lfm, "call", "--quiet", "--python", python, "--root", str(source), "--wall",
             "120s", "--report", report.name, *mode, target],
            cwd=root, capture_output=True, text=True, stdin=subprocess.DEVNULL,
            # As pytest run from the checkout finds the package: the runner puts only the test
            # module's own root on sys.path, not --root.
            env={**os.environ, "PYTHONPATH": str(source)})
        try:
            imports = json.loads(pathlib.Path(report.name).read_text()).get("imports") or {}
        except (OSError, json.JSONDecodeError):
            imports = {}
    error = done.stderr.strip().splitlines()[-1:] if done.returncode else []
    return done.returncode == 0, imports, "".join(error)[:200]


def closures(lfm, python, root, source, targets, batch=50):
    """Each target's closure by `lfm analyze`: its distributions and local modules."""
    out = {}
    for start in range(0, len(targets), batch):
        chunk = targets[start:start + batch]
        done = subprocess.run([lfm, "analyze", "--no-cache", "--format", "json", "--python",
                               python, "--root", str(source), *chunk],
                              cwd=root, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"lfm analyze failed: {done.stderr[-2000:]}")
        # Targets come back in the order given, named `module:qualname`.
        for asked, target in zip(chunk, json.loads(done.stdout)["targets"]):
            assert target["target"].endswith(":" + asked.partition(":")[2]), (asked, target)
            items = {d["name"].lower() for d in target["distributions"]}
            items |= {m["name"] for m in target["modules"] if m["kind"] == "local"}
            out[asked] = (items, target["module"])
    return out


def used(imports, root, own):
    """What a call imported, as the Report's comparison counts it: each distribution (by name)
    and each local module under the project, the test's own module `own` and its parents left
    out."""
    ancestry = {own.rsplit(".", depth)[0] for depth in range(own.count(".") + 1)}
    items = set()
    for module in imports.get("modules", []):
        if not module.get("found"):
            continue
        if module.get("distribution"):
            items.add(module["distribution"].split("==")[0].lower())
        elif module.get("file", "").startswith(str(root) + "/") and \
                "-packages/" not in module["file"] and module["name"] not in ancestry:
            items.add(module["name"])
    return items


def cause(root, source, target, module, imports, closure):
    """Why a module was missed: `dynamic` when it was loaded under a name computed at run time,
    by the test's own source or by a meta-path finder that loads a closure module's file under
    another name (toolz's `tlz`); otherwise `analyzer`."""
    file = next((m.get("file") or "" for m in imports.get("modules", [])
                 if m["name"] == module), "")
    base = source if file.startswith(str(source) + "/") else root
    if file.startswith(str(base) + "/") and file.endswith(".py"):
        path = pathlib.Path(file).relative_to(base).with_suffix("")
        dotted = ".".join(path.parts[:-1] if path.name == "__init__" else path.parts)
        if dotted != module and dotted in closure:
            return f"dynamic: a finder loaded {dotted} (in the closure) as {module}"
    if DYNAMIC.search(test_source(root, target)):
        return "dynamic: the test computes the module's name"
    return "analyzer"


def test_source(root, target):
    path, _, name = target.partition(":")
    source = (root / path).read_text(encoding="utf-8")
    return next((ast.get_source_segment(source, node) for node in ast.parse(source).body
                 if isinstance(node, ast.FunctionDef) and node.name == name), "") or ""


def slice_cause(root, target):
    """Why a test failed by its slice only: `dynamic` when it, or its module's top level, reads
    the module's names at run time."""
    source = (root / target.partition(":")[0]).read_text(encoding="utf-8")
    top = "\n".join(ast.get_source_segment(source, node) or "" for node in ast.parse(source).body
                    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))
    if DYNAMIC_SELF.search(test_source(root, target) + top):
        return "dynamic: the test reads its own module's names at run time"
    return "analyzer"


def measure_project(args, name, pool):
    pin, test_dirs, source = PROJECTS[name]
    root = sdist(args.python, pin, args.cache).resolve()
    source = root / source
    every = plain_tests(root, test_dirs)
    tests = sample(every, args.sample)
    tests += [t for t in REGRESSIONS.get(name, []) if t in every and t not in tests]
    runs = dict(zip(tests, pool.map(
        lambda t: call(args.lfm, args.python, root, source, t), tests)))
    passed = [t for t in tests if runs[t][0]]
    # A test that fails by its slice but passes with its whole module imported: the slice
    # (the analyzer's module-level statements for it) lacks something.
    failing = [t for t in tests if not runs[t][0]]
    whole = pool.map(lambda t: call(args.lfm, args.python, root, source, t, whole=True)[0],
                     failing)
    slice_failures = [t for t, ok in zip(failing, whole) if ok]
    static = closures(args.lfm, args.python, root, source, passed)
    needed = covered = listed = hit = 0
    misses, failed = [], []
    # What lowers precision: closure items the calls did not import, by how many calls.
    unused = collections.Counter()
    for test in tests:
        ok, imports, error = runs[test]
        if not ok:
            failed.append({"test": test, "error": error})
            continue
        closure, own = static.get(test, (set(), test))
        truth = used(imports, root, own)
        needed, covered = needed + len(truth), covered + len(truth & closure)
        listed, hit = listed + len(closure), hit + len(closure & truth)
        unused.update(closure - truth)
        for module in imports.get("not_in_closure", []):
            why = cause(root, source, test, module, imports, closure)
            misses.append({"test": test, "module": module, "cause": why})
    return {
        "sdist": pin,
        "tests": len(tests),
        "succeeded": len(passed),
        "calls_with_misses": len({miss["test"] for miss in misses}),
        "truth_items": needed,
        "recall": covered / needed if needed else 1.0,
        "precision": hit / listed if listed else 1.0,
        "misses": misses,
        "failed": failed,
        "slice_failures": [{**f, "cause": slice_cause(root, f["test"])} for f in failed
                           if f["test"] in slice_failures],
        "unused": unused.most_common(5),
    }


def print_table(report):
    for name, row in report.items():
        print(f"== {name} ({row['sdist']}): {row['tests']} plain tests, {row['succeeded']} "
              f"succeeded, {row['calls_with_misses']} with modules not in the closure, "
              f"recall {100 * row['recall']:.2f}% of {row['truth_items']}, "
              f"precision {100 * row['precision']:.2f}%")
        unused = ", ".join(f"{item} ({calls})" for item, calls in row["unused"])
        print(f"   in closures, not imported (calls): {unused or 'none'}")
        print(f"   {len(row['failed'])} failed, {len(row['slice_failures'])} of them only by "
              "their slice (they pass with the module imported: an analyzer miss)")
        for failed in row["slice_failures"]:
            print(f"   slice miss: {failed['test']}: {failed['error']} ({failed['cause']})")
        for miss in row["misses"]:
            print(f"   miss {miss['module']} in {miss['test']} ({miss['cause']})")
    sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="the environment's interpreter")
    parser.add_argument("--lfm", required=True)
    parser.add_argument("--cache", required=True, help="where the sdists are unpacked")
    parser.add_argument("--sample", type=int, default=0, help="tests per project (0: all)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("projects", nargs="*", help=f"of {', '.join(PROJECTS)} (default: all)")
    args = parser.parse_args()
    unknown = set(args.projects) - set(PROJECTS)
    if unknown:
        parser.error(f"unknown projects {sorted(unknown)}: the known ones are {list(PROJECTS)}")
    args.projects = args.projects or list(PROJECTS)
    args.python, args.lfm = os.path.abspath(args.python), os.path.abspath(args.lfm)
    args.cache = pathlib.Path(args.cache).resolve()
    try:
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            report = {}
            for name in args.projects:
                report[name] = measure_project(args, name, pool)
                if not args.json:
                    # Each project as it is done: the whole run takes minutes.
                    print_table({name: report[name]})
    except Unavailable as error:
        # Exit 3 tells the suite's sampled run to skip rather than fail.
        print(f"closure_truth_calls: {error}", file=sys.stderr)
        sys.exit(3)
    if args.json:
        json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
