"""A job of test_ship_layouts.py: its code and data file come from an editable install, the
distribution it imports from a directory a `.pth` line names, the shared code from PYTHONPATH;
a bare node has none of them."""

from pathlib import Path

import layout_outside
import layout_shared

OFFSET = int((Path(__file__).parent / "offset.txt").read_text())


def compute(x):
    """The value, and where the node found each module (the pack, not the submit side)."""
    return (layout_outside.scaled(x) + OFFSET + layout_shared.BONUS, layout_outside.described(),
            layout_outside.__file__, __file__, layout_shared.__file__)
