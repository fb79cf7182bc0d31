"""A CPU-bound Keras training job that times every step and writes them as JSON.

    python fit_steps.py OUT CALLS [alternate]

Runs CALLS one-epoch ``fit`` calls (32 steps each). Steps are timed from one
``on_train_batch_begin`` to the next (what tensorgauge's hook does too, so
Keras keeps its asynchronous batch-end dispatch). With ``alternate`` (under
``tensorgauge run``), every other call bypasses tensorgauge's patch by calling
the original ``fit``: the hook's cost is then measured within one process.
"""

import json
import sys
import time

import keras
import numpy as np

out, calls = sys.argv[1], int(sys.argv[2])
alternate = len(sys.argv) > 3 and sys.argv[3] == "alternate"


class StepTimer(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.last = None

    def on_train_batch_begin(self, batch, logs=None):
        now = time.monotonic()
        if self.last is not None:
            steps.append({"t": self.last, "seconds": now - self.last, "call": call, "hooked": hooked})
        self.last = now


steps: list[dict] = []
rng = np.random.default_rng(0)
x = rng.normal(size=(4096, 256)).astype("float32")
y = rng.normal(size=(4096, 1)).astype("float32")
model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(1024, activation="relu"),
                          keras.layers.Dense(1024, activation="relu"), keras.layers.Dense(1)])
model.compile("adam", "mse")
patched_fit = type(model).fit
original_fit = getattr(patched_fit, "__tensorgauge_wrapped__", None)
if alternate and original_fit is None:
    sys.exit("alternate needs the job to run under 'tensorgauge run' (no patched fit found)")
model.fit(x[:256], y[:256], batch_size=128, epochs=1, verbose=0)  # trace before timing
timer = StepTimer()
for call in range(calls):
    hooked = not (alternate and call % 2 == 1)
    fit = patched_fit if hooked else original_fit
    fit(model, x, y, batch_size=128, epochs=1, verbose=0, callbacks=[timer])
with open(out, "w") as f:
    json.dump(steps, f)
