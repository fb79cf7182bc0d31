"""The ~6 s job of the tool-cost comparison: a warm-up epoch, then 4 epochs of a 1024-wide dense fit
on arrays. Writes, as JSON to argv[1], the fits' wall seconds, their steps' excess over the median
step, and the excess of the steps that held a pause (over 2.5x the median), steps within an epoch
only: a tool's own pauses inside the fits show there."""

import json
import statistics
import sys
import time

import keras
import numpy as np

rng = np.random.default_rng(0)
x = rng.random((8192, 256), dtype=np.float32)
y = rng.integers(0, 10, len(x))
model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(1024, activation="relu"),
                          keras.layers.Dense(1024, activation="relu"), keras.layers.Dense(10)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
steps: list[float] = []
wall = 0.0
for epochs in (1, 4):  # a warm-up epoch, then the fit
    starts: list[list[float]] = []  # each epoch's step begins
    clock = keras.callbacks.LambdaCallback(on_epoch_begin=lambda epoch, logs, kept=starts: kept.append([]),
                                           on_train_batch_begin=lambda batch, logs, kept=starts: kept[-1].append(time.monotonic()))
    began = time.monotonic()
    model.fit(x, y, batch_size=128, epochs=epochs, verbose=0, callbacks=[clock])
    wall += time.monotonic() - began
    # Steps within an epoch only: the wait from one epoch's last step to the next's first holds tf.data
    # deleting an iterator, which waits for its autotuning thread at random (0-1.7 s a run here, bare).
    # The fit's first steps trace: left out.
    for i, epoch in enumerate(starts):
        kept = epoch[2:] if i == 0 else epoch
        steps += [b - a for a, b in zip(kept, kept[1:])]
median = statistics.median(steps)
excess = sum(steps) - median * len(steps)
paused = sum(s - median for s in steps if s > 2.5 * median)  # steps that held a pause: what it took
with open(sys.argv[1], "w") as f:
    json.dump({"fit_seconds": wall, "step_excess_seconds": excess, "pause_seconds": paused}, f)
