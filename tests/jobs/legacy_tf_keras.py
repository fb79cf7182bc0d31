"""tf.keras as tf_keras (TF_USE_LEGACY_KERAS=1): fit, save, load, predict; and three models of a
functional subclass (tf_keras makes a throwaway instance of such a class while it rewrites it)."""

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


class Functional(tf.keras.Model):
    def __init__(self):
        inputs = tf.keras.Input((4,))
        super().__init__(inputs, tf.keras.layers.Dense(2)(inputs))


built = [Functional() for _ in range(3)]
