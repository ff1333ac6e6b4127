"""bench/parsl_suite.sh's summary: per executor, the outcome of each of Parsl's tests (from
pytest's JUnit XML) and the run's wall time; then the wall ratio and the tests that pass with
HTEX and not with lfm."""

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def outcomes(path, times=None):
    found = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        classname = case.get("classname") or ""
        # From the venv's path: keep what follows parsl.tests.
        classname = classname.split("parsl.tests.", 1)[-1]
        name = f"{classname}::{case.get('name')}"
        if times is not None:
            times[name] = float(case.get("time") or 0)
        kinds = {child.tag for child in case}
        if kinds & {"failure", "error"}:
            found[name] = "failed"
        elif "skipped" in kinds:
            found[name] = "skipped"
        else:
            found[name] = "passed"
    return found


def main(work):
    work = Path(work)
    results, walls, times = {}, {}, {}
    for executor in ("htex", "lfm"):
        xml = work / f"{executor}.xml"
        if not xml.exists():
            print(f"{executor}: no results (see its log)")
            print((work / f"{executor}.log").read_text()[-3000:])
            return 1
        times[executor] = {}
        results[executor] = outcomes(xml, times[executor])
        start, end = map(float, (work / f"{executor}.wall").read_text().split())
        walls[executor] = end - start
    print(f"{'executor':10} {'passed':>7} {'failed':>7} {'skipped':>8} {'wall':>9}")
    for executor, found in results.items():
        counts = {k: sum(1 for v in found.values() if v == k) for k in ("passed", "failed", "skipped")}
        print(f"{executor:10} {counts['passed']:7} {counts['failed']:7} {counts['skipped']:8}"
              f" {walls[executor]:8.1f}s")
    print(f"wall ratio lfm/htex: {walls['lfm'] / walls['htex']:.2f}x")
    spent = {executor: sum(found.values()) for executor, found in times.items()}
    print(f"time in the tests themselves (pytest's): htex {spent['htex']:.1f} s, "
          f"lfm {spent['lfm']:.1f} s; the rest of the wall is pytest's and Parsl's start and end")
    slower = sorted(times["lfm"], key=lambda n: times["htex"].get(n, 0) - times["lfm"][n])
    print("the tests lfm is slowest on against htex (pytest's seconds, htex -> lfm):")
    for name in slower[:8]:
        print(f"  {times['htex'].get(name, 0):6.2f} -> {times['lfm'][name]:6.2f}  {name}")
    extra = sum(max(0.0, times["lfm"][n] - times["htex"].get(n, 0)) for n in slower[:8])
    print(f"  those 8 account for {extra:.1f} s of lfm's extra")
    htex, lfm = results["htex"], results["lfm"]
    worse = sorted(n for n, v in htex.items() if v == "passed" and lfm.get(n) != "passed")
    print(f"passed with htex, not with lfm: {len(worse)}")
    for name in worse:
        print(f"  {name} ({lfm.get(name, 'not run')})")
    both = sorted(n for n, v in htex.items() if v == "failed" and lfm.get(n) == "failed")
    if both:
        print("failed with both:")
        for name in both:
            print(f"  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
