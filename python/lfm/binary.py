"""Where the lfm binary is: LFM_BIN, else the environment's scripts directory, else PATH."""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig

from .errors import BinaryNotFound


def find_binary() -> str:
    """The absolute path of the lfm binary. Workers of Parsl and Dask may lack the venv's
    bin/ on PATH, so the interpreter's own scripts directory is looked at before PATH."""
    explicit = os.environ.get("LFM_BIN")
    if explicit:
        if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
            return os.path.abspath(explicit)
        raise BinaryNotFound(f"LFM_BIN={explicit} is not an executable file")
    scripts = sysconfig.get_path("scripts")
    if scripts:
        candidate = os.path.join(scripts, "lfm")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("lfm")
    if found:
        return os.path.abspath(found)
    raise BinaryNotFound(
        "no lfm binary: set LFM_BIN to its path or put it on PATH "
        f"(looked in {scripts or '(no scripts dir)'} and PATH, for {sys.executable})"
    )
