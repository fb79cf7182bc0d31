"""What the scenarios share: a dense model and synthetic data."""

from __future__ import annotations


def dense_model(width: int, inputs: int, **compile_args):
    import keras

    model = keras.Sequential([keras.Input((inputs,)), keras.layers.Dense(width, activation="relu"),
                              keras.layers.Dense(width, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse", **compile_args)
    return model


def arrays(rows: int, inputs: int):
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, inputs)).astype("float32")
    return x, x[:, :1] * 2.0
