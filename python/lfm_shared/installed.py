"""Whether a file is the interpreter's own or an installed distribution's, the one rule of the
client and the zygote: the client tells the zygote such modules to import before it forks a
call (lfm.warm) and keeps such directories out of a serve's source roots (lfm.node); the zygote
imports only such modules ahead of calls (lfm_runner.zygote). A file of the user's own tree is
never installed: its top level is the user's code, which never runs in the zygote.
"""

import functools
import os
import site
import sys
import sysconfig

# The interpreter's standard library and where installers put distributions.
SYSCONFIG_KEYS = ("stdlib", "platstdlib", "purelib", "platlib")
# sys.path entries by these names hold distributions too (a pack's, which its `run` script
# puts on PYTHONPATH; one a site module does not report).
DISTRIBUTION_DIR_NAMES = ("site-packages", "dist-packages")


@functools.lru_cache(maxsize=1)
def installed_dirs():
    """The installed directories as real paths ending in a separator, found once per process
    (the zygote asks every few milliseconds while a call runs)."""
    paths = sysconfig.get_paths()
    dirs = {paths.get(key) for key in SYSCONFIG_KEYS}
    try:
        dirs.update(site.getsitepackages())
        dirs.add(site.getusersitepackages())
    except AttributeError:  # an old virtualenv's site module
        pass
    dirs.update(p for p in sys.path if os.path.basename(p) in DISTRIBUTION_DIR_NAMES)
    # Installed scripts: a console script's directory is first on its sys.path (a Parsl
    # worker's process_worker_pool.py), and it is not the user's source.
    dirs.update(os.path.join(prefix, "bin") for prefix in (sys.prefix, sys.base_prefix))
    return tuple(sorted(os.path.join(os.path.realpath(d), "") for d in dirs if d))


def is_installed(path, dirs=None):
    """Whether `path` (a module's file, or a directory) is, or lies in, an installed directory
    (`installed_dirs()` unless given)."""
    real = os.path.join(os.path.realpath(path), "")
    return real.startswith(dirs if dirs is not None else installed_dirs())
