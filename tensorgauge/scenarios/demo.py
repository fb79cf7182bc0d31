"""The demo job: train a small Keras model on synthetic data, save, load, predict.

About 20 s on 2 cores. Run it under the monitor with ``tensorgauge demo``;
it contains no tensorgauge code: the phases are found by the hook.
"""

from __future__ import annotations

import os
import sys
import tempfile


def main(epochs: int | None = None) -> int:
    epochs = epochs or int(os.environ.get("TENSORGAUGE_DEMO_EPOCHS", "4"))
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.normal(size=(20_000, 64)).astype("float32")
    y = (x[:, :8].sum(axis=1) > 0).astype("float32")
    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(4096, seed=0).batch(64).prefetch(tf.data.AUTOTUNE)

    model = tf.keras.Sequential([
        tf.keras.Input(shape=(64,)),
        tf.keras.layers.Dense(512, activation="relu"),
        tf.keras.layers.Dense(512, activation="relu"),
        tf.keras.layers.Dense(1, activation="sigmoid"),
    ])
    model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
    model.fit(data, epochs=epochs, validation_data=(x[:2000], y[:2000]), verbose=2)

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "demo.keras")
        model.save(path)
        restored = tf.keras.models.load_model(path)
        predictions = restored.predict(x, batch_size=256, verbose=0)
    print(f"demo: mean prediction {float(predictions.mean()):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
