"""Saves one small model as .keras, .h5, a SavedModel (export), weights only, and
one with a custom layer whose code the loader will not have. Argument: a folder."""

import sys
from pathlib import Path

import keras
import numpy as np

folder = Path(sys.argv[1])


@keras.saving.register_keras_serializable(package="jobonly")
class Twice(keras.layers.Layer):
    def call(self, x):
        return 2 * x


model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(np.zeros((64, 8), "float32"), np.zeros((64, 1), "float32"), verbose=0)
model.save(folder / "m.keras")
model.save(folder / "m.h5")
model.export(str(folder / "saved"), verbose=False)
model.save_weights(folder / "w.weights.h5")
keras.Sequential([keras.Input((4,)), Twice(), keras.layers.Dense(1)]).save(folder / "custom.keras")
