"""How much of a tree's function closures a memo could share.

Reads an `lfm analyze --format json` Spec (a file, or - for stdin) and prints, for the function
targets: how many there are, how many distinct closures they have once the first step of each
reason's chain (the function's own name) is left out, per module, and how many distinct module
lists. A walk whose closure equals another function's of the same module (modulo that first
step) is work a per-name memo could reuse; the rest must be walked whatever is memoised.

    lfm analyze --no-cache --format json --python PY SITE > spec.json
    python3 bench/closure_sharing.py spec.json
"""

import json
import sys


def main(path):
    source = sys.stdin if path == "-" else open(path, encoding="utf-8")
    with source:
        spec = json.load(source)
    functions = [t for t in spec["targets"] if t["kind"] in ("function", "class")]
    closures, module_lists = set(), set()
    for target in functions:
        entries = tuple(
            (m["name"], m["reason"]["line"], tuple(m["reason"]["chain"][1:]))
            for m in target.get("modules", [])
        )
        closures.add((target["module"], entries))
        module_lists.add((target["module"], tuple(m["name"] for m in target.get("modules", []))))
    total = len(functions)
    print(f"function and class targets: {total}")
    if total:
        print(
            f"distinct closures per module, first chain step left out: {len(closures)}"
            f" ({100 * len(closures) / total:.1f}%)"
        )
        print(
            f"distinct module lists per module: {len(module_lists)}"
            f" ({100 * len(module_lists) / total:.1f}%)"
        )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: closure_sharing.py SPEC.json|-")
    main(sys.argv[1])
