"""A 40-step fit of a small dense model on arrays (too short for the A/B's rounds within it); with
``--then-long``, a 2,400-step fit of the same model after it: long enough for rounds at any step time
(rounds are sized by time, so a 240-step fit of 1.16 ms steps was one step short of three, of 1.20 ms
long enough)."""

import sys

import keras
import numpy as np

rng = np.random.default_rng(0)
x = rng.random((40 * 32, 64), dtype=np.float32)
y = rng.integers(0, 10, len(x))
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x, y, batch_size=32, epochs=1, verbose=0)
if "--then-long" in sys.argv:
    model.fit(np.tile(x, (10, 1)), np.tile(y, 10), batch_size=32, epochs=6, verbose=0)
