"""A Keras fit with one code-level finding that ``tensorgauge fix`` patches: ``--input`` (default): a serial,
deterministic map that calls Python for every element (input_bound: cache, parallel calls, prefetch);
``--eager``: compile(run_eagerly=True) on tiny steps (eager_execution). Prints nothing; the test reads the run."""

import sys
import time

import keras
import numpy as np
import tensorflow as tf

EAGER = "--eager" in sys.argv
rng = np.random.default_rng(0)
x = rng.random((512, 16), dtype=np.float32)
y = rng.random((512, 1), dtype=np.float32)


def slow_scale(row):
    end = time.perf_counter() + 0.0008  # Python work for every element, the same result every epoch
    while time.perf_counter() < end:
        pass
    return row * 2


def scale(features, label):
    features = tf.numpy_function(slow_scale, [features], tf.float32, stateful=False)
    return tf.ensure_shape(features, [16]), label


dataset = tf.data.Dataset.from_tensor_slices((x, y))
if not EAGER:
    dataset = dataset.map(scale)  # serial: one element at a time
dataset = dataset.batch(16)

model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
if EAGER:
    model.compile(optimizer="sgd", loss="mse", run_eagerly=True)
else:
    model.compile(
        optimizer="sgd",
        loss="mse",
    )
model.fit(dataset, epochs=3, verbose=0)
