#!/usr/bin/env python3
"""The closure truth oracle: what Python imports, against what lfm says a module needs.

For every source module of the named installed distributions (or a sample of them), import it
in a fresh interpreter of the environment and map the modules it brought into sys.modules to
the distributions whose RECORD lists their files, as the analyzer does. lfm's import closure of
the same module (`lfm analyze --closure import MODULE`) must list each of those distributions.
Prints, per distribution: modules, importable ones, recall (truth distributions covered),
precision (closure distributions the truth used) and the misses; `--json` prints the same as
one JSON object. Never imports anything in this interpreter: only the environment's does.
"""

import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile

# Run by the environment's interpreter: every module a fresh import of argv[1] adds, with the
# top-level names of argv[2] (comma-separated) made unimportable, as if not installed.
PROBE = r"""
import importlib, json, sys
hidden = set(filter(None, sys.argv[2].split(",")))
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in hidden:
            raise ModuleNotFoundError("No module named %r (hidden)" % name, name=name)
if hidden:
    sys.meta_path.insert(0, Hide())
before = set(sys.modules)
try:
    importlib.import_module(sys.argv[1])
except BaseException as error:
    print(json.dumps({"error": (type(error).__name__ + ": " + str(error))[:200]}))
    raise SystemExit(0)
added = {n: getattr(m, "__file__", None) for n, m in list(sys.modules.items()) if n not in before}
print(json.dumps({"files": added}))
"""

# Run by the environment's interpreter: each installed file's distribution (from RECORD), and
# the source modules of the distributions asked for.
INDEX = r"""
import importlib.metadata as md, json, os, re, sys
def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()
wanted = {norm(name) for name in sys.argv[1:]}
owners, modules, tops = {}, {}, {}
for dist in md.distributions():
    name = norm(dist.metadata["Name"] or "")
    for file in dist.files or []:
        owners[os.path.realpath(str(file.locate()))] = name
        parts = list(file.parts)
        top = parts[0].split(".")[0]
        if top.isidentifier() and (len(parts) > 1 or parts[0].endswith((".py", ".so"))):
            tops.setdefault(name, set()).add(top)
        if name not in wanted or not parts[-1].endswith(".py") or ".." in parts:
            continue
        parts[-1] = parts[-1][:-3]
        if parts[-1] == "__init__":
            parts.pop()
        if parts and all(part.isidentifier() for part in parts):
            modules.setdefault(name, set()).add(".".join(parts))
print(json.dumps({"owners": owners, "modules": {k: sorted(v) for k, v in modules.items()},
                  "tops": {k: sorted(v) for k, v in tops.items()}}))
"""


def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def run_json(command, **kwargs):
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def sample(names, count):
    """Every n-th name, so a sample spreads over the whole distribution, the same each run."""
    if not count or count >= len(names):
        return names
    stride = len(names) / count
    return [names[int(i * stride)] for i in range(count)]


def truth(python, module, owners, workdir, hidden=()):
    """Distributions a fresh `import module` uses (each with the first module of it that was
    imported), or the import's error; `hidden` top-level names are made unimportable."""
    try:
        found = run_json([python, "-c", PROBE, module, ",".join(hidden)], cwd=workdir,
                         timeout=120, stdin=subprocess.DEVNULL)
    except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as error:
        return None, str(error)[:200]
    if "error" in found:
        return None, found["error"]
    used = {}
    for name, file in found["files"].items():
        owner = file and owners.get(os.path.realpath(file))
        if owner:
            used.setdefault(owner, name)
    return used, None


def closures(lfm, python, modules, batch=100):
    """Each module's closure distributions by lfm (import closure), or why there is none."""
    out = {}
    for start in range(0, len(modules), batch):
        chunk = modules[start:start + batch]
        command = [lfm, "analyze", "--no-cache", "--format", "json", "--closure", "import",
                   "--python", python]
        try:
            spec = run_json(command + chunk)
        except RuntimeError:
            if len(chunk) == 1:
                out[chunk[0]] = None
                continue
            # One target lfm cannot read fails its batch: retry them one by one.
            out.update(closures(lfm, python, chunk, batch=1))
            continue
        for target in spec["targets"]:
            out[target["target"]] = {norm(d["name"]) for d in target["distributions"]}
    return out


def measure(args):
    index = run_json([args.python, "-c", INDEX, *args.distributions])
    owners, listed = index["owners"], index["modules"]
    report = {}
    with tempfile.TemporaryDirectory() as workdir, \
            concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for dist in args.distributions:
            modules = sample(listed.get(norm(dist), []), args.sample)
            truths = dict(zip(modules, pool.map(
                lambda m: truth(args.python, m, owners, workdir), modules)))
            importable = [m for m in modules if truths[m][0] is not None]
            found = closures(args.lfm, args.python, importable)
            row = compare(modules, truths, found)
            # A miss the module imports without is an optional import; one it fails without is
            # a distribution the pack would lack.
            hide = index["tops"]
            without = pool.map(lambda miss: truth(args.python, miss["module"], owners, workdir,
                                                  hide.get(miss["distribution"], [])),
                               row["misses"])
            for miss, (used, error) in zip(row["misses"], without):
                miss["optional"] = used is not None
                miss["without_it"] = error
            row["required_misses"] = sum(not miss["optional"] for miss in row["misses"])
            report[dist] = row
    return report


def compare(modules, truths, found):
    covered = needed = used_of_closure = closure_size = 0
    misses, unanalysed = [], []
    for module in modules:
        used, _ = truths[module]
        if used is None:
            continue
        closure = found.get(module)
        if closure is None:
            unanalysed.append(module)
            continue
        needed += len(used)
        covered += len(used.keys() & closure)
        closure_size += len(closure)
        used_of_closure += len(closure & used.keys())
        for dist in sorted(used.keys() - closure):
            misses.append({"module": module, "distribution": dist, "via": used[dist]})
    return {
        "modules": len(modules),
        "importable": sum(truths[m][0] is not None for m in modules),
        "not_importable": [{"module": m, "error": truths[m][1]} for m in modules
                           if truths[m][0] is None],
        "unanalysed": unanalysed,
        "truth_distributions": needed,
        "recall": covered / needed if needed else 1.0,
        "precision": used_of_closure / closure_size if closure_size else 1.0,
        "misses": misses,
    }


def print_table(report):
    for dist, row in report.items():
        print(f"== {dist}: {row['modules']} modules, {row['importable']} importable, "
              f"recall {100 * row['recall']:.2f}% of {row['truth_distributions']}, "
              f"precision {100 * row['precision']:.2f}%, {len(row['misses'])} misses "
              f"({row['required_misses']} required), "
              f"{len(row['unanalysed'])} not analysed by lfm")
        by_dist = {}
        for miss in row["misses"]:
            by_dist.setdefault(miss["distribution"], []).append(miss)
        for missed, where in sorted(by_dist.items(), key=lambda kv: -len(kv[1])):
            example = where[0]
            required = [miss for miss in where if not miss["optional"]]
            kind = f"{len(required)} fail without it" if required else "optional: all import without it"
            print(f"   miss {missed}: {len(where)} modules ({kind}), e.g. {example['module']} "
                  f"(imports {example['via']})")
        for module in row["unanalysed"][:5]:
            print(f"   lfm could not analyse {module}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="the environment's interpreter")
    parser.add_argument("--lfm", required=True)
    parser.add_argument("--sample", type=int, default=0, help="modules per distribution (0: all)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("distributions", nargs="+")
    args = parser.parse_args()
    # Probes run in a scratch directory (nothing there shadows what they import).
    args.python, args.lfm = os.path.abspath(args.python), os.path.abspath(args.lfm)
    report = measure(args)
    if args.json:
        json.dump(report, sys.stdout)
    else:
        print_table(report)


if __name__ == "__main__":
    main()
