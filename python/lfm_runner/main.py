"""Command line of the runner (lfm is its only caller)."""

import sys


def main(argv):
    if len(argv) == 2 and argv[0] == "call":
        from . import call

        return call.main(argv[1])
    if len(argv) == 2 and argv[0] == "zygote":
        from . import zygote

        return zygote.main(argv[1])
    if len(argv) == 2 and argv[0] == "show-slice":
        from . import plainjson, target

        with open(argv[1], encoding="utf-8") as handle:
            spec = plainjson.loads(handle.read())
        with open(spec["file"], encoding="utf-8") as handle:
            source = handle.read()
        print("\n".join(target.slice_source_lines(source, spec["statements"])))
        return 0
    sys.stderr.write("usage: lfm_runner_main.py call REQUEST.json | zygote CONFIG.json\n")
    return 2
