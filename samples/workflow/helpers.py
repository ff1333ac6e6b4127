"""Local helper module: importing it runs this file, so its imports are needed too."""
import pathlib


def fetch_rows(path):
    return [float(line) for line in pathlib.Path(path).read_text().split()]
