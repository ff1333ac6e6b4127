"""The PEP 517 backend of `pip install .`: maturin's, after a check that cargo is there.

Without cargo, maturin would download a Rust toolchain; a node without Rust should install the
built wheel instead (scripts/build_wheel.sh), and be told so at once.
"""

import os
import shutil

os.environ.setdefault("MATURIN_NO_INSTALL_RUST", "1")

import maturin  # noqa: E402
from maturin import (  # noqa: E402, F401
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
)


def _cargo():
    if shutil.which("cargo") is None:
        raise RuntimeError(
            "building lfm-toolkit from source needs cargo (Rust, https://rustup.rs) and found "
            "none on PATH; on a node without Rust, install the wheel that "
            "scripts/build_wheel.sh builds"
        )


def build_wheel(*args, **kwargs):
    _cargo()
    return maturin.build_wheel(*args, **kwargs)


def build_editable(*args, **kwargs):
    _cargo()
    return maturin.build_editable(*args, **kwargs)


def prepare_metadata_for_build_wheel(*args, **kwargs):
    _cargo()
    return maturin.prepare_metadata_for_build_wheel(*args, **kwargs)


def prepare_metadata_for_build_editable(*args, **kwargs):
    _cargo()
    return maturin.prepare_metadata_for_build_editable(*args, **kwargs)
