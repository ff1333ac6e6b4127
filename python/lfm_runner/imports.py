"""The import log: every module a call loads or imports, written as it happens.

A finder placed first on `sys.meta_path` asks the others for each module Python loads (modules
already in `sys.modules` never reach a finder), writes `name<TAB>origin` to a file with one
unbuffered write per line, so a call killed by a limit or a segfault keeps every line written
before it died, and returns the spec it was given, untouched. `!` as origin: no finder found
the module (an ImportError followed).

It only observes: no loader, spec or module is wrapped or changed, so a module sees the
`__loader__`, `__spec__` and class it has under plain python, and a module that swaps its class
(torch's config modules refuse unknown attributes) or replaces its own `sys.modules` entry
loads as it does there (python/tests/test_imports.py, tests/imports_invisible.rs).

Modules loaded before the call (by the interpreter, the runner, or a zygote's preload) never
reach a finder, yet the call may well need them (`import json` inside a function): an
`__import__` wrapper logs the first import statement that names each of them, as
`name<TAB>origin<TAB>loaded` (the call used it; it did not load it). A Python-level
`__import__` makes every import statement slower (~8% of the CPU of importing pandas and
scikit-learn, ~11,000 statements), so while an import statement of the call loads an installed
or stdlib module, the interpreter's own `__import__` is put back: the finder sees such a module
being found for that statement, and the wrapper takes itself back when the statement returns.
What such a module's top level imports is its distribution's business (what it loads is logged
by the finder anyway); import statements of the user's code, and of any code called at run
time, are logged.
"""

import builtins
import os
import sys

# Frames of the import system itself, between an import statement and a finder.
_BOOTSTRAP = "<frozen importlib._bootstrap"


class ImportLog:
    def __init__(self, fd, earlier):
        self.fd = fd
        # Loaded before the call (never changed: see loaded_before), and those of them logged.
        self.earlier = earlier
        self.logged = set()
        self.original_import = builtins.__import__
        # Import statements running through the wrapper, nested; the one whose return puts the
        # wrapper back (0: the wrapper is in place, or left for good).
        self.statements = 0
        self.quiet_until = 0
        # Names only asked for (importlib.util.find_spec), in order.
        self.asked = []
        prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
        self.installed = tuple(os.path.join(p, "") for p in prefixes if p)

    def find_spec(self, name, path=None, target=None):
        if not _importing():
            # `importlib.util.find_spec(name)` asks whether a module is there without loading
            # it (torch asks so for dill, transformers for dozens): not an import, so logged
            # only if it was loaded by the call's end (the LazyLoader recipe loads from such a
            # spec); a serve would otherwise learn, that is import, every module so asked.
            self.asked.append(name)
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                # A legacy finder (find_module only, before Python 3.12): importlib asks it in
                # its turn once this one steps aside; asking the finders after it would not.
                return None
            spec = find(name, path, target)
            if spec is not None:
                self.write(name, spec.origin or "")
                if self.pending() and not self.user_code(spec.origin):
                    self.quieten()
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
        self.statements += 1
        statement = self.statements
        try:
            return self.original_import(name, globals, locals, fromlist, level)
        finally:
            self.statements -= 1
            if self.quiet_until == statement:
                self.quiet_until = 0
                if self.pending():
                    builtins.__import__ = self.import_

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
        spec = stored_attribute(sys.modules.get(name), "__spec__")
        self.write(name, getattr(spec, "origin", None) or "", loaded=True)

    def user_code(self, origin):
        if not origin or not origin.startswith(os.sep):
            return False  # built-in, frozen
        installed = "site-packages" in origin or "dist-packages" in origin
        return not installed and not origin.startswith(self.installed)

    def quieten(self):
        """An installed module is found for the innermost import statement running through the
        wrapper: the interpreter's own `__import__` runs until that statement returns (the
        wrapper puts itself back then). A module found for anything else (`importlib.
        import_module` called by the user's code, a runner's load) keeps the wrapper: nothing
        would put it back when that import ends."""
        if self.quiet_until or builtins.__import__ != self.import_:
            return
        frame = sys._getframe(2)  # the import system's frame that asked this finder
        while frame is not None and frame.f_code.co_filename.startswith(_BOOTSTRAP):
            frame = frame.f_back
        if frame is not None and frame.f_code is _IMPORT_CODE:
            self.quiet_until = self.statements
            builtins.__import__ = self.original_import

    def stop(self):
        for name in dict.fromkeys(self.asked):
            module = sys.modules.get(name)
            if module is not None and name not in self.earlier:
                spec = stored_attribute(module, "__spec__")
                self.write(name, getattr(spec, "origin", None) or "")
        self.asked = []
        self.earlier = frozenset()
        self.logged = set()
        if builtins.__import__ == self.import_:
            builtins.__import__ = self.original_import
        if self in sys.meta_path:
            sys.meta_path.remove(self)


_IMPORT_CODE = ImportLog.import_.__code__


def _importing():
    """Whether the finder was asked by an import that loads what it finds (the import system's
    `_find_and_load`), not by a question such as `importlib.util.find_spec`."""
    frame = sys._getframe(2)  # the import system's frame that asked the finder
    while frame is not None and frame.f_code.co_filename.startswith(_BOOTSTRAP):
        if frame.f_code.co_name == "_find_and_load_unlocked":
            return True
        frame = frame.f_back
    return False


def stored_attribute(module, name):
    """`module.name` as the module stores it, None if it has none, without running the module's
    own attribute hooks: a module loaded lazily (importlib.util.LazyLoader) runs its whole top
    level on any other read, which `from package import lazy_submodule` never does."""
    try:
        return object.__getattribute__(module, name)
    except AttributeError:
        return None


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
