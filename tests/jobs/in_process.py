"""Records itself with tensorgauge.monitor() (no CLI), with an explicit Keras callback."""

import sys

import keras
import numpy as np

import tensorgauge

model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1)])
model.compile("sgd", "mse")
x = np.zeros((320, 8), "float32")
with tensorgauge.monitor(name=sys.argv[1], store=sys.argv[2]) as run:
    with tensorgauge.phase("prepare"):
        y = x.sum(axis=1)
    model.fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=[tensorgauge.keras.Callback()])
    model.predict(x, verbose=0)
print(run.run_id)
