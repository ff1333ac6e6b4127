"""Entry point lfm runs: `python lfm_runner_main.py call REQUEST.json` or `... zygote CONFIG.json`.

It sits beside the `lfm_runner` package; it imports it, then takes its own directory off
sys.path so that the user's code sees the path it would see without lfm.
"""

import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _here)
import lfm_runner.main  # noqa: E402

del sys.path[0]
if sys.path and os.path.abspath(sys.path[0] or ".") == _here:
    del sys.path[0]

if __name__ == "__main__":
    sys.exit(lfm_runner.main.main(sys.argv[1:]))
