"""The job of the `check` acceptance: a fit whose pipeline reads each batch with a latency (15 ms, as
from a slow disk or a network store) and maps it in parallel, prefetched, so that its steps are about
its model's (1024-wide hidden layers, ~9 ms a step on 2 cores); three changes regress it: SERIAL=1 (the
map's num_parallel_calls removed: the latency is no longer hidden), EAGER=1 (run_eagerly=True), WIDE=1
(its hidden layers 30% wider). With 256-wide layers and a 3 ms latency the input set the pace, and the
wider model ran as fast as the baseline in 2 runs of 6: no regression to catch. NOPREFETCH=1 removes its
prefetch: no regression on TensorFlow 2.21, whose tf.data injects a prefetch at the end of a pipeline
that has none (``inject_prefetch``, on by default)."""

import os
import time

import keras
import numpy as np
import tensorflow as tf

width = 1331 if os.environ.get("WIDE") else 1024
rng = np.random.default_rng(0)
x = rng.random((16_384, 64), dtype=np.float32)
y = rng.random((16_384, 1), dtype=np.float32)
mix = tf.constant(rng.random((512, 512), dtype=np.float32) / 64)
down = tf.constant(rng.random((512, 64), dtype=np.float32) / 64)


def read(xb):  # the batch's read latency
    time.sleep(0.015)
    return xb


def augment(xb, yb):  # input work per batch, in tf.data's thread
    xb = tf.ensure_shape(tf.numpy_function(read, [xb], tf.float32), [None, 64])
    h = tf.tanh(tf.matmul(tf.tile(xb, [1, 8]), mix))
    return xb + tf.matmul(h, down), yb


parallel = None if os.environ.get("SERIAL") else tf.data.AUTOTUNE
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).map(augment, num_parallel_calls=parallel)
if not os.environ.get("NOPREFETCH"):
    dataset = dataset.prefetch(tf.data.AUTOTUNE)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(width, activation="relu"),
                          keras.layers.Dense(width, activation="relu"), keras.layers.Dense(1)])
model.compile("adam", "mse", run_eagerly=bool(os.environ.get("EAGER")))
model.fit(dataset, epochs=int(os.environ.get("EPOCHS", 3)), verbose=0)
