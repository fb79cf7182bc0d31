"""The mistakes users ask about most, each on purpose, with the truth written to a JSON file:
fit called 12 times on one model (Keras builds a tf.data pipeline per call: not retracing),
a tf.function of ours retraced on 8 input shapes, 10 more models built without clear_session(),
and predict called 40 times on 8 rows (timed here against model(x, training=False))."""

import json
import statistics
import sys
import time

import keras
import numpy as np
import tensorflow as tf

truth = {}
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 16)).astype("float32")
y = (x[:, 0] > 0).astype("float32")


def build():
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(1, activation="sigmoid")])
    model.compile("adam", "binary_crossentropy")
    return model


model = build()
for _ in range(12):
    model.fit(x, y, batch_size=64, epochs=1, verbose=0)


@tf.function
def step(batch):
    return tf.reduce_sum(batch * 2.0)


for rows in range(1, 9):  # a new shape each call: a new trace each call
    step(tf.ones((rows, 16)))
truth["step_shapes"] = 8

others = []
for _ in range(10):  # a sweep that never clears the session
    other = build()
    other.fit(x[:64], y[:64], epochs=1, verbose=0)
    others.append(other)
truth["models"] = 11

small = x[:8]
predict_times, direct_times = [], []
for _ in range(40):
    start = time.perf_counter()
    model.predict(small, verbose=0)
    predict_times.append(time.perf_counter() - start)
for _ in range(40):
    start = time.perf_counter()
    model(small, training=False).numpy()
    direct_times.append(time.perf_counter() - start)
truth["predict_seconds"] = statistics.median(predict_times)
truth["direct_seconds"] = statistics.median(direct_times)
with open(sys.argv[1], "w") as f:
    json.dump(truth, f)
