"""The import log: every module a call loads or imports, written as it happens.

A finder placed first on `sys.meta_path` asks the others for each module Python loads (modules
already in `sys.modules` never reach a finder) and writes `name<TAB>origin` to a file with one
unbuffered write per line, so a call killed by a limit or a segfault keeps every line written
before it died. `!` as origin: no finder found the module (an ImportError followed).

Modules loaded before the call (by the interpreter, the runner, or a zygote's preload) never
reach a finder, yet the call may well need them (`import json` inside a function): an
`__import__` wrapper logs the first import statement that names each of them, as
`name<TAB>origin<TAB>loaded` (the call used it; it did not load it). A Python-level
`__import__` makes every import statement slower (~8% of the CPU of importing pandas and
scikit-learn, ~11,000 statements), so while the top level of an installed or stdlib module
runs (those are what such imports consist of) the interpreter's own `__import__` is put back:
import statements of the user's code, and of any code called at run time, are logged.
"""

import builtins
import os
import sys


class ImportLog:
    def __init__(self, fd, earlier):
        self.fd = fd
        # Loaded before the call (never changed: see loaded_before), and those of them logged.
        self.earlier = earlier
        self.logged = set()
        self.original_import = builtins.__import__
        # Nesting of installed modules' top levels running with the original __import__.
        self.depth = 0
        prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
        self.installed = tuple(os.path.join(p, "") for p in prefixes if p)

    def find_spec(self, name, path=None, target=None):
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                self.write(name, spec.origin or "")
                if self.pending() and not self.user_code(spec.origin):
                    self.quieten(spec)
                return spec
        self.write(name, "!")
        return None

    def write(self, name, origin, loaded=False):
        line = f"{name}\t{origin}\tloaded\n" if loaded else f"{name}\t{origin}\n"
        try:
            os.write(self.fd, line.encode("utf-8", "surrogateescape"))
        except OSError:
            pass

    def import_(self, name, globals=None, locals=None, fromlist=(), level=0):
        importer = globals.get("__name__") if globals else None
        runner = isinstance(importer, str) and importer.startswith("lfm_runner")
        if level == 0 and self.pending() and not runner:
            # `import a.b` binds `a`, `from a import b` may name a submodule: log each.
            if self.unlogged(name):
                self.touched(name)
            if fromlist:
                for item in fromlist:
                    if self.unlogged(f"{name}.{item}"):
                        self.touched(f"{name}.{item}")
            if not self.pending():
                builtins.__import__ = self.original_import
        return self.original_import(name, globals, locals, fromlist, level)

    def pending(self):
        """Some module loaded before the call is not logged yet."""
        return len(self.logged) < len(self.earlier)

    def unlogged(self, name):
        return name in self.earlier and name not in self.logged

    def touched(self, name):
        parent = name.rpartition(".")[0]
        if self.unlogged(parent):
            self.touched(parent)
        self.logged.add(name)
        spec = getattr(sys.modules.get(name), "__spec__", None)
        self.write(name, getattr(spec, "origin", None) or "", loaded=True)

    def user_code(self, origin):
        if not origin or not origin.startswith(os.sep):
            return False  # built-in, frozen
        installed = "site-packages" in origin or "dist-packages" in origin
        return not installed and not origin.startswith(self.installed)

    def quieten(self, spec):
        """Load the module of `spec` through a QuietLoader (legacy loaders without exec_module
        are left alone: importlib tells them apart by that method)."""
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = QuietLoader(spec.loader, self)

    def run_quietly(self, function, argument):
        """Run an installed module's top level with the interpreter's own __import__."""
        self.depth += 1
        if self.depth == 1 and builtins.__import__ == self.import_:
            builtins.__import__ = self.original_import
        try:
            return function(argument)
        finally:
            self.depth -= 1
            if self.depth == 0 and self.pending() and builtins.__import__ is self.original_import:
                builtins.__import__ = self.import_

    def stop(self):
        self.earlier = frozenset()
        self.logged = set()
        if builtins.__import__ == self.import_:
            builtins.__import__ = self.original_import
        if self in sys.meta_path:
            sys.meta_path.remove(self)


class QuietLoader:
    """Stands in for an installed module's loader while the module loads (then the module's
    `__loader__` and `__spec__.loader` are the real one again)."""

    def __init__(self, loader, log):
        self.loader = loader
        self.log = log

    def create_module(self, spec):
        create = getattr(self.loader, "create_module", None)
        return None if create is None else self.log.run_quietly(create, spec)

    def exec_module(self, module):
        try:
            self.log.run_quietly(self.loader.exec_module, module)
        finally:
            if getattr(module, "__loader__", None) is self:
                module.__loader__ = self.loader
            spec = getattr(module, "__spec__", None)
            if spec is not None and spec.loader is self:
                spec.loader = self.loader

    def __getattr__(self, name):
        if name == "loader":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.loader, name)


_snapshot = (None, frozenset())


def loaded_before():
    """The names of the modules loaded now, kept between calls while `sys.modules` looks the
    same (its size and last name). A zygote takes it before it forks: a forked child that
    copied the names itself would write to the page of each (reference counts), and each
    write is a copy-on-write fault (~0.3 ms for 135 modules)."""
    global _snapshot
    modules = sys.modules
    key = (len(modules), next(reversed(modules), None))
    if _snapshot[0] != key:
        _snapshot = (key, frozenset(modules))
    return _snapshot[1]


def open_log(path):
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)


def start(path, fd=None):
    """Log every later import to `path` (appended to, created 0600), or to `fd` when the
    caller opened it already."""
    if fd is None:
        fd = open_log(path)
    log = ImportLog(fd, loaded_before())
    sys.meta_path.insert(0, log)
    builtins.__import__ = log.import_
    return log
