"""An LSTM sequence classifier on arrays (200 time steps of 32 features)."""

import os

import keras
import numpy as np

rng = np.random.default_rng(0)
x = rng.random((4_096, 200, 32), dtype=np.float32)
y = rng.integers(0, 2, size=(4_096, 1)).astype("float32")
model = keras.Sequential([keras.Input((200, 32)), keras.layers.LSTM(256, return_sequences=True),
                          keras.layers.LSTM(128), keras.layers.Dense(1, activation="sigmoid")])
model.compile("adam", "binary_crossentropy")
model.fit(x, y, batch_size=int(os.environ.get("BATCH", 32)), epochs=int(os.environ.get("EPOCHS", 1)), verbose=0)
