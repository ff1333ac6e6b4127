"""Start the node's lfm serve before the first task needs it (`python -m lfm.prestart`).

An engine's worker finds or starts its node's serve when its first task runs, and that task
waits for the serve and for its zygote's preloads (parsl: ~0.7 s here). Started when the
engine launches its worker pool instead, the serve gets ready while the pool starts.

The serve a worker uses is the one whose key (docs/python.md: interpreter, source roots,
preloads, backend, ...) the worker computes; this process computes the same key as `--script`
(found on PATH) would (a worker pool is a script: its directory heads `sys.path`,
where `python -m` puts the working directory). It connects, so the serve starts, and exits:
the serve then waits its idle timeout (LFM_IDLE_TIMEOUT) for the workers' connections.

    python -m lfm.prestart --script process_worker_pool.py [--preload a,b]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import List, Optional

from .node import ServeKey, open_serve


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lfm.prestart", description=__doc__.split("\n")[0])
    parser.add_argument("--script", required=True,
                        help="the script the workers run from (a path, or a name on PATH)")
    parser.add_argument("--preload", default="", help="comma-separated modules, as the workers ask")
    args = parser.parse_args(argv)
    script = shutil.which(args.script)
    if script is None:
        parser.error(f"--script: {args.script} is not an executable file here nor on PATH")
    sys.path[0] = os.path.dirname(os.path.realpath(script))
    preload = tuple(name for name in args.preload.split(",") if name)
    key = ServeKey.here(preload=preload)
    connection, path = open_serve(key)
    connection.close()
    print(f"lfm serve listening at {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
