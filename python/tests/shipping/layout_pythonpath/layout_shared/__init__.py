"""A lab's shared code of test_ship_layouts.py: on the submit side's PYTHONPATH, with a data
file and no distribution listing it (the pack carries it as loose files)."""

from pathlib import Path

BONUS = int((Path(__file__).parent / "bonus.txt").read_text())
