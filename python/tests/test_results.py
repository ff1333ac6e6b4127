"""JSON results of scientific values (python/lfm_runner/results.py)."""

import dataclasses
import datetime
import json
import pathlib

import numpy
import pandas
import pytest

from lfm_runner import results


def rendered(value):
    return json.loads(results.dumps(value))


def test_numpy_scalars_are_the_numbers_they_hold():
    assert rendered(numpy.int64(7)) == 7
    assert rendered(numpy.float32(0.5)) == 0.5
    assert rendered(numpy.bool_(True)) is True
    assert rendered({"mean": numpy.float64(2.5), "n": [numpy.int32(3)]}) == {"mean": 2.5, "n": [3]}


def test_numpy_arrays_are_nested_lists():
    assert rendered(numpy.arange(3)) == [0, 1, 2]
    assert rendered(numpy.eye(2)) == [[1.0, 0.0], [0.0, 1.0]]
    assert rendered(numpy.array([], dtype=float)) == []


def test_an_array_past_the_limit_is_an_error_that_names_its_size():
    with pytest.raises(ValueError, match="100,001 elements"):
        results.dumps(numpy.zeros(results.MAX_ELEMENTS + 1))


def test_pandas_series_and_frames_are_lists_and_columns():
    assert rendered(pandas.Series([1, 2])) == [1, 2]
    frame = pandas.DataFrame({"a": [1, 2], "b": [0.5, 1.5]})
    assert rendered(frame) == {"a": [1, 2], "b": [0.5, 1.5]}
    assert rendered(pandas.Timestamp("2026-11-24T10:00")) == "2026-11-24T10:00:00"
    assert rendered(numpy.datetime64("2026-11-24T10:00", "s")) == "2026-11-24T10:00:00"


def test_paths_dates_and_dataclasses():
    @dataclasses.dataclass
    class Fit:
        path: pathlib.Path
        when: datetime.date
        score: float

    fit = Fit(pathlib.Path("/data/x.csv"), datetime.date(2026, 11, 24), numpy.float64(0.9))
    assert rendered(fit) == {"path": "/data/x.csv", "when": "2026-11-24", "score": 0.9}


def test_other_values_are_still_not_json():
    for value in ({1, 2}, object(), numpy.timedelta64(3, "s"), 1j, numpy.complex128(1j)):
        with pytest.raises(TypeError, match="not JSON serializable"):
            results.dumps(value)
