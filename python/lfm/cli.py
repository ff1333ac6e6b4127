"""Thin wrappers over the lfm command line: `lfm analyze --format json` and `lfm pack`."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any, Dict, Iterable, Optional, Sequence, Union

from .binary import find_binary
from .errors import LfmError

Spec = Dict[str, Any]
Targets = Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]]


def _targets(target: Targets) -> list:
    if isinstance(target, (str, os.PathLike)):
        return [os.fspath(target)]
    targets = [os.fspath(t) for t in target]
    if not targets:
        raise ValueError("target: give at least one (FILE.py, FILE.py:func, pkg.mod:func, DIR)")
    return targets


def _run(argv: list, cwd: Optional[str]) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise LfmError(
            f"{' '.join(argv[:2])} exited with {done.returncode}: {done.stderr.strip()}"
        )
    return done.stdout


def analyze(
    target: Targets,
    python: Optional[str] = None,
    *,
    env: Optional[str] = None,
    roots: Iterable[str] = (),
    cwd: Optional[str] = None,
) -> Spec:
    """The Spec (docs/spec.md) of one target or several: the modules and installed
    distributions each needs, and why. `python` (an interpreter) or `env` (a venv or conda
    prefix) says whose distributions count; default: python3 on PATH."""
    argv = [find_binary(), "analyze", "--format", "json"]
    if python is not None:
        argv += ["--python", python]
    if env is not None:
        argv += ["--env", env]
    for root in roots:
        argv += ["--root", os.fspath(root)]
    return json.loads(_run(argv + _targets(target), cwd))


def pack(
    target: Optional[Targets] = None,
    *,
    env: str,
    output: Optional[str] = None,
    all: bool = False,
    roots: Iterable[str] = (),
    self_contained: bool = False,
    cwd: Optional[str] = None,
    closure: Optional[str] = None,
    parts: Optional[str] = None,
) -> str:
    """Pack what `target` needs from the environment `env` (a venv or conda prefix) into a
    deterministic tar.zst, or with `all=True` the whole environment; returns its path. Without
    `output` the pack is named by its content hash, lfm-<hash>.tar.zst, in `cwd`. `closure`:
    "import" (the default) or "slice" for function targets (`lfm pack --closure`). `parts`: a
    directory to write the pack into as parts (`lfm pack --parts`); the path returned is then
    its parts manifest."""
    argv = [find_binary(), "pack", "--quiet", "--env", os.fspath(env)]
    if parts is not None:
        argv += ["--parts", os.fspath(parts)]
    if closure is not None:
        argv += ["--closure", closure]
    if output is not None:
        argv += ["--output", os.fspath(output)]
    if all:
        argv.append("--all")
    if self_contained:
        argv.append("--self-contained")
    for root in roots:
        argv += ["--root", os.fspath(root)]
    if target is not None:
        argv += _targets(target)
    elif not all:
        raise ValueError("target: give what to pack, or all=True for the whole environment")
    path = _run(argv, cwd).strip().splitlines()[-1]
    return path if os.path.isabs(path) else os.path.join(cwd or os.getcwd(), path)
