"""Run as a script (test_installed.py): each side's answer to "is this installed?" for the
files named in argv, as JSON {file: {"client": bool, "client_dir": bool, "zygote": bool}}.

Its own interpreter, so that the sys.path the rule reads (PYTHONPATH) is the test's and no
earlier answer is remembered."""

import json
import os
import sys

from lfm import node, warm
from lfm_runner import zygote


def answers(path):
    return {
        # warm tells the zygote the module is installed; node keeps its directory out of a
        # serve's source roots; the zygote imports it ahead of calls.
        "client": warm._installed(path),
        "client_dir": not node._source_roots((os.path.dirname(path),), os.getcwd()),
        "zygote": zygote.learnable("a_fixture_module", path, zygote.installed_dirs()),
    }


if __name__ == "__main__":
    print(json.dumps({path: answers(path) for path in sys.argv[1:]}))
