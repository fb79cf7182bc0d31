"""A fit whose input has known stage costs: ``--maps``: three serial maps, the second doing ten times the
work of the others (Python busy for ``--unit-ms`` a row in the cheap ones, ten times that in the second,
each through tf.numpy_function); ``--generator``: fed
by ``Dataset.from_generator`` of a slow generator; ``--loop``: a custom training loop (a tf.function step
over ``next()`` on the dataset's iterator) instead of fit; ``--pydataset``: fed by a keras.utils.PyDataset
whose ``__getitem__`` is slow; ``--windows``: as keras' ``timeseries_dataset_from_array`` builds it, a
large array zipped into every element and a window taken from it by a map that does ten times the work
of the others (the elements before it large, after it small); ``--zipped``: as keras-io's mixup, two
batched branches zipped and mixed by a map, the first branch's map doing ten times the work. Prints nothing; the test reads the run."""

import argparse
import time

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--generator", action="store_true")
parser.add_argument("--loop", action="store_true")
parser.add_argument("--pydataset", action="store_true")
parser.add_argument("--windows", action="store_true")
parser.add_argument("--zipped", action="store_true")
parser.add_argument("--unit-ms", type=float, default=0.5)
parser.add_argument("--steps", type=int, default=40)
args = parser.parse_args()
BATCH, FEATURES = 8, 8


def busy(seconds: float) -> None:
    """Work on this thread for ``seconds`` (CPU, not a sleep: the cost is the same whatever the cores)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def cheap_scale(x):
    busy(args.unit_ms / 1000)
    return x * 2


def costly_transform(x):
    busy(10 * args.unit_ms / 1000)
    return x + 1


def cheap_shift(x):
    busy(args.unit_ms / 1000)
    return x - 1


def in_python(function):
    """A map function that runs ``function`` on each row through tf.numpy_function."""
    return lambda x: tf.ensure_shape(tf.numpy_function(function, [x], tf.float32, stateful=False), [FEATURES])


def slow_rows():
    rng = np.random.default_rng(0)
    while True:
        busy(args.unit_ms * 4 / 1000)
        yield rng.random(FEATURES, dtype=np.float32), np.float32(1.0)


def costly_window(array, indices):
    busy(10 * args.unit_ms / 1000)
    return array[indices].reshape(FEATURES)


class SlowBatches(tf.keras.utils.PyDataset):
    def __len__(self):
        return 64

    def __getitem__(self, index):
        busy(BATCH * args.unit_ms * 4 / 1000)
        rows = np.random.default_rng(index).random((BATCH, FEATURES), dtype=np.float32)
        return rows, rows.sum(axis=1)


if args.pydataset:
    data = SlowBatches()
elif args.generator:
    data = tf.data.Dataset.from_generator(slow_rows, output_signature=(
        tf.TensorSpec([FEATURES], tf.float32), tf.TensorSpec([], tf.float32))).batch(BATCH)
elif args.zipped:
    rows = np.random.default_rng(0).random((4096, FEATURES), dtype=np.float32)
    first = tf.data.Dataset.from_tensor_slices(rows).repeat().map(in_python(costly_transform)).batch(BATCH)
    second = tf.data.Dataset.from_tensor_slices(rows).repeat().map(in_python(cheap_shift)).batch(BATCH)
    data = tf.data.Dataset.zip((first, second)).map(lambda a, b: (a * 0.5 + b * 0.5, tf.reduce_sum(a, axis=1)))
elif args.windows:  # 12.8 MB in every element until the window is taken
    series = np.random.default_rng(0).random((400_000, FEATURES), dtype=np.float32)
    # Each start as a window of indices of an open length, as keras builds them: the element's size unknown.
    starts = tf.data.Dataset.range(len(series) - 1).map(lambda start: tf.range(start, start + 1))
    data = tf.data.Dataset.zip((tf.data.Dataset.from_tensors(series).repeat(), starts)).map(
        lambda array, indices: tf.ensure_shape(tf.numpy_function(costly_window, [array, indices], tf.float32,
                                                               stateful=False), [FEATURES]))
    data = data.map(in_python(cheap_shift)).batch(BATCH).map(lambda x: (x, tf.reduce_sum(x, axis=1)))
    options = tf.data.Options()  # options of its own, as the input-bound demo's
    options.experimental_optimization.map_and_batch_fusion = False
    data = data.with_options(options)
else:
    rows = np.random.default_rng(0).random((4096, FEATURES), dtype=np.float32)
    data = (tf.data.Dataset.from_tensor_slices(rows).repeat()
            .map(in_python(cheap_scale)).map(in_python(costly_transform)).map(in_python(cheap_shift)))
    data = data.batch(BATCH).map(lambda x: (x, tf.reduce_sum(x, axis=1)))  # labels: on the batch, vectorised
if not args.pydataset:
    data = data.prefetch(2)

model = tf.keras.Sequential([tf.keras.Input((FEATURES,)), tf.keras.layers.Dense(16, activation="relu"),
                             tf.keras.layers.Dense(1)])
if args.loop:
    optimizer = tf.keras.optimizers.Adam()

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x, training=True)[:, 0] - y) ** 2)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))

    batches = iter(data)
    for _ in range(args.steps):
        train_step(*next(batches))
else:
    model.compile("adam", "mse")
    model.fit(data, epochs=1, steps_per_epoch=args.steps, verbose=0)
