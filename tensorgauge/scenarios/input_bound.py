"""Input-bound: each element goes through a slow Python function, serially, no prefetch.

(tf.data would otherwise fuse map and batch and run the map on background
threads that compete with training for the cores.)

``--ab [ROUNDS]`` measures the same job independently instead: compute-only steps on
one cached batch, and input-only iteration of the pipeline, the median of ROUNDS rounds (JSON on stdout).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

BATCH, STEPS, WIDTH = 64, 40, 512


def pipeline():
    import numpy as np
    import tensorflow as tf

    from tensorgauge.scenarios._common import arrays

    x, y = arrays(BATCH * STEPS, 64)

    def slow(row):  # Python work per element: ~1 ms
        time.sleep(0.001)
        return row

    def load(features, target):
        features = tf.numpy_function(lambda r: slow(np.asarray(r)), [features], tf.float32)
        features.set_shape((64,))
        return features, target

    # Truly serial: unfused, so the map runs inside each IteratorGetNext and nowhere else.
    options = tf.data.Options()
    options.experimental_optimization.map_and_batch_fusion = False
    return tf.data.Dataset.from_tensor_slices((x, y)).map(load).batch(BATCH).with_options(options)


def train() -> None:
    from tensorgauge.scenarios._common import dense_model

    dense_model(WIDTH, 64).fit(pipeline(), epochs=2, verbose=0)


def ab(rounds: int = 1) -> dict:
    """The job's own A/B: per round, the median compute-only step (one cached batch) and the median
    input-only batch (the pipeline iterated alone); the median of each over ``rounds`` rounds."""
    import keras

    from tensorgauge.scenarios._common import dense_model

    class Steps(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            marks.append(time.monotonic())

    dataset = pipeline()
    one_batch = dataset.take(1).cache().repeat()
    model = dense_model(WIDTH, 64)
    compute, inputs = [], []
    for _ in range(rounds):
        marks: list[float] = []
        model.fit(one_batch, steps_per_epoch=60, epochs=1, verbose=0, callbacks=[Steps()])
        compute.append(statistics.median(b - a for a, b in zip(marks[10:], marks[11:])))  # 50 steps after warm-up
        times, last = [], time.monotonic()
        for _ in dataset:
            now = time.monotonic()
            times.append(now - last)
            last = now
        inputs.append(statistics.median(times[2:]))
    return {"compute_only_step_seconds": statistics.median(compute), "input_only_batch_seconds": statistics.median(inputs)}


if __name__ == "__main__":
    if "--ab" in sys.argv:  # --ab [ROUNDS]
        after = sys.argv[sys.argv.index("--ab") + 1:]
        print(json.dumps(ab(int(after[0]) if after else 1)))
    else:
        train()
