"""The client parses sizes as the serve does: both are checked against
tests/fixtures/sizes.json (the Rust side in monitor/src/limits.rs)."""

import json
import os

import pytest

import lfm
from lfm.calls import SizeError, limit_size, parse_size

VECTORS = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "sizes.json")
with open(VECTORS) as vectors:
    CASES = json.load(vectors)["cases"]


def outcome(parse, value):
    try:
        return parse("memory", value)
    except SizeError as error:
        return error.kind


@pytest.mark.parametrize("case", CASES, ids=[repr(c["input"]) for c in CASES])
def test_a_size_parses_as_the_shared_vectors_say(case):
    assert outcome(parse_size, case["input"]) == case["size"]
    assert outcome(limit_size, case["input"]) == case["limit"]


def test_a_bare_number_of_a_few_bytes_is_refused_with_the_units():
    with pytest.raises(ValueError, match=r"memory: '2' is less than 4 MiB and has no unit.*2G"):
        lfm.task(memory="2")
    with pytest.raises(ValueError, match="disk: 100 is less than 4 MiB and has no unit"):
        lfm.task(disk=100)
