"""A small scientific workflow: load a config, preprocess, train, report."""
import json
import os
from typing import TYPE_CHECKING

import numpy as np

from helpers import fetch_rows

if TYPE_CHECKING:
    import pandas as pd  # only for type checkers; never needed at run time

try:
    import yaml
except ImportError:
    yaml = None

SCALE = np.float64(2.0)


def load_config(path):
    with open(path) as handle:
        if path.endswith(".json"):
            return json.load(handle)
        return yaml.safe_load(handle)


def preprocess(rows):
    return [row * SCALE for row in rows]


def train(path):
    import math

    rows = preprocess(fetch_rows(path))
    return math.fsum(rows)


def report(result):
    import importlib

    fmt = importlib.import_module("csv")
    return fmt, os.getcwd(), result
