"""A small separable-conv classifier compiled with jit_compile=True, on a CPU (the image
classification tutorial's choice): XLA is often several times slower there.

    xla_on_cpu.py [--no-jit]
"""

import sys

import keras
import numpy as np

rng = np.random.default_rng(0)
x = rng.random((32 * 20, 32, 32, 3), dtype=np.float32)  # one epoch of 20 steps: the probe has its own steps
y = rng.integers(0, 2, (32 * 20, 1))
model = keras.Sequential([
    keras.Input((32, 32, 3)),
    keras.layers.Conv2D(32, 3, strides=2, padding="same", activation="relu"),
    keras.layers.BatchNormalization(),
    keras.layers.SeparableConv2D(64, 3, padding="same", activation="relu"),
    keras.layers.BatchNormalization(),
    keras.layers.SeparableConv2D(64, 3, padding="same", activation="relu"),
    keras.layers.MaxPooling2D(3, strides=2, padding="same"),
    keras.layers.GlobalAveragePooling2D(),
    keras.layers.Dense(1),
])
model.compile(optimizer="adam", loss=keras.losses.BinaryCrossentropy(from_logits=True),
              jit_compile="--no-jit" not in sys.argv)
model.fit(x, y, batch_size=32, epochs=1, verbose=0)
