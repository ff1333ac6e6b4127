"""Entry point lfm runs: `python lfm_runner_main.py call REQUEST.json` or `... zygote CONFIG.json`.

It sits beside the `lfm_runner` and `lfm_shared` packages; it imports them, then takes its own
directory off sys.path so that the user's code sees the path it would see without lfm.
"""

import os
import sys

# Checked before lfm_runner is imported, in syntax every Python parses: an older interpreter
# gets one clear line and this status, which lfm reports (docs/python.md). Newer ones than the
# tested 3.13 are let run.
OLDEST = (3, 8)
EXIT_UNSUPPORTED = 87
if tuple(sys.version_info[:2]) < OLDEST:
    sys.stderr.write(
        "lfm: Python %s is not supported: lfm runs functions on Python %d.%d and newer\n"
        % ((sys.version.split()[0],) + OLDEST)
    )
    sys.exit(EXIT_UNSUPPORTED)

_here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _here)
# lfm's own modules are compiled once and cached beside them even where the user's environment
# says not to write bytecode (PYTHONDONTWRITEBYTECODE): else every call compiles them again
# (~3 ms). The user's code still runs under the user's setting.
_dont_write_bytecode = sys.dont_write_bytecode
sys.dont_write_bytecode = False
import lfm_runner.main  # noqa: E402
import lfm_shared  # noqa: E402, F401  (its modules load through it once this dir is off sys.path)
from lfm_runner import call, headroom, imports, target  # noqa: E402, F401

sys.dont_write_bytecode = _dont_write_bytecode

del sys.path[0]
if sys.path and os.path.abspath(sys.path[0] or ".") == _here:
    del sys.path[0]

if __name__ == "__main__":
    sys.exit(lfm_runner.main.main(sys.argv[1:]))
