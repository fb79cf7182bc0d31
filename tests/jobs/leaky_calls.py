"""A leak across calls: each of 10 evaluate calls keeps 40 MB of results in a list (as a job
that collects every call's outputs does), the session cleared each time so no model piles up."""

import keras
import numpy as np

x = np.random.default_rng(0).normal(size=(256, 16)).astype("float32")
y = (x[:, 0] > 0).astype("float32")
kept = []
for _ in range(10):
    keras.backend.clear_session()
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8), keras.layers.Dense(1)])
    model.compile("adam", "mse")
    model.evaluate(x, y, verbose=0)
    kept.append(np.ones(5_000_000))  # 40 MB, touched
