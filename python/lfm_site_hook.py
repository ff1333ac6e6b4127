"""Site-wide import usage: which installed modules every Python process of an installation uses.

`lfm usage --install-hook PREFIX --site DIR` copies this file into the installation's standard
library directory and calls `install(DIR)` from its `sitecustomize`, which `site` imports at the
start of every process of that installation and of every venv made from it (a venv's sys.path
keeps the base installation's standard library, whatever its site-packages; docs/usage.md).

Observing, never changing: a finder first on `sys.meta_path` only notes the top-level names asked
for and returns None, so the import system goes on exactly as without it (no loader wrapped, no
spec returned). A noted name is written once the module is in `sys.modules` (its spec then says
where it came from): at the next import of anything, which the module's own body usually does,
and at exit. A process killed with SIGKILL keeps every line written until then.

One line per top-level module per process, tab-separated, each line whole on its own (context
repeated) and shorter than PIPE_BUF, written with one O_APPEND write: concurrent processes never
tear each other's lines. Only standard-library and installed (site-packages) modules are logged,
with their distribution and version; the user's own modules, arguments, paths of user files
and environment values never are. Any error (no directory, no permission, a full disk) turns
the hook off for the rest of the process: the program never sees it.
"""

import os
import sys
import time

FORMAT = "lfm-site/1"
# A log file larger than this is renamed aside on the next process start (rotation by size).
ROTATE_BYTES = 64 * 1024 * 1024
# Lines longer than this are dropped: O_APPEND writes up to PIPE_BUF (4096 on Linux) are never
# interleaved with another writer's.
MAX_LINE = 4000
# Imports after which a noted name not yet in sys.modules is taken for a failed import.
MISSES = 3
BATCH_VARIABLES = (
    ("slurm", "SLURM_JOB_ID"),
    ("pbs", "PBS_JOBID"),
    ("lsf", "LSB_JOBID"),
)


class SiteUsage:
    """The meta-path finder that notes names, and the log they are written to."""

    def __init__(self, fd):
        self.fd = fd
        self.pending = []
        self.seen = set()
        self.prefix = context_prefix()
        self.stdlib = stdlib_dirs()
        self.distributions = {}
        # Set while writing: reading a distribution's metadata must not note or flush again.
        self.busy = False

    def find_spec(self, name, path=None, target=None):
        if self.pending and not self.busy:
            self.flush()
        if path is None and name not in self.seen:
            self.seen.add(name)
            self.pending.append((name, 0))
        return None

    def flush(self, at_exit=False):
        """Write every noted name whose module is loaded. One not in sys.modules is still being
        found (an extension's init may import) or failed to import (an optional dependency
        probed): it is kept for a few imports more, then dropped."""
        self.busy = True
        waiting = []
        try:
            for name, misses in self.pending:
                module = sys.modules.get(name)
                if module is None:
                    if not at_exit and misses < MISSES:
                        waiting.append((name, misses + 1))
                    continue
                self.write(name, getattr(module, "__spec__", None))
        finally:
            self.pending = waiting if self.fd >= 0 else []
            self.busy = False

    def renew(self):
        """A forked child is a process of its own (multiprocessing's workers)."""
        self.prefix = context_prefix()

    def write_process(self):
        """The process itself, so that counts per Python version and batch share include the
        processes that import nothing logged."""
        self.write_line("", "process", "", "")

    def write(self, name, spec):
        where = self.classify(name, spec)
        if where is None:
            return
        self.write_line(name, *where)

    def write_line(self, name, kind, distribution, version):
        fields = (f"{time.time():.3f}", name, kind, distribution, version)
        line = self.prefix + "\t".join(clean(f) for f in fields) + "\n"
        data = line.encode("utf-8", "replace")
        if len(data) > MAX_LINE:
            return
        try:
            os.write(self.fd, data)
        except OSError:
            self.stop()

    def classify(self, name, spec):
        """(kind, distribution, version), or None for the user's own modules."""
        origin = getattr(spec, "origin", None)
        if origin in ("built-in", "frozen"):
            return ("stdlib", "", "")
        if not origin or not isinstance(origin, str):
            locations = getattr(spec, "submodule_search_locations", None) or []
            origin = next(iter(locations), None)
            if not origin:
                return None
            origin = os.path.join(origin, "__init__.py")
        folder = os.path.dirname(origin)
        if os.path.basename(origin).startswith("__init__."):
            folder = os.path.dirname(folder)
        if os.path.basename(folder) in ("site-packages", "dist-packages"):
            return ("site", *self.distribution(folder, name))
        if folder in self.stdlib:
            return ("stdlib", "", "")
        return None

    def distribution(self, folder, name):
        known = self.distributions.get(folder)
        if known is None:
            known = self.distributions[folder] = Distributions(folder)
        return known.of(name)

    def stop(self):
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        try:
            os.close(self.fd)
        except OSError:
            pass
        self.fd = -1
        self.pending = []


class Distributions:
    """Top-level module -> (distribution, version) of one site-packages directory: from the
    `*.dist-info` names (numpy-2.4.6.dist-info names numpy); for a module whose name matches
    none (dateutil of python_dateutil), from the distributions' top_level.txt, else by finding
    the module in their RECORD (one substring search per file: parsing every line of pandas'
    RECORD would cost more than the rest of the hook). Distributions whose own name is not a
    module there are searched first: they are the likely owners."""

    def __init__(self, folder):
        self.folder = folder
        self.by_name = {}
        self.without_top_level = None
        try:
            entries = os.listdir(folder)
        except OSError:
            entries = []
        self.infos = []
        modules = {normal(entry.split(".", 1)[0]) for entry in entries}
        for entry in entries:
            if entry.endswith((".dist-info", ".egg-info")):
                distribution, _, version = entry.rsplit(".", 1)[0].partition("-")
                version = version.split("-")[0]
                owns_its_name = normal(distribution) in modules
                self.infos.append((owns_its_name, entry, distribution, version))
                self.by_name.setdefault(normal(distribution), (distribution, version))
        self.infos.sort()

    def of(self, name):
        key = normal(name)
        found = self.by_name.get(key)
        if found is None:
            if self.without_top_level is None:
                self.read_top_levels()
            found = self.by_name.get(key) or self.search_records(name)
            self.by_name[key] = found
        return found

    def read_top_levels(self):
        self.without_top_level = []
        for _, entry, distribution, version in self.infos:
            path = os.path.join(self.folder, entry, "top_level.txt")
            try:
                with open(path, encoding="utf-8") as lines:
                    for line in lines:
                        if line.strip():
                            self.by_name.setdefault(normal(line.strip()), (distribution, version))
            except OSError:
                self.without_top_level.append((entry, distribution, version))

    def search_records(self, name):
        wanted = ("\n" + name + "/", "\n" + name + ".py,", "\n" + name + ".cpython-",
                  "\n" + name + ".abi3.", "\n" + name + ".so,")
        for entry, distribution, version in self.without_top_level:
            try:
                with open(os.path.join(self.folder, entry, "RECORD"), encoding="utf-8") as f:
                    text = "\n" + f.read()
            except (OSError, ValueError):
                continue
            if any(w in text for w in wanted):
                return (distribution, version)
        return ("", "")


def normal(name):
    return name.lower().replace("-", "_").replace(".", "_")


def clean(field):
    return str(field).replace("\t", " ").replace("\n", " ")


def context_prefix():
    return "".join(clean(field) + "\t" for field in context_fields())


def context_fields():
    """Who and where, the same on every line of a process: the format, uid, host, Python
    version, the installation (its base prefix, the admin's path), venv or not, the batch
    system's job id ('' interactive), and a key telling this process from any other."""
    system, job = batch_job()
    version = "%d.%d.%d" % sys.version_info[:3]
    venv = "1" if sys.prefix != sys.base_prefix else "0"
    host = os.uname().nodename
    process = f"{host}:{os.getpid()}:{time.time_ns() // 1000:x}"
    job_id = f"{system}:{job}" if job else ""
    return (FORMAT, str(os.getuid()), host, version, sys.base_prefix, venv, job_id, process)


def batch_job():
    for system, variable in BATCH_VARIABLES:
        value = os.environ.get(variable)
        if value:
            return system, value
    ad = os.environ.get("_CONDOR_JOB_AD")
    if ad:
        return "condor", condor_job_id(ad)
    return "", ""


def condor_job_id(ad_file):
    """`ClusterId.ProcId` from HTCondor's job ad (the id it prints), else 'job'."""
    found = {}
    try:
        with open(ad_file, encoding="utf-8", errors="replace") as ad:
            for line in ad:
                key, _, value = line.partition("=")
                key = key.strip()
                if key in ("ClusterId", "ProcId"):
                    found[key] = value.strip()
                    if len(found) == 2:
                        break
    except OSError:
        pass
    if "ClusterId" in found:
        return f"{found['ClusterId']}.{found.get('ProcId', '0')}"
    return "job"


def stdlib_dirs():
    """The standard library's directories (not site-packages) of the base installation."""
    version = "python%d.%d" % sys.version_info[:2]
    dirs = set()
    for prefix in {sys.base_prefix, sys.base_exec_prefix}:
        lib = os.path.join(prefix, "lib", version)
        dirs.add(lib)
        dirs.add(os.path.join(lib, "lib-dynload"))
    return dirs


def open_log(directory):
    """An O_APPEND descriptor on this host's and user's log file in `directory`, renaming a
    file grown past ROTATE_BYTES aside first; -1 when it cannot be opened."""
    name = f"{os.uname().nodename}.{os.getuid()}"
    path = os.path.join(directory, name + ".log")
    try:
        if os.stat(path).st_size > ROTATE_BYTES:
            # Another process may rotate at the same time: either rename wins, lines stay whole.
            os.rename(path, os.path.join(directory, f"{name}.{time.time_ns()}.log"))
    except OSError:
        pass
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(path, flags, 0o600)
    except OSError:
        return -1


def install(directory):
    """Start logging this process's imports into `directory`; does nothing on any error."""
    try:
        if any(isinstance(f, SiteUsage) for f in sys.meta_path):
            return
        fd = open_log(directory)
        if fd < 0:
            return
        import atexit

        usage = SiteUsage(fd)
        # What the interpreter and `site` loaded before the hook says nothing of the program:
        # every process loads it.
        usage.seen.update(sys.modules)
        usage.write_process()
        if usage.fd < 0:
            return
        sys.meta_path.insert(0, usage)
        atexit.register(at_exit, usage)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=usage.renew)
    except Exception:
        pass


def at_exit(usage):
    try:
        if usage.fd >= 0:
            usage.flush(at_exit=True)
    except Exception:
        pass


def chain_sitecustomize(hook_dir):
    """Run the `sitecustomize` this installation's would have hidden (a venv's own, on a later
    sys.path entry), as `site` would have without the hook."""
    try:
        later = [p for p in sys.path if os.path.abspath(p or ".") != hook_dir]
        if not any(os.path.exists(os.path.join(p, "sitecustomize.py")) for p in later):
            return
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec("sitecustomize", later)
        if spec is None or spec.loader is None:
            return
        import importlib.util

        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)
    except Exception as error:
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
              f"{type(error).__name__}: {error}", file=sys.stderr)
