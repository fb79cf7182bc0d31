"""Exercises every automatic phase and records the truth: when each call began
and ended (CLOCK_MONOTONIC) and the CPU it used. Argument: where to write it."""

import json
import os
import sys
import tempfile
import time

truth = {"calls": []}


def timed(label, fn, *args, **kwargs):
    t0, c0 = time.monotonic(), time.process_time()
    result = fn(*args, **kwargs)
    truth["calls"].append({"label": label, "start": t0, "end": time.monotonic(),
                           "cpu": time.process_time() - c0})
    return result


t_import = time.monotonic()
import numpy as np  # noqa: E402

tf = timed("import", __import__, "tensorflow")
import keras  # noqa: E402

import tensorgauge  # noqa: E402

rng = np.random.default_rng(0)
x = rng.normal(size=(4096, 32)).astype("float32")
y = (x[:, 0] > 0).astype("float32")
model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(256, activation="relu"),
                          keras.layers.Dense(1, activation="sigmoid")])
model.compile("adam", "binary_crossentropy")
timed("fit", model.fit, x, y, batch_size=64, epochs=2, validation_split=0.25, verbose=0)
timed("evaluate", model.evaluate, x, y, batch_size=256, verbose=0)
timed("predict", model.predict, x, batch_size=512, verbose=0)

folder = tempfile.mkdtemp()
keras_path = os.path.join(folder, "m.keras")
timed("save", model.save, keras_path)
timed("save_weights", model.save_weights, os.path.join(folder, "m.weights.h5"))
restored = timed("load", keras.models.load_model, keras_path)
timed("load_weights", restored.load_weights, os.path.join(folder, "m.weights.h5"))


class Doubler(tf.Module):
    def __init__(self):
        self.w = tf.Variable(2.0)

    @tf.function(input_signature=[tf.TensorSpec([], tf.float32)])
    def __call__(self, v):
        return v * self.w


saved_dir = os.path.join(folder, "saved")
timed("saved_model.save", tf.saved_model.save, Doubler(), saved_dir)
loaded = timed("saved_model.load", tf.saved_model.load, saved_dir)
checkpoint = tf.train.Checkpoint(w=tf.Variable(1.0))
prefix = timed("checkpoint.save", checkpoint.save, os.path.join(folder, "ckpt"))
timed("checkpoint.restore", checkpoint.restore, prefix)

# A custom loop marked by hand.
w = tf.Variable(tf.zeros((32, 1)))
opt = keras.optimizers.SGD(0.01)


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((tf.matmul(xb, w)[:, 0] - yb) ** 2)
    opt.apply_gradients([(tape.gradient(loss, w), w)])
    return loss


def custom_loop():
    with tensorgauge.phase("custom loop"):
        for i in range(0, 4096, 128):
            train_step(x[i:i + 128], y[i:i + 128])
            tensorgauge.step()


timed("custom loop", custom_loop)
truth["result"] = float(loaded(tf.constant(3.0)))
truth["process_cpu_total"] = time.process_time()
with open(sys.argv[1], "w") as f:
    json.dump(truth, f)
