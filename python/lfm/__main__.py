"""`python -m lfm ARGS...` runs the lfm binary this client finds (docs/python.md)."""

import os
import sys

from .binary import find_binary
from .errors import BinaryNotFound


def main() -> None:
    try:
        binary = find_binary()
    except BinaryNotFound as error:
        sys.exit(f"lfm: {error}")
    os.execv(binary, [binary, *sys.argv[1:]])


if __name__ == "__main__":
    main()
