"""The shape of the Keras weather time-series example: windows of 120 steps of 7 float64
features from timeseries_dataset_from_array (the spec leaves batch and length open: (None,
None, 7)), a map, prefetch, an LSTM. Writes a real batch's shape and, unless --shape-only, the
compute-only step time measured here, A/B style: fit on one real batch, cached and repeated
(ds.take(1).cache().repeat()).

    weather_like.py TRUTH_JSON [--shape-only]
"""

import json
import statistics
import sys
import time

import keras
import numpy as np
import tensorflow as tf

rng = np.random.default_rng(0)
series = rng.normal(size=(12_000, 7))
ds = keras.utils.timeseries_dataset_from_array(series[:-120], series[120:, 1], sequence_length=120, batch_size=256)
ds = ds.map(lambda x, y: (x * 1.0, y)).prefetch(tf.data.AUTOTUNE)
model = keras.Sequential([keras.Input((None, 7)), keras.layers.LSTM(32), keras.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(ds, epochs=3, verbose=0)  # 138 steps: room for the A/B's rounds and those run in place of disturbed ones

x, _ = next(iter(ds))
truth = {"batch_shape": list(x.shape)}
if "--shape-only" not in sys.argv:
    # A/B: the same fit, its input one real batch cached and repeated, each step timed by its begin.
    starts = []
    clock = keras.callbacks.LambdaCallback(on_train_batch_begin=lambda batch, logs: starts.append(time.perf_counter()))
    model.fit(ds.take(1).cache().repeat(), steps_per_epoch=40, epochs=1, verbose=0, callbacks=[clock])
    truth["compute_only_step_seconds"] = statistics.median([b - a for a, b in zip(starts, starts[1:])][5:])
with open(sys.argv[1], "w") as f:
    json.dump(truth, f)
