def slope(n):
    """pandas and scikit-learn: the slope of y = 3x + 1 fitted on n points."""
    import pandas as pd
    from sklearn.linear_model import LinearRegression

    frame = pd.DataFrame({"x": range(n)})
    frame["y"] = 3 * frame["x"] + 1
    model = LinearRegression().fit(frame[["x"]], frame["y"])
    return round(float(model.coef_[0]), 6)
