"""A job of test_ship_layouts.py: its code and data file come from an editable install, the
distribution it imports from a directory a `.pth` line names; a bare node has neither."""

from pathlib import Path

import layout_outside

OFFSET = int((Path(__file__).parent / "offset.txt").read_text())


def compute(x):
    """The value, and where the node found each module (the pack, not the submit side)."""
    return (layout_outside.scaled(x) + OFFSET, layout_outside.described(),
            layout_outside.__file__, __file__)
