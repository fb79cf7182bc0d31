"""A minute-long fit of slow steps (~130 ms on 2 cores, like the image-loading tutorial's): a
small conv net on 96x96 images from a prefetched tf.data pipeline.

    python benchmarks/jobs/slow_steps.py [STEPS]
"""

import sys

import keras
import numpy as np
import tensorflow as tf

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 660
rng = np.random.default_rng(0)
x = rng.random((32 * 50, 96, 96, 3), dtype=np.float32)
y = rng.integers(0, 5, (32 * 50,))
data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat().prefetch(tf.data.AUTOTUNE)
model = keras.Sequential([
    keras.Input((96, 96, 3)),
    keras.layers.Conv2D(32, 3, activation="relu"), keras.layers.MaxPooling2D(),
    keras.layers.Conv2D(64, 3, activation="relu"), keras.layers.MaxPooling2D(),
    keras.layers.Conv2D(64, 3, activation="relu"), keras.layers.GlobalAveragePooling2D(),
    keras.layers.Dense(5),
])
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(data, steps_per_epoch=STEPS // 3, epochs=3, verbose=0)
