"""Probe of bench/ecosystem.sh (issue 53): what importing one top-level module looks like from
the inside, the same function under plain python and under every lfm path.

`observe(name)` imports `name` and returns what a user's code could tell apart: whether it
imported (else the exception's type), the module's class, its loader's class, its file's name,
whether `sys.modules` holds the module the import returned, and its public names (a hash and a
count, so a module missing an optional part shows). `loaded` adds the files of every module the
import brought into `sys.modules` (the truth the closure recall is measured against).

Run by the environment's interpreter: `python ecosystem_probe.py NAME` prints observe(NAME) and
the loaded files as one JSON object; `python ecosystem_probe.py --index` prints each installed
file's distribution, each distribution's top-level modules and its installed bytes.
"""

import hashlib
import importlib
import json
import importlib.machinery
import importlib.metadata
import os
import re
import sys

# Directories beside packages that are no modules: wheels' bundled libraries, data, metadata.
NOT_MODULES = (".libs", ".data", ".dist-info", ".egg-info")


def kind(value):
    cls = type(value)
    return f"{cls.__module__}.{cls.__qualname__}"


def public_names(module):
    try:
        names = sorted(name for name in dir(module) if not name.startswith("_"))
    except Exception as error:  # a module's own __dir__ may fail; that is part of its face
        return {"dir_error": kind(error)}
    digest = hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]
    return {"names": len(names), "names_sha": digest}


def face(name, module):
    spec = object.__getattribute__(module, "__dict__").get("__spec__")
    origin = getattr(spec, "origin", None)
    return {
        "class": kind(module),
        "loader": kind(getattr(spec, "loader", None)),
        "origin": os.path.basename(origin) if origin else None,
        "same_in_sys_modules": sys.modules.get(name) is module,
        **public_names(module),
    }


def observe(name):
    try:
        module = importlib.import_module(name)
    except BaseException as error:  # SystemExit and KeyboardInterrupt at import are faces too
        missing = getattr(error, "name", None) if isinstance(error, ImportError) else None
        return {"ok": False, "error": kind(error) + (f": {missing}" if missing else "")}
    return {"ok": True, **face(name, module)}


def loaded_files(before):
    files = {}
    for name, module in list(sys.modules.items()):
        if name not in before:
            file = getattr(module, "__file__", None)
            if isinstance(file, str):
                files[name] = file
    return files


def top_level(parts):
    """The top-level module a RECORD path belongs to, or None: a package directory (regular or
    namespace), or a module file at the root (source or extension)."""
    first = parts[0]
    if len(parts) > 1:
        importable = first.isidentifier() and not first.endswith(NOT_MODULES)
        return first if importable and parts[-1].endswith(".py") else None
    for suffix in (".py", *importlib.machinery.EXTENSION_SUFFIXES):
        if first.endswith(suffix) and first[: -len(suffix)].isidentifier():
            return first[: -len(suffix)]
    return None


def index():
    owners, tops, sizes = {}, {}, {}
    for dist in importlib.metadata.distributions():
        name = re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower()
        for file in dist.files or []:
            owners[os.path.realpath(str(file.locate()))] = name
            sizes[name] = sizes.get(name, 0) + (file.size or 0)
            top = top_level(file.parts)
            if top and top != "__pycache__":
                tops.setdefault(name, set()).add(top)
    return {"owners": owners, "sizes": sizes,
            "tops": {k: sorted(v) for k, v in tops.items()}}


def main():
    if sys.argv[1] == "--index":
        print(json.dumps(index()))
        return
    name = sys.argv[1]
    before = set(sys.modules)
    seen = observe(name)
    print(json.dumps({"face": seen, "files": loaded_files(before)}))
    sys.stdout.flush()
    # Some packages start threads at import that never end; the process's verdict is printed.
    os._exit(0)


if __name__ == "__main__":
    main()
