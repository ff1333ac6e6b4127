def spread(n):
    """numpy only; returns a numpy scalar, which a bare worker cannot open."""
    import numpy as np

    return np.arange(n, dtype=float).std()
