import os


def spread(n):
    import numpy as np

    return float(np.arange(n, dtype=float).std()), os.environ.get("LFM_NODE_CACHE")


def slope(n):
    import pandas as pd
    from sklearn.linear_model import LinearRegression

    frame = pd.DataFrame({"x": range(n)})
    frame["y"] = 3 * frame["x"] + 1
    model = LinearRegression().fit(frame[["x"]], frame["y"])
    return round(float(model.coef_[0]), 6), os.environ.get("LFM_NODE_CACHE")


def count(n):
    from shipbench import words

    return words.sentence(n).count(" ") + 1, os.environ.get("LFM_NODE_CACHE")
