"""The compute-only input of each kind of fit input, against the element spec fit's own iterator
has (the same spec: the train function is not traced again). Prints one JSON line per case."""

import json

import numpy as np
import tensorflow as tf

from tensorgauge.hook.probes import cached_input, repeated, stashed

x = np.arange(40 * 3, dtype="float32").reshape(40, 3)
y = np.arange(40, dtype="float32").reshape(40, 1)


def gen():
    for i in range(5):
        yield np.full((8, 3), i, "float32"), np.full((8, 1), i, "float32")


cases = {
    "open batch": (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(16, seed=0).batch(8).prefetch(2), None, None),
    "fixed batch": (tf.data.Dataset.from_tensor_slices((x, y)).batch(8, drop_remainder=True), None, None),
    "dict features": (tf.data.Dataset.from_tensor_slices(({"a": x, "b": y}, y)).batch(8), None, None),
    "generator": (tf.data.Dataset.from_generator(gen, output_signature=(
        tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([None, 1], tf.float32))), None, None),
    "arrays": (x, y, 8),
    # 2,000 elements of 32 KiB: few enough to peek at by count, but a new iterator would fill 64 MiB.
    "large shuffle buffer": (tf.data.Dataset.from_tensor_slices(np.zeros((2_000, 8192), "float32"))
                             .map(lambda a: a + 1.0).shuffle(2_000).batch(8), None, None),
}
for name, (inputs, targets, batch_size) in cases.items():
    spec = inputs.element_spec if isinstance(inputs, tf.data.Dataset) else None
    iterator, source, shapes = cached_input(inputs, targets, batch_size, spec=spec)
    first, second = next(iterator), next(iterator)
    same = all(bool(tf.reduce_all(a == b)) for a, b in zip(tf.nest.flatten(first), tf.nest.flatten(second)))
    print(json.dumps({"case": name, "spec_matches": spec is None or iterator.element_spec == spec,
                      "batch_dim": iterator.element_spec[0].shape[0] if name == "arrays" else None,
                      "source": source, "shapes": shapes, "repeats": same,
                      "first_value": float(tf.nest.flatten(first)[0][0][0])}))
# The fit's own batches pulled ahead (the A/B's excursions): the fit's spec, each batch once, in order.
def parts(batch):
    flat = tf.nest.flatten(batch, expand_composites=True)
    return [t.numpy().tolist() for t in flat]


x42, y42 = np.arange(42 * 3, dtype="float32").reshape(42, 3), np.arange(42, dtype="float32").reshape(42, 1)
pulled = {
    "last batch smaller": tf.data.Dataset.from_tensor_slices((x42, y42)).batch(8),
    "dict features": tf.data.Dataset.from_tensor_slices(({"a": x42, "b": y42}, y42)).batch(8),
    "strings": tf.data.Dataset.from_tensor_slices((np.array(["a", "bb", "c"] * 14), y42)).batch(8),
    "ragged": tf.data.Dataset.from_tensor_slices(tf.ragged.constant([[1], [1, 2], [1, 2, 3]] * 14)).batch(8),
    "sparse": tf.data.Dataset.from_tensor_slices(tf.sparse.from_dense(np.eye(42, 5, dtype="float32"))).batch(8),
}
for name, dataset in pulled.items():
    batches = list(dataset)
    stash = stashed(batches, dataset.element_spec)
    print(json.dumps({"stash": name, "spec_matches": stash.element_spec == dataset.element_spec,
                      "in_order": [parts(b) for b in stash] == [parts(b) for b in batches]}))
print(json.dumps({"autotune": repeated(tf.zeros([2]), tf.TensorSpec([None], tf.float32)).options().autotune.enabled}))

# What a shuffle buffer holds: slices of a from_tensor_slices tensor are shared when their rows are
# 64-byte aligned (16 float32), copied otherwise (3 float32); a map makes new elements.
from tensorgauge.hook.dataset_facts import _shuffle_facts  # noqa: E402

rows16, rows3 = np.zeros((100, 16), "float32"), np.zeros((100, 3), "float32")
print(json.dumps({"buffers": {
    "aligned slices": _shuffle_facts(tf.data.Dataset.from_tensor_slices(rows16).take(50), 1000),
    "unaligned slices": _shuffle_facts(tf.data.Dataset.from_tensor_slices((rows16, rows3)), 10),
    "mapped": _shuffle_facts(tf.data.Dataset.from_tensor_slices(rows16).map(lambda a: a * 2), 100)}}))
