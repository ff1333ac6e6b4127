"""Compiled slices kept between calls (lfm_runner.compiled, through target.compile_slice)."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from lfm_runner import compiled, target

MODULE = textwrap.dedent(
    """\
    SCALE = 3
    UNUSED = 1


    def train(n):
        return n * SCALE
    """
)
STATEMENTS = [[1, 1], [5, 6]]


@pytest.fixture
def module_file(tmp_path):
    path = tmp_path / "kept_mod.py"
    path.write_text(MODULE)
    yield path
    sys.modules.pop("kept_mod", None)


def spec(path, cache_file, statements=STATEMENTS):
    return {
        "mode": "slice",
        "module": "kept_mod",
        "root": str(path.parent),
        "file": str(path),
        "qualname": "train",
        "statements": statements,
        "compiled": str(cache_file),
    }


def compiles(monkeypatch):
    """Record each compile from source (what a kept slice saves)."""
    calls = []
    original = target.compile_source

    def counted(*args):
        calls.append(args[0])
        return original(*args)

    monkeypatch.setattr(target, "compile_source", counted)
    return calls


def test_a_kept_slice_is_reused_while_its_source_is_unchanged(module_file, tmp_path, monkeypatch):
    cache_file = tmp_path / "slice.bin"
    calls = compiles(monkeypatch)
    assert target.load(spec(module_file, cache_file))(2) == 6
    assert cache_file.exists() and len(calls) == 1
    assert target.load(spec(module_file, cache_file))(2) == 6
    assert len(calls) == 1, "the second call used the kept code"
    assert not hasattr(sys.modules["kept_mod"], "UNUSED"), "still only the slice runs"


def test_an_edited_source_is_compiled_again_even_with_the_same_size(module_file, tmp_path, monkeypatch):
    cache_file = tmp_path / "slice.bin"
    target.load(spec(module_file, cache_file))
    # Same length, and the modification time put back: only the text tells them apart.
    stat = module_file.stat()
    module_file.write_text(MODULE.replace("SCALE = 3", "SCALE = 4"))
    os.utime(module_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    calls = compiles(monkeypatch)
    assert target.load(spec(module_file, cache_file))(2) == 8
    assert len(calls) == 1
    assert target.load(spec(module_file, cache_file))(2) == 8
    assert len(calls) == 1, "the entry was replaced by the new source's"


def test_other_ranges_are_compiled_again(module_file, tmp_path, monkeypatch):
    cache_file = tmp_path / "slice.bin"
    target.load(spec(module_file, cache_file))
    calls = compiles(monkeypatch)
    target.load(spec(module_file, cache_file, [[1, 2], [5, 6]]))
    assert len(calls) == 1
    assert sys.modules["kept_mod"].UNUSED == 1


def test_another_pythons_entry_is_not_used(module_file, tmp_path, monkeypatch):
    cache_file = tmp_path / "slice.bin"
    target.load(spec(module_file, cache_file))
    calls = compiles(monkeypatch)
    monkeypatch.setattr(compiled, "magic", lambda: b"\x00\x01\r\n")
    assert target.load(spec(module_file, cache_file))(2) == 6
    assert len(calls) == 1


@pytest.mark.parametrize("damage", [b"", b"garbage", None])
def test_a_damaged_entry_is_compiled_again(module_file, tmp_path, monkeypatch, damage):
    cache_file = tmp_path / "slice.bin"
    target.load(spec(module_file, cache_file))
    data = cache_file.read_bytes()
    # None: the right header with a truncated body.
    cache_file.write_bytes(data[: len(compiled.header()) + 5] if damage is None else damage)
    calls = compiles(monkeypatch)
    assert target.load(spec(module_file, cache_file))(2) == 6
    assert len(calls) == 1


def test_an_unwritable_cache_only_costs_the_entry(module_file, tmp_path):
    cache_file = tmp_path / "missing-dir" / "slice.bin"
    assert target.load(spec(module_file, cache_file))(2) == 6
    assert not cache_file.parent.exists()


def test_a_call_with_a_kept_slice_never_imports_ast(module_file, tmp_path):
    cache_file = tmp_path / "slice.bin"
    target.load(spec(module_file, cache_file))
    script = (
        "import json, sys; from lfm_runner import target;"
        f"f = target.load(json.loads({json.dumps(json.dumps(spec(module_file, cache_file)))}));"
        "print(f(2), 'ast' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["6", "False"]
