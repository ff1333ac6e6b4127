"""Every ```python example of docs/python.md runs, as a script of its own, and passes its
own asserts. A block headed ```python NAME.py is a module the examples import: it is written
beside each script, not run."""

import os
import re
import subprocess
import sys

import pytest

DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "python.md")


def examples():
    with open(DOC) as handle:
        text = handle.read()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def modules():
    with open(DOC) as handle:
        text = handle.read()
    return re.findall(r"```python (\w+\.py)\n(.*?)```", text, flags=re.S)


def test_the_doc_has_examples():
    assert len(examples()) >= 5


@pytest.mark.parametrize("number", range(len(examples())))
def test_doc_example_runs(number, tmp_path):
    for name, source in modules():
        (tmp_path / name).write_text(source)
    script = tmp_path / f"example{number}.py"
    script.write_text(examples()[number])
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, f"example {number} failed:\n{done.stdout}\n{done.stderr}"
