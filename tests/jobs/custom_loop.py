"""A custom training loop (GradientTape + optimizer.apply_gradients), as in the Keras guide
"Writing a training loop from scratch": prints its own step timing as JSON on the last line.

    custom_loop.py [--eager] [--slow-input] [--keras-evaluate] [--epochs N] [--ab]

--eager: the step runs eagerly (no tf.function). --slow-input: each element waits ~1 ms in a
Python function (a serial map: the loop waits for input). --keras-evaluate: model.evaluate
on a validation set after each epoch. --ab: also measure, independently of any tool, the
compute-only step (the same step on one cached batch) and so the input wait per step.
"""

import json
import statistics
import sys
import time

import keras
import numpy as np
import tensorflow as tf

EAGER, SLOW, KERAS_EVAL, AB = ("--eager" in sys.argv, "--slow-input" in sys.argv, "--keras-evaluate" in sys.argv,
                               "--ab" in sys.argv)
EPOCHS = int(sys.argv[sys.argv.index("--epochs") + 1]) if "--epochs" in sys.argv else 3
BATCH, BATCHES = 64, 40

rng = np.random.default_rng(0)
x = rng.random((BATCH * BATCHES, 32), dtype=np.float32)
y = rng.random((BATCH * BATCHES, 1), dtype=np.float32)


def slow(row):  # reading a file, say: the loop waits, the cores do not work
    time.sleep(0.001)
    return row


def load(features, target):
    features = tf.numpy_function(slow, [features], tf.float32)
    features.set_shape((32,))
    return features, target


train = tf.data.Dataset.from_tensor_slices((x, y))
if SLOW:
    options = tf.data.Options()
    options.experimental_optimization.map_and_batch_fusion = False
    options.experimental_optimization.inject_prefetch = False  # the map runs inside next(), nowhere else
    train = train.map(load).with_options(options)
train = train.batch(BATCH)
val = tf.data.Dataset.from_tensor_slices((x[:256], y[:256])).batch(BATCH)

model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(512, activation="relu"),
                          keras.layers.Dense(512, activation="relu"), keras.layers.Dense(1)])
model.compile(loss="mse")
optimizer = keras.optimizers.Adam(1e-3)
loss_fn = keras.losses.MeanSquaredError()
val_metric = keras.metrics.MeanSquaredError()


def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = loss_fn(yb, model(xb, training=True))
    grads = tape.gradient(loss, model.trainable_weights)
    optimizer.apply_gradients(zip(grads, model.trainable_weights))
    return loss


def test_step(xb, yb):
    val_metric.update_state(yb, model(xb, training=False))


if not EAGER:
    train_step, test_step = tf.function(train_step), tf.function(test_step)


def loop(dataset, epochs):
    times = []
    for _ in range(epochs):
        last = time.monotonic()
        for xb, yb in dataset:
            train_step(xb, yb)
            now = time.monotonic()
            times.append(now - last)
            last = now
        if KERAS_EVAL:
            model.evaluate(val, verbose=0)
        else:
            for xb, yb in val:
                test_step(xb, yb)
            val_metric.reset_state()
    return times


times = loop(train, EPOCHS)
result = {"updates": len(times), "step_seconds_p50": statistics.median(times[1:])}
if AB:
    one = train.take(1).cache().repeat(BATCHES)
    compute = statistics.median(loop(one, 2)[5:])
    result.update(compute_only_step_seconds=compute, input_wait_seconds=result["step_seconds_p50"] - compute)
print(json.dumps(result))
