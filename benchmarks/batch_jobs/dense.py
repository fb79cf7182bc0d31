"""A wide dense regressor on arrays (the memory per example: a 16,384-wide hidden layer)."""

import os

import keras
import numpy as np

rng = np.random.default_rng(0)
x = rng.random((32_768, 256), dtype=np.float32)
y = rng.random((32_768, 1), dtype=np.float32)
model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(16_384, activation="relu"),
                          keras.layers.Dense(256, activation="relu"), keras.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(x, y, batch_size=int(os.environ.get("BATCH", 64)), epochs=int(os.environ.get("EPOCHS", 2)), verbose=0)
