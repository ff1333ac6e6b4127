"""plainjson writes what json.dumps writes and reads what json writes, for the runner's files."""

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

from lfm_runner import plainjson

AWKWARD_STRINGS = [
    "",
    "plain",
    'quote " and backslash \\ and slash /',
    "controls \x00\x01\x1f\n\r\t\b\f",
    "latin é, euro €, cjk 漢字",
    "astral 😀 𝄞",
    "lone surrogate \ud800 end",
    "\u2028\u2029",
]


def random_value(rng, depth=0):
    kinds = ["str", "int", "float", "bool", "none"]
    if depth < 4:
        kinds += ["list", "tuple", "dict"]
    kind = rng.choice(kinds)
    if kind == "str":
        return rng.choice(AWKWARD_STRINGS) + "".join(chr(rng.randrange(0, 0x3000)) for _ in range(rng.randrange(4)))
    if kind == "int":
        return rng.choice([0, -1, 7, 2**63, -(2**80), rng.randrange(-(10**6), 10**6)])
    if kind == "float":
        return rng.choice([0.0, -0.0, 0.1, 1e300, -2.5e-308, 1 / 3, math.inf, -math.inf, rng.random()])
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "none":
        return None
    items = [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == "list":
        return items
    if kind == "tuple":
        return tuple(items)
    return {rng.choice(AWKWARD_STRINGS) + str(i): item for i, item in enumerate(items)}


def test_dumps_writes_exactly_what_json_writes():
    rng = random.Random(29)
    for _ in range(2000):
        value = random_value(rng)
        assert plainjson.dumps(value) == json.dumps(value)


def test_nan_is_written_as_json_writes_it():
    assert plainjson.dumps([math.nan]) == json.dumps([math.nan]) == "[NaN]"


def test_loads_reads_what_json_and_serde_write():
    rng = random.Random(30)
    for _ in range(2000):
        value = random_value(rng)
        for text in (json.dumps(value), json.dumps(value, ensure_ascii=False, indent=1)):
            again = plainjson.loads(text)
            assert json.dumps(again) == json.dumps(json.loads(text))
    assert plainjson.loads(' {"a" : [1, 2.5e3, -4E-2, true, false, null], "b\\/": "\\u00e9"} ') == {
        "a": [1, 2500.0, -0.04, True, False, None],
        "b/": "é",
    }


@pytest.mark.parametrize(
    "value",
    [
        {1: "int key"},
        [b"bytes"],
        {"set": {1, 2}},
        type("IntSub", (int,), {})(3),
        type("StrSub", (str,), {})("s"),
        list(range(plainjson.MOST_ITEMS + 1)),
    ],
)
def test_values_only_json_renders_are_left_to_it(value):
    with pytest.raises(plainjson.NotPlain):
        plainjson.dumps(value)


def test_a_circular_value_is_left_to_json():
    circular = []
    circular.append(circular)
    with pytest.raises(plainjson.NotPlain):
        plainjson.dumps(circular)


@pytest.mark.parametrize(
    "text, where",
    [
        ("", "a value expected"),
        ('{"a" 1}', "':' expected"),
        ("[1, 2", "',' or ']' expected"),
        ('"open', "an unterminated string"),
        ('"\\x"', "an unknown escape"),
        ('"\\u12"', "four hex digits"),
        ("[1] 2", "text after the document"),
        ("{\n\n  oops}", "line 3"),
    ],
)
def test_bad_text_is_a_value_error_saying_what_and_where(text, where):
    with pytest.raises(ValueError, match=where):
        plainjson.loads(text)


def test_the_runner_imports_no_json_for_a_plain_call(tmp_path):
    """What a call's process holds before the user's code runs: no json, re or enum."""
    runner = Path(__file__).resolve().parents[1]
    probe = (
        "import sys; sys.path.insert(0, %r); import lfm_runner_main; "
        "print(sorted(m for m in ('json', 're', 'enum') if m in sys.modules))" % str(runner)
    )
    out = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
