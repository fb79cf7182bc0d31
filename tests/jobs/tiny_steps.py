"""A fit whose steps are tiny (a 32-wide dense model, batch 16: about a millisecond), then, A/B style
and without the tool's help, the same fit compiled with steps_per_execution=32. Writes to argv[1] the
median step of each (an epoch's time over its steps) and the model's steps_per_execution after the
first fit (the tool's trial must have put it back). ``--no-ab``: the first fit only."""

import json
import statistics
import sys
import time

import keras
import numpy as np

rng = np.random.default_rng(0)
x = rng.random((16 * 300, 32), dtype=np.float32)
y = rng.integers(0, 4, 16 * 300)


def step_seconds(per_execution: int) -> tuple[float, int]:
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(4)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  steps_per_execution=per_execution)
    starts: list[float] = []
    clock = keras.callbacks.LambdaCallback(on_epoch_begin=lambda epoch, logs: starts.append(time.perf_counter()))
    model.fit(x, y, batch_size=16, epochs=4, verbose=0, callbacks=[clock])
    starts.append(time.perf_counter())
    epochs = [b - a for a, b in zip(starts[1:], starts[2:])]  # the first epoch traces: left out
    return statistics.median(epochs) / 300, model.steps_per_execution


single, after = step_seconds(1)
multi, _ = step_seconds(32) if "--no-ab" not in sys.argv else (None, None)
with open(sys.argv[1], "w") as f:
    json.dump({"step_seconds": single, "spe32_step_seconds": multi, "steps_per_execution_after": after}, f)
