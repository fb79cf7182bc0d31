"""A small dense model trained on a tf.data pipeline, by ``fit`` or by a custom ``tf.function``
loop, with healthy input (cached and prefetched) or slow input (a serial Python map that
sleeps ``--sleep-ms`` a batch, not prefetched). Steps take a few milliseconds.

    input_cost.py [--loop] [--slow] [--sleep-ms MS] [--epochs N] [--ab OUT.json]

--ab: afterwards, measure without any tool's help the same training on one cached batch
(``ds.take(1).cache().repeat()``), and write both medians to OUT.json.
"""

import json
import statistics
import sys
import time

import keras
import numpy as np
import tensorflow as tf

LOOP, SLOW = "--loop" in sys.argv, "--slow" in sys.argv
SLEEP = float(sys.argv[sys.argv.index("--sleep-ms") + 1]) / 1000 if "--sleep-ms" in sys.argv else 0.006
EPOCHS = int(sys.argv[sys.argv.index("--epochs") + 1]) if "--epochs" in sys.argv else 4
AB = sys.argv[sys.argv.index("--ab") + 1] if "--ab" in sys.argv else None
BATCH, BATCHES = 64, 100

rng = np.random.default_rng(0)
x = rng.random((BATCH * BATCHES, 256), dtype=np.float32)
y = rng.integers(0, 10, BATCH * BATCHES)


def slow(images, labels):
    def wait(a):
        time.sleep(SLEEP)
        return a

    return tf.numpy_function(wait, [images], tf.float32, stateful=True), labels


ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
if SLOW:
    ds = ds.map(slow).map(lambda a, b: (tf.ensure_shape(a, [None, 256]), b))
else:
    ds = ds.cache().prefetch(tf.data.AUTOTUNE)

model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(512, activation="relu"),
                          keras.layers.Dense(512, activation="relu"), keras.layers.Dense(10)])
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
optimizer = keras.optimizers.Adam()


@tf.function
def train_step(images, labels):
    with tf.GradientTape() as tape:
        loss = loss_fn(labels, model(images, training=True))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_weights), model.trainable_weights))
    return loss


def loop(dataset, epochs: int, steps: int | None = None) -> list[float]:
    times, last = [], None
    for _ in range(epochs):
        for i, (images, labels) in enumerate(dataset):
            if steps is not None and i >= steps:
                break
            train_step(images, labels).numpy()
            now = time.perf_counter()
            if last is not None:
                times.append(now - last)
            last = now
    return times


def fit(dataset, epochs: int, steps: int | None = None) -> list[float]:
    starts: list[float] = []
    clock = keras.callbacks.LambdaCallback(on_train_batch_begin=lambda b, logs: starts.append(time.perf_counter()))
    model.fit(dataset, epochs=epochs, steps_per_epoch=steps, verbose=0, callbacks=[clock])
    return [b - a for a, b in zip(starts, starts[1:])]


run = loop if LOOP else fit
if not LOOP:
    model.compile(optimizer, loss_fn)
step = statistics.median(run(ds, EPOCHS)[5:])
if AB:
    compute = statistics.median(run(ds.take(1).cache().repeat(), 1, BATCHES)[5:])
    with open(AB, "w") as f:
        json.dump({"step_seconds": step, "compute_only_step_seconds": compute}, f)
print(json.dumps({"step_seconds": step}))
