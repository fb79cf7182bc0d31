"""A fit whose model looks strings up in a vocabulary with no OOV slot (``StringLookup(num_oov_indices=0)``:
a batch of empty strings is not a valid input), on a pipeline with a serial Python map that sleeps
4 ms a batch. Deterministic: writes a digest of the trained weights to argv[1], so a run under the
tool can be held against a bare one. TF_USE_LEGACY_KERAS=1 runs it on tf_keras."""

import hashlib
import json
import sys
import time

import numpy as np
import tensorflow as tf

keras = tf.keras  # Keras 3, or tf_keras under TF_USE_LEGACY_KERAS=1
tf.config.experimental.enable_op_determinism()
keras.utils.set_random_seed(0)
VOCABULARY = ["red", "green", "blue"]
BATCH, BATCHES = 32, 160

rng = np.random.default_rng(0)
colours = np.array(VOCABULARY)[rng.integers(0, 3, BATCH * BATCHES)]
numbers = rng.random((BATCH * BATCHES, 16), dtype=np.float32)
labels = rng.random((BATCH * BATCHES, 1), dtype=np.float32)


def slow(batch):
    time.sleep(0.004)
    return batch


def wait(features, y):
    waited = tf.numpy_function(slow, [features["numbers"]], tf.float32, stateful=True)
    return {"colour": features["colour"], "numbers": tf.ensure_shape(waited, [None, 16])}, y


ds = tf.data.Dataset.from_tensor_slices(({"colour": colours, "numbers": numbers}, labels)).batch(BATCH).map(wait)

colour = keras.Input((), dtype="string", name="colour")
number = keras.Input((16,), name="numbers")
looked_up = keras.layers.StringLookup(vocabulary=VOCABULARY, num_oov_indices=0, output_mode="one_hot")(colour)
hidden = keras.layers.Dense(32, activation="relu")(keras.layers.Concatenate()([looked_up, number]))
model = keras.Model({"colour": colour, "numbers": number}, keras.layers.Dense(1)(hidden))
model.compile(keras.optimizers.Adam(0.01), "mse")
model.fit(ds, epochs=1, verbose=0)
digest = hashlib.sha256(b"".join(np.asarray(w).tobytes() for w in model.get_weights())).hexdigest()
with open(sys.argv[1], "w") as f:
    json.dump({"weights": digest, "keras": keras.__name__}, f)
