"""The import log: every module a call loads or imports, written as it happens.

A finder placed first on `sys.meta_path` asks the others for each module Python loads (modules
already in `sys.modules` never reach a finder) and writes `name<TAB>origin` to a file with one
unbuffered write per line, so a call killed by a limit or a segfault keeps every line written
before it died. `!` as origin: no finder found the module (an ImportError followed).

Modules loaded before the call (by the interpreter, the runner, or a zygote's preload) never
reach a finder, yet the call may well need them (`import json` inside a function): an
`__import__` wrapper logs the first import statement that names each of them. Once every one is
logged, the wrapper steps aside (the interpreter's own import is fast only without a wrapper).
"""

import builtins
import os
import sys


class ImportLog:
    def __init__(self, fd, earlier):
        self.fd = fd
        # Loaded before the call and not logged yet.
        self.earlier = earlier
        self.original_import = builtins.__import__

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

    def import_(self, name, globals=None, locals=None, fromlist=(), level=0):
        earlier = self.earlier
        importer = globals.get("__name__") if globals else None
        runner = isinstance(importer, str) and importer.startswith("lfm_runner")
        if level == 0 and earlier and not runner:
            # `import a.b` binds `a`, `from a import b` may name a submodule: log each.
            if name in earlier:
                self.touched(name)
            if fromlist:
                for item in fromlist:
                    if f"{name}.{item}" in earlier:
                        self.touched(f"{name}.{item}")
            if not earlier:
                builtins.__import__ = self.original_import
        return self.original_import(name, globals, locals, fromlist, level)

    def touched(self, name):
        parent = name.rpartition(".")[0]
        if parent in self.earlier:
            self.touched(parent)
        self.earlier.discard(name)
        spec = getattr(sys.modules.get(name), "__spec__", None)
        self.write(name, getattr(spec, "origin", None) or "")

    def stop(self):
        if builtins.__import__ == self.import_:
            builtins.__import__ = self.original_import
        if self in sys.meta_path:
            sys.meta_path.remove(self)


def start(path):
    """Log every later import to `path` (appended to, created 0600)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    log = ImportLog(fd, set(sys.modules))
    sys.meta_path.insert(0, log)
    builtins.__import__ = log.import_
    return log
