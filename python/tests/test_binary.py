"""Where the client finds the lfm binary (python/lfm/binary.py)."""

import os
import stat
import sys
import sysconfig
import warnings

import pytest

from lfm import binary
from lfm.errors import BinaryNotFound


def fake_lfm(directory, says):
    """An executable `lfm` in `directory` whose --version prints `says`."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "lfm")
    with open(path, "w") as script:
        script.write(f"#!/bin/sh\necho '{says}'\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
    return path


@pytest.fixture
def nowhere(monkeypatch, tmp_path):
    """No LFM_BIN, no installed binary, an empty PATH."""
    monkeypatch.delenv("LFM_BIN", raising=False)
    monkeypatch.setattr(binary, "candidates", lambda: iter([str(tmp_path / "none" / "lfm")]))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(binary, "version", lambda: "0.1.0")
    return tmp_path


def test_lfm_bin_wins_and_another_version_is_said_once(nowhere, monkeypatch):
    path = fake_lfm(nowhere / "elsewhere", "lfm 9.9.9")
    monkeypatch.setenv("LFM_BIN", path)
    binary._checked.clear()
    with pytest.warns(UserWarning, match="lfm 9.9.9, this client is 0.1.0"):
        assert binary.find_binary() == path
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert binary.find_binary() == path


def test_the_binary_installed_beside_the_package_is_found_without_path(nowhere, monkeypatch):
    installed = fake_lfm(nowhere / "venv" / "bin", "lfm 0.1.0")
    monkeypatch.setattr(binary, "candidates", lambda: iter([installed]))
    assert binary.find_binary() == installed


def test_an_lfm_on_path_that_is_another_program_is_never_taken(nowhere, monkeypatch):
    fake_lfm(nowhere / "empty", "Last File Manager 3.1")
    with pytest.raises(BinaryNotFound, match="is not lfm 0.1.0"):
        binary.find_binary()
    fake_lfm(nowhere / "empty", "lfm 0.0.9")
    with pytest.raises(BinaryNotFound):
        binary.find_binary()
    on_path = fake_lfm(nowhere / "empty", "lfm 0.1.0")
    assert binary.find_binary() == on_path


def test_candidates_cover_venvs_pip_target_and_the_user_scheme():
    places = list(binary.candidates())
    package_dir = os.path.dirname(os.path.abspath(binary.__file__))
    assert os.path.join(sysconfig.get_path("scripts"), "lfm") in places
    assert os.path.normpath(os.path.join(package_dir, os.pardir, "bin", "lfm")) in places
    user = sysconfig.get_path("scripts", "posix_user")
    assert os.path.normpath(os.path.join(user, "lfm")) in places
    assert all(os.path.isabs(place) for place in places), places
    assert sys.executable
