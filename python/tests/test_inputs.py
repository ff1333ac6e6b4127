"""lfm.inputs: a call's input size, the arguments' pickle plus the files they name."""

import os

from lfm.calls import Options, request
from lfm.inputs import input_bytes


def test_files_named_by_paths_and_existing_strings_are_added(tmp_path):
    reads = tmp_path / "reads.fastq"
    reads.write_bytes(b"A" * 5000)
    (tmp_path / "sub").mkdir()
    bam = tmp_path / "sub" / "b.bam"
    bam.write_bytes(b"\0" * 300)
    # A PathLike, a string naming a file (inside a list and a dict), one naming nothing, a
    # directory (counts nothing) and other values.
    args = (reads, [str(bam), "no-such-file", 3], {"out": str(tmp_path / "sub")})
    assert input_bytes(args, {"ref": str(bam)}, pickled=100) == 100 + 5000 + 300 + 300
    assert input_bytes((), {}, pickled=7) == 7


def test_relative_paths_are_from_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "in.txt").write_bytes(b"x" * 42)
    monkeypatch.chdir(tmp_path)
    assert input_bytes(("in.txt",), {}, pickled=0) == 42


def test_the_request_carries_input_bytes(tmp_path):
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(2048))
    fields = request(len, (str(data),), {}, Options(), roots=[])
    assert fields["input_bytes"] > 2048
    plain = request(len, ("x",), {}, Options(), roots=[])
    assert 0 < plain["input_bytes"] < 200
