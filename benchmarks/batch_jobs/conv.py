"""A small convolutional classifier on 96x96 RGB images in a tf.data pipeline (batch set in the pipeline)."""

import os

import keras
import numpy as np
import tensorflow as tf

rng = np.random.default_rng(0)
images = rng.integers(0, 255, size=(2_048, 96, 96, 3), dtype=np.uint8)
labels = rng.integers(0, 10, size=(2_048,)).astype("int32")
dataset = (tf.data.Dataset.from_tensor_slices((images, labels))
           .map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, y))
           .batch(int(os.environ.get("BATCH", 32))).prefetch(tf.data.AUTOTUNE))
model = keras.Sequential([keras.Input((96, 96, 3)),
                          keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
                          keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
                          keras.layers.MaxPooling2D(),
                          keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
                          keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(dataset, epochs=int(os.environ.get("EPOCHS", 2)), verbose=0)
