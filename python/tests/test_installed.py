"""One rule for "is this module installed", the client's (lfm.warm, lfm.node) and the zygote's
(lfm_runner.zygote): the same answers on the same files (lfm_shared.installed)."""

import json
import os
import subprocess
import sys

import cloudpickle

HERE = os.path.dirname(os.path.abspath(__file__))


def a_script_in(directory):
    """A regular file of `directory` (an installed console script), not a link out of it."""
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if os.path.isfile(path) and not os.path.islink(path):
            return path
    raise AssertionError(f"no regular file in {directory}")


def test_client_and_zygote_agree_on_every_kind_of_file(tmp_path):
    extra = tmp_path / "extra" / "site-packages"  # a pack's, on PYTHONPATH
    extra.mkdir(parents=True)
    (extra / "packed.py").write_text("")
    mine = tmp_path / "project"
    mine.mkdir()
    (mine / "mine.py").write_text("")
    expected = {
        os.__file__: True,  # the standard library
        cloudpickle.__file__: True,  # an installed distribution
        a_script_in(os.path.join(sys.prefix, "bin")): True,  # an installed script
        str(extra / "packed.py"): True,
        str(mine / "mine.py"): False,  # the user's own
    }
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.environ["PYTHONPATH"], str(extra)]))
    done = subprocess.run([sys.executable, os.path.join(HERE, "installed_answers.py"), *expected],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    answers = json.loads(done.stdout)
    for path, installed in expected.items():
        sides = answers[path]
        assert sides == {"client": installed, "client_dir": installed, "zygote": installed}, path
