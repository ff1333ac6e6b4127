"""Where the lfm binary is, and whether it is this client's version (docs/python.md).

In order: `LFM_BIN`; the binary installed beside this package (the wheel puts it in the
environment's scripts directory: a venv's `bin/`, `bin/` above a `pip install --target`
directory, or the user scheme's); last an `lfm` on PATH, but only when it says it is lfm of
this client's version: another program of that name (PyPI's "Last File Manager" installs one)
or another version is never taken. Parsl and Dask workers may
lack the venv's `bin/` on PATH: the path is resolved here, in the worker's process.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import sysconfig
import warnings
from typing import Iterator, Optional

from .errors import BinaryNotFound

_checked: set = set()


@functools.lru_cache(maxsize=1)
def version() -> str:
    """This client's version: the wheel's, or the source tree's (looked up once: every call
    finds the binary, and reading the installed metadata costs ~0.4 ms)."""
    try:
        from importlib.metadata import PackageNotFoundError, version as installed
    except ImportError:  # pragma: no cover - Python 3.7
        return "0+unknown"
    for name in ("lfm-toolkit",):
        try:
            return installed(name)
        except PackageNotFoundError:
            continue
    return "0+unknown"


def candidates() -> Iterator[str]:
    """Where an installed lfm binary may be, most specific first."""
    package_dir = os.path.dirname(os.path.abspath(__file__))
    seen = set()
    places = [
        sysconfig.get_path("scripts"),
        sysconfig.get_path("scripts", vars={"base": sys.base_prefix}),
        # `pip install --target DIR`: the package is DIR/lfm, scripts go to DIR/bin.
        os.path.join(os.path.dirname(package_dir), "bin"),
        # site-packages under PREFIX/lib/pythonX.Y/: PREFIX/bin.
        os.path.join(package_dir, *[os.pardir] * 4, "bin"),
        _user_scripts(),
    ]
    for place in places:
        if not place:
            continue
        path = os.path.normpath(os.path.join(place, "lfm"))
        if path not in seen:
            seen.add(path)
            yield path


def _user_scripts() -> Optional[str]:
    scheme = "posix_user" if os.name == "posix" else "nt_user"
    try:
        return sysconfig.get_path("scripts", scheme)
    except KeyError:  # pragma: no cover - a platform without a user scheme
        return None


def find_binary() -> str:
    """The absolute path of the lfm binary (LFM_BIN wins)."""
    explicit = os.environ.get("LFM_BIN")
    if explicit:
        if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
            path = os.path.abspath(explicit)
            _warn_if_another_version(path)
            return path
        raise BinaryNotFound(f"LFM_BIN={explicit} is not an executable file")
    looked = []
    for path in candidates():
        looked.append(path)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    on_path = shutil.which("lfm")
    if on_path and _says_version(on_path) == f"lfm {version()}":
        return os.path.abspath(on_path)
    raise BinaryNotFound(
        "no lfm binary beside this client: install the lfm-toolkit wheel, or set LFM_BIN to "
        f"the binary's path (looked at {', '.join(looked)}, for {sys.executable}"
        + (f"; {on_path} on PATH is not lfm {version()}" if on_path else "")
        + ")"
    )


def _says_version(path: str) -> str:
    """What `path --version` prints (its first line), or "" when it does not run."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = out.stdout.strip().splitlines()
    return lines[0].strip() if lines else ""


def _warn_if_another_version(path: str) -> None:
    """Say once per binary when LFM_BIN names a binary of another version than this client."""
    mine = version()
    if path in _checked or mine == "0+unknown":
        return
    _checked.add(path)
    said = _says_version(path)
    theirs = said.split()[-1] if said else "?"
    if theirs != mine:
        warnings.warn(
            f"LFM_BIN={path} is lfm {theirs}, this client is {mine}: calls may fail on "
            "protocol differences",
            stacklevel=3,
        )
