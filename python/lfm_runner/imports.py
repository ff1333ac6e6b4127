"""The import log: every module a call loads, written as it happens.

A finder placed first on `sys.meta_path` asks the others for each module Python loads (modules
already in `sys.modules` never reach a finder) and writes `name<TAB>origin` to a file with one
unbuffered write per line, so a call killed by a limit or a segfault keeps every line written
before it died. `!` as origin: no finder found the module (an ImportError followed).
"""

import os
import sys


class ImportLog:
    def __init__(self, fd):
        self.fd = fd

    def find_spec(self, name, path=None, target=None):
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                self.write(name, spec.origin or "")
                return spec
        self.write(name, "!")
        return None

    def write(self, name, origin):
        try:
            os.write(self.fd, f"{name}\t{origin}\n".encode("utf-8", "surrogateescape"))
        except OSError:
            pass


def start(path):
    """Log every later import to `path` (appended to, created 0600)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    log = ImportLog(fd)
    sys.meta_path.insert(0, log)
    return log
