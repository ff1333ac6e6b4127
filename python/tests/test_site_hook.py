"""The site hook (lfm_site_hook) in a real Python installation: a copy of the interpreter that
runs these tests (its binary, libpython and standard library; its own empty site-packages with
two small distributions), hooked with `lfm usage --install-hook`, never the machine's own.
Processes of the installation and of a venv made from it (without --system-site-packages) are
logged whether they exit, raise or are killed, 50 at once without a torn line; a module with an
unusual loader imports exactly as without the hook; a missing, full or unwritable log directory
changes nothing for the program."""

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VERSION = "python%d.%d" % sys.version_info[:2]
# Left out of the copy: big, and no process here needs them.
SKIPPED = {"site-packages", "test", "idlelib", "tkinter", "lib2to3", "ensurepip"}


def lfm_binary():
    path = os.environ.get("LFM_BIN") or os.path.join(ROOT, "target", "debug", "lfm")
    assert os.path.exists(path), f"no lfm binary at {path}: build it or set LFM_BIN"
    return path


def copy_installation(base, prefix):
    """bin/pythonX.Y, lib/libpython*, lib/pythonX.Y: a relocatable installation under
    `prefix` (Python finds its prefix from where its binary is)."""
    os.makedirs(os.path.join(prefix, "bin"))
    binary = os.path.join(base, "bin", VERSION)
    shutil.copy2(binary, os.path.join(prefix, "bin", VERSION))
    os.symlink(VERSION, os.path.join(prefix, "bin", "python3"))
    lib = os.path.join(base, "lib")
    stdlib = os.path.join(lib, VERSION)
    target = os.path.join(prefix, "lib", VERSION)
    os.makedirs(target)
    for entry in os.listdir(lib):
        if entry.startswith("libpython"):
            source, copy = os.path.join(lib, entry), os.path.join(prefix, "lib", entry)
            shutil.copy2(source, copy, follow_symlinks=False)
    for entry in os.listdir(stdlib):
        if entry in SKIPPED or entry.startswith("config-"):
            continue
        source = os.path.join(stdlib, entry)
        if os.path.isdir(source):
            shutil.copytree(source, os.path.join(target, entry), symlinks=True)
        else:
            shutil.copy2(source, os.path.join(target, entry))
    packages = os.path.join(target, "site-packages")
    os.makedirs(packages)
    return packages


def add_distribution(packages, distribution, version, module, body="VALUE = 42\n"):
    """A module and its dist-info whose name differs from the module's (top_level.txt)."""
    with open(os.path.join(packages, module + ".py"), "w") as f:
        f.write(body)
    info = os.path.join(packages, f"{distribution}-{version}.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n")
    with open(os.path.join(info, "top_level.txt"), "w") as f:
        f.write(module + "\n")


@pytest.fixture(scope="module")
def installation(tmp_path_factory):
    prefix = str(tmp_path_factory.mktemp("installation"))
    packages = copy_installation(sys.base_prefix, prefix)
    add_distribution(packages, "Tiny_Dist", "1.2", "tiny_mod")
    add_distribution(packages, "never_used", "0.1", "never_used_mod")
    python = os.path.join(prefix, "bin", "python3")
    venv = os.path.join(prefix + "-venv")
    subprocess.run([python, "-m", "venv", "--without-pip", venv], check=True)
    venv_packages = os.path.join(venv, "lib", VERSION, "site-packages")
    add_distribution(venv_packages, "venv_only", "3.0", "venv_mod")
    return {"prefix": prefix, "python": python, "venv_python": os.path.join(venv, "bin", "python")}


def both(installation):
    """Each interpreter and the installed module it sees (a venv without
    --system-site-packages does not see the installation's site-packages)."""
    return [(installation["python"], "tiny_mod"), (installation["venv_python"], "venv_mod")]


@pytest.fixture
def log_dir(installation, tmp_path):
    """The installation hooked, logging into a fresh directory; unhooked afterwards."""
    directory = tmp_path / "logs"
    directory.mkdir()
    hook(installation, directory)
    yield directory
    unhook(installation)


def hook(installation, directory):
    run_lfm("--install-hook", installation["prefix"], "--site", str(directory))


def unhook(installation):
    run_lfm("--remove-hook", installation["prefix"])


def run_lfm(*args):
    done = subprocess.run([lfm_binary(), "usage", *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "SLURM", "PBS"))}
    env.update(extra)
    return env


def run(python, code, **env):
    return subprocess.run(
        [python, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=clean_env(**env)
    )


def log_lines(directory):
    lines = []
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), encoding="utf-8") as f:
            lines += [line.rstrip("\n").split("\t") for line in f]
    return lines


def modules_by_process(directory):
    """process key -> {module: (kind, distribution, version)}, every line checked whole."""
    processes = {}
    for fields in log_lines(directory):
        assert fields[0] == "lfm-site/1" and len(fields) == 13, fields
        processes.setdefault(fields[7], {})[fields[9]] = tuple(fields[10:13])
    return processes


def summary(directory):
    return json.loads(run_lfm("--site", str(directory), "--format", "json"))


def test_processes_of_the_installation_and_its_venv_are_logged(installation, log_dir):
    for python, module in both(installation):
        done = run(python, f"import json, {module}; print({module}.VALUE)", SLURM_JOB_ID="77")
        assert (done.returncode, done.stdout, done.stderr) == (0, "42\n", "")
    done = run(installation["python"], "import tiny_mod")
    assert done.returncode == 0, done.stderr
    processes = list(modules_by_process(log_dir).values())
    assert len(processes) == 3
    assert processes[0]["tiny_mod"] == ("site", "Tiny_Dist", "1.2")
    assert processes[1]["venv_mod"] == ("site", "venv_only", "3.0")
    for modules in processes[:2]:
        assert modules["json"] == ("stdlib", "", "")
        assert modules[""] == ("process", "", "")
    usage = summary(log_dir)
    tiny = next(d for d in usage["distributions"] if d["name"] == "Tiny_Dist")
    assert (tiny["processes"], tiny["batch_share"], tiny["versions"]) == (2, 0.5, ["1.2"])
    unused = next(u for u in usage["never_imported"] if u["installation"] == installation["prefix"])
    assert unused["distributions"] == ["never_used"]


def test_a_process_that_raises_keeps_its_imports(installation, log_dir):
    for python, module in both(installation):
        done = run(python, f"import {module}\nraise ValueError('boom')")
        assert done.returncode == 1 and "ValueError: boom" in done.stderr
    first, second = modules_by_process(log_dir).values()
    assert "tiny_mod" in first and "venv_mod" in second


def test_a_process_killed_with_sigkill_keeps_what_it_imported(installation, log_dir):
    for python, module in both(installation):
        code = f"import {module}, json, time\nprint('ready', flush=True)\ntime.sleep(60)"
        child = subprocess.Popen(
            [python, "-c", code], stdout=subprocess.PIPE, text=True, env=clean_env()
        )
        assert child.stdout.readline() == "ready\n"
        child.send_signal(signal.SIGKILL)
        assert child.wait() == -signal.SIGKILL
        child.stdout.close()
    first, second = modules_by_process(log_dir).values()
    assert {"tiny_mod", "json"} <= set(first)
    assert {"venv_mod", "json"} <= set(second)


def test_fifty_processes_at_once_write_whole_lines(installation, log_dir):
    children = []
    for n in range(50):
        python, module = both(installation)[n % 2]
        code = f"import {module}, json, decimal, email.message, sqlite3"
        children.append(subprocess.Popen([python, "-c", code], env=clean_env()))
    assert [child.wait() for child in children] == [0] * 50
    processes = modules_by_process(log_dir)
    assert len(processes) == 50
    for modules in processes.values():
        assert "sqlite3" in modules and ("tiny_mod" in modules or "venv_mod" in modules)
    usage = summary(log_dir)
    assert (usage["processes"], usage["bad_line_count"]) == (50, 0)


UNUSUAL_LOADERS = """
import sys, importlib.abc, importlib.util, zipfile, os, tempfile
class Loader(importlib.abc.Loader):
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        module.made_by = type(self).__name__
class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "made_up":
            return importlib.util.spec_from_loader(name, Loader())
sys.meta_path.append(Finder())
archive = os.path.join(tempfile.mkdtemp(), "zipped.zip")
with zipfile.ZipFile(archive, "w") as z:
    z.writestr("zipped_mod.py", "WHERE = __loader__.__class__.__name__")
sys.path.insert(0, archive)
import made_up, zipped_mod
print(made_up.made_by, type(made_up.__loader__).__name__, made_up.__spec__.loader is made_up.__loader__)
print(zipped_mod.WHERE, type(zipped_mod.__spec__.loader).__name__, zipped_mod.__spec__.origin.endswith("zipped_mod.py"))
print(sorted(k for k in vars(made_up) if k not in ("__builtins__",)))
print("hooked" if any(type(f).__name__ == "SiteUsage" for f in sys.meta_path) else "not hooked")
"""


def test_modules_with_unusual_loaders_import_as_without_the_hook(installation, log_dir):
    hooked = run(installation["python"], UNUSUAL_LOADERS)
    assert hooked.returncode == 0, hooked.stderr
    # -S: no site, no sitecustomize, no hook; the same installation otherwise.
    plain = subprocess.run(
        [installation["python"], "-S", "-c", UNUSUAL_LOADERS],
        capture_output=True,
        text=True,
        env=clean_env(),
    )
    assert plain.returncode == 0, plain.stderr
    assert hooked.stdout.replace("\nhooked\n", "\nnot hooked\n") == plain.stdout
    assert hooked.stdout.endswith("\nhooked\n")
    assert hooked.stdout.startswith("Loader Loader True\nzipimporter zipimporter True\n")


PROGRAM = "import json, {0}, sys\nprint(json.dumps({0}.VALUE)); sys.exit(5)"


@pytest.mark.parametrize("trouble", ["missing", "full", "not a directory", "unwritable"])
def test_a_log_directory_in_trouble_changes_nothing_for_the_program(
    installation, tmp_path, trouble
):
    directory = tmp_path / "logs"
    if trouble == "unwritable" and os.getuid() == 0:
        # Root writes any directory that permissions guard; sysfs refuses new files even to it.
        directory = Path("/sys/kernel")
    hook(installation, directory)
    try:
        if trouble == "full":
            directory.mkdir()
            name = f"{os.uname().nodename}.{os.getuid()}.log"
            os.symlink("/dev/full", directory / name)
        elif trouble == "not a directory":
            directory.write_text("a file where the directory should be")
        elif trouble == "unwritable" and os.getuid() != 0:
            directory.mkdir(mode=0o500)
        for python, module in both(installation):
            done = run(python, PROGRAM.format(module))
            assert (done.returncode, done.stdout, done.stderr) == (5, "42\n", "")
    finally:
        unhook(installation)


def test_removing_the_hook_leaves_the_installation_as_it_was(installation, tmp_path):
    stdlib = os.path.join(installation["prefix"], "lib", VERSION)
    before = sorted(os.listdir(stdlib))
    hook(installation, tmp_path)
    assert "sitecustomize.py" in os.listdir(stdlib)
    unhook(installation)
    assert sorted(os.listdir(stdlib)) == before
    done = run(installation["python"], "import sys; print('sitecustomize' in sys.modules)")
    assert done.stdout == "False\n"


def test_a_venv_s_own_sitecustomize_still_runs(installation, log_dir):
    venv = os.path.dirname(os.path.dirname(installation["venv_python"]))
    own = os.path.join(venv, "lib", VERSION, "site-packages", "sitecustomize.py")
    with open(own, "w") as f:
        f.write("import builtins\nbuiltins.VENV_CUSTOMIZED = True\n")
    try:
        done = run(installation["venv_python"], "import venv_mod; print(VENV_CUSTOMIZED)")
    finally:
        os.remove(own)
    assert (done.returncode, done.stdout) == (0, "True\n"), done.stderr
    (modules,) = modules_by_process(log_dir).values()
    assert "venv_mod" in modules


def test_failed_imports_are_not_logged_and_a_forked_child_is_a_process_of_its_own(
    installation, log_dir
):
    code = """
    import os
    try:
        import not_installed_anywhere
    except ImportError:
        pass
    import json
    pid = os.fork()
    if pid == 0:
        import tiny_mod, decimal
        os._exit(0)
    os.waitpid(pid, 0)
    """
    done = run(installation["python"], code)
    assert done.returncode == 0, done.stderr
    parent, child = modules_by_process(log_dir).values()
    assert "json" in parent and "not_installed_anywhere" not in parent
    assert "tiny_mod" not in parent
    assert {"tiny_mod", "decimal"} <= set(child)
