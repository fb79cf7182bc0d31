"""tf.keras as tf_keras (TF_USE_LEGACY_KERAS=1): fit, save, load, predict."""

import os
import tempfile

import numpy as np
import tensorflow as tf

assert tf.keras.__name__.startswith("tf_keras"), tf.keras.__name__
model = tf.keras.Sequential([tf.keras.layers.Dense(8, input_shape=(4,)), tf.keras.layers.Dense(1)])
model.compile("sgd", "mse")
x = np.zeros((256, 4), "float32")
model.fit(x, x.sum(axis=1), batch_size=32, epochs=2, validation_split=0.25, verbose=0)
path = os.path.join(tempfile.mkdtemp(), "m.keras")
model.save(path)
restored = tf.keras.models.load_model(path)
restored.predict(x, verbose=0)
