"""The standard benchmark suite, run as a job under ``tensorgauge run`` by
``tensorgauge bench``: each benchmark is a phase of its own (``bench NAME``), so
the recorder measures its cores busy and peak memory.

    python -m tensorgauge.bench.suite [--quick]

Each result goes to the monitor as a ``bench_result`` event (name, value,
unit, higher_is_better, seconds, group), so it is stored with the run; progress
is printed on stderr. Groups say what a benchmark exercises: ``numpy``
(BLAS), ``tf_ops`` (TensorFlow kernels, oneDNN), ``keras`` (a training loop),
``tf_data`` (the input pipeline), ``io`` (save and load).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import tensorgauge
from tensorgauge.hook.channel import channel
from tensorgauge.hook.protocol import Kind

QUICK = {"numpy_sizes": (1000, 2000), "tf_size": 1000, "fit_rows": 4096, "batches": (16, 128, 512),
         "data_elements": 20_000, "repeats": 3}
FULL = {"numpy_sizes": (1000, 2000, 3000), "tf_size": 2000, "fit_rows": 32768, "batches": (16, 128, 512),
        "data_elements": 200_000, "repeats": 5}


def _progress(text: str) -> None:
    print(f"tensorgauge bench: {text}", file=sys.stderr, flush=True)


def _best_seconds(fn, repeats: int) -> float:
    fn()  # warm-up: first-call costs (tracing, allocation) are not throughput
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _result(value: float, unit: str) -> str:
    """'45 ms' for a time under a second (one decimal of a second showed it as '0.0 s'); else one decimal."""
    return f"{value * 1000:,.1f} ms" if unit == "s" and value < 1 else f"{value:,.1f} {unit}"


def run(config: dict) -> dict:
    results: dict[str, dict] = {}

    def record(name, group, value, unit, seconds, higher_is_better=True):
        results[name] = {"value": value, "unit": unit, "higher_is_better": higher_is_better,
                         "seconds": round(seconds, 6), "group": group}
        channel().emit(Kind.BENCH_RESULT, name=name, **results[name])
        _progress(f"{name}: {_result(value, unit)}")

    import numpy as np

    for n in config["numpy_sizes"]:
        name = f"numpy matmul {n}"
        with tensorgauge.phase(f"bench {name}"):
            a = np.random.default_rng(0).random((n, n), dtype=np.float32)
            seconds = _best_seconds(lambda a=a: a @ a, config["repeats"])
        record(name, "numpy", 2 * n**3 / seconds / 1e9, "GFLOP/s", seconds)

    import tensorflow as tf

    n = config["tf_size"]
    name = f"tf matmul {n}"
    with tensorgauge.phase(f"bench {name}"):
        a = tf.random.stateless_uniform((n, n), seed=(1, 2))
        seconds = _best_seconds(lambda: tf.linalg.matmul(a, a).numpy(), config["repeats"])
    record(name, "tf_ops", 2 * n**3 / seconds / 1e9, "GFLOP/s", seconds)

    import keras

    rng = np.random.default_rng(0)
    x = rng.normal(size=(config["fit_rows"], 64)).astype("float32")
    y = x[:, :1] * 2.0
    for batch in config["batches"]:
        name = f"fit dense batch {batch}"
        with tensorgauge.phase(f"bench {name}"):
            model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"),
                                      keras.layers.Dense(256, activation="relu"), keras.layers.Dense(1)])
            model.compile("adam", "mse")
            model.fit(x[: batch * 4], y[: batch * 4], batch_size=batch, epochs=1, verbose=0)  # traces
            start = time.perf_counter()
            model.fit(x, y, batch_size=batch, epochs=1, verbose=0)
            seconds = time.perf_counter() - start
        record(name, "keras", len(x) / seconds, "samples/s", seconds)

    name = "tf.data map batch"
    with tensorgauge.phase(f"bench {name}"):
        count = config["data_elements"]
        data = (tf.data.Dataset.range(count).map(lambda i: tf.cast(i, tf.float32) * 2.0 + tf.sqrt(1.0 + tf.cast(i, tf.float32)),
                                                  num_parallel_calls=tf.data.AUTOTUNE)
                .batch(256).prefetch(tf.data.AUTOTUNE))
        for _ in data.take(2):
            pass
        start = time.perf_counter()
        for _ in data:
            pass
        seconds = time.perf_counter() - start
    record(name, "tf_data", count / seconds, "elements/s", seconds)

    with tempfile.TemporaryDirectory(prefix="tensorgauge-bench-") as folder:  # removed afterwards
        path = os.path.join(folder, "bench.keras")
        with tensorgauge.phase("bench save and load"):
            start = time.perf_counter()
            model.save(path)
            keras.saving.load_model(path)
            seconds = time.perf_counter() - start
    record("save and load", "io", seconds, "s", seconds, higher_is_better=False)
    return results


def main() -> None:
    _progress("importing numpy and TensorFlow")
    run(QUICK if "--quick" in sys.argv else FULL)


if __name__ == "__main__":
    main()
