"""A CPU-bound Keras fit; prints the fit's wall seconds and median step time as JSON."""

import json
import sys
import time

import keras
import numpy as np


class StepTimer(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        self.t = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        steps.append(time.perf_counter() - self.t)


steps: list[float] = []
epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
rng = np.random.default_rng(0)
x = rng.normal(size=(16384, 256)).astype("float32")
y = rng.normal(size=(16384, 1)).astype("float32")
model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(1024, activation="relu"),
                          keras.layers.Dense(1024, activation="relu"), keras.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(x[:512], y[:512], batch_size=128, epochs=1, verbose=0)  # trace outside the timing
t = time.perf_counter()
model.fit(x, y, batch_size=128, epochs=epochs, verbose=0)
fit_seconds = time.perf_counter() - t
print(json.dumps({"fit_seconds": fit_seconds, "steps": len(steps)}))
