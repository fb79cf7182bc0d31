"""One Keras 3 script for every backend (KERAS_BACKEND: tensorflow, jax, torch): fit with
validation, evaluate, predict, save, load. It imports no backend itself.

Usage: keras_backends.py FOLDER [--no-jit]   (--no-jit: compile(jit_compile=False), eager on JAX)"""

import os
import sys

import keras
import numpy as np

rng = np.random.default_rng(0)
x = rng.random((2560, 32), dtype=np.float32)
y = rng.random((2560, 1), dtype=np.float32)
model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(256, activation="relu"),
                          keras.layers.Dense(256, activation="relu"), keras.layers.Dense(1)])
model.compile("adam", "mse", jit_compile=False if "--no-jit" in sys.argv else "auto")
model.fit(x, y, epochs=2, batch_size=64, validation_split=0.2, verbose=0)
model.evaluate(x, y, batch_size=64, verbose=0)
model.predict(x, batch_size=64, verbose=0)
path = os.path.join(sys.argv[1], "model.keras")
model.save(path)
keras.models.load_model(path)
print(keras.backend.backend())
