"""What lfm's analyzer asks an interpreter about itself: run as `python -c` (no file is
written), it prints one JSON object (analyzer/src/interpreter.rs reads it). Runs on every
Python 3 the analyzer may meet, so it uses nothing newer than 3.6 has.
"""
import sys
if sys.version_info[0] < 3:
    # Python 2 cannot import what follows: one clear line, as the runner gives older Pythons.
    sys.stderr.write("lfm: Python %s is not supported: lfm runs functions on Python 3.8 and newer\n"
                     % sys.version.split()[0])
    sys.exit(87)
import os, json, platform, site, sysconfig, importlib.machinery
paths = sysconfig.get_paths()
# In a venv, sysconfig's platstdlib is the venv's own lib/pythonX.Y (site-packages lives there);
# the real stdlib and lib-dynload belong to the base install. os.py marks the stdlib itself.
stdlib_dirs = [os.path.dirname(os.__file__),
               sysconfig.get_paths(vars={"platbase": sys.base_exec_prefix,
                                         "base": sys.base_prefix})["platstdlib"]]
names = getattr(sys, "stdlib_module_names", None)
if names is None:
    names = set(sys.builtin_module_names)
    for entry in os.listdir(stdlib_dirs[0]):
        base = entry.split(".")[0]
        if base.isidentifier() and base != "site-packages":
            names.add(base)


def editable_finder_dirs():
    """The directories setuptools' editable finders import packages from (their MAPPING):
    searched after sys.path, as the finders come after the path finder on sys.meta_path."""
    dirs = []
    for finder in sys.meta_path:
        module_name = getattr(finder, "__module__", None) or ""
        if not module_name.startswith("__editable___"):
            continue
        mapping = getattr(sys.modules.get(module_name), "MAPPING", None) or {}
        for name, path in sorted(mapping.items()):
            # `ns.pkg` at /src/ns/pkg is found from /src; a package mapped under another
            # directory name is not found by a path search at all.
            relative = os.sep + name.replace(".", os.sep)
            for suffix in (relative, relative + ".py"):
                if path.endswith(suffix):
                    dirs.append(path[:-len(suffix)])
    return [d for d in dict.fromkeys(dirs) if d not in sys.path]


print(json.dumps({
    "executable": sys.executable,
    "prefix": sys.prefix,
    "base_prefix": sys.base_prefix,
    "version": platform.python_version(),
    "path": [p for p in sys.path if p] + editable_finder_dirs(),
    "stdlib_dirs": [d for d in dict.fromkeys(stdlib_dirs) if os.path.isdir(d)],
    "stdlib_module_names": sorted(names),
    "builtin_module_names": sorted(sys.builtin_module_names),
    "extension_suffixes": importlib.machinery.EXTENSION_SUFFIXES,
    "soabi": sysconfig.get_config_var("SOABI") or "",
    "base_executable": os.path.realpath(getattr(sys, "_base_executable", sys.executable)),
    "shared_library": os.path.join(sysconfig.get_config_var("LIBDIR") or "", sysconfig.get_config_var("INSTSONAME") or "")
        if sysconfig.get_config_var("Py_ENABLE_SHARED") else "",
    "platform_tag": sysconfig.get_platform(),
    # On sys.path only once it exists: lfm's cache of this answer watches for it.
    "user_site": site.getusersitepackages() if site.ENABLE_USER_SITE else None,
    "markers": {
        "implementation_name": sys.implementation.name,
        "implementation_version": platform.python_version(),
        "os_name": os.name,
        "platform_machine": platform.machine(),
        "platform_python_implementation": platform.python_implementation(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_full_version": platform.python_version(),
        "python_version": ".".join(platform.python_version_tuple()[:2]),
        "sys_platform": sys.platform,
    },
}))
