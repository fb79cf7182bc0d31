"""A fit whose input cost is one ``tf.py_function`` with one hot line: ``featurize`` does cheap numpy on
each row and a pure-Python loop on one line (``HOT``) that takes almost all its time. Prints nothing;
the test reads the run."""

import numpy as np
import tensorflow as tf

BATCH, FEATURES, STEPS = 8, 8, 40


def featurize(x):
    row = x.numpy()
    scaled = row * 2.0
    checksum = sum(i * i for i in range(6000))  # HOT
    shifted = scaled - 1.0
    return shifted + np.float32(checksum % 2)


rows = np.random.default_rng(0).random((4096, FEATURES), dtype=np.float32)
data = (tf.data.Dataset.from_tensor_slices(rows).repeat()
        .map(lambda x: tf.ensure_shape(tf.py_function(featurize, [x], tf.float32), [FEATURES]))
        .batch(BATCH).map(lambda x: (x, tf.reduce_sum(x, axis=1))).prefetch(2))
model = tf.keras.Sequential([tf.keras.Input((FEATURES,)), tf.keras.layers.Dense(16, activation="relu"),
                             tf.keras.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(data, epochs=1, steps_per_epoch=STEPS, verbose=0)
