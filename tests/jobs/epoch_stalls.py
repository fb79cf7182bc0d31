"""Training that pauses as each epoch starts: the input generator takes 1.5 s to open (a file
listing, a connection) every time Keras iterates it again. Writes when each pause began."""

import json
import sys
import time

import keras
import numpy as np
import tensorflow as tf

PAUSE_SECONDS = 1.5
pauses = []


def batches():
    pauses.append(time.monotonic())
    time.sleep(PAUSE_SECONDS)
    rng = np.random.default_rng(0)
    for _ in range(60):
        x = rng.normal(size=(32, 16)).astype("float32")
        yield x, (x[:, :1] > 0).astype("float32")


spec = (tf.TensorSpec((32, 16), tf.float32), tf.TensorSpec((32, 1), tf.float32))
data = tf.data.Dataset.from_generator(batches, output_signature=spec)
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(data, epochs=4, verbose=0)
with open(sys.argv[1], "w") as f:
    json.dump({"pauses": len(pauses), "pause_seconds": PAUSE_SECONDS}, f)
