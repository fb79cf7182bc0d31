"""A fit whose largest holder of memory is a shuffle buffer over the whole (mapped) data set.

argv: OUT.json [oom|hog]. At the second epoch's fourth batch it writes an independent count of the
model's and the optimizer's variables (``sum(v.numpy().nbytes)``) to OUT.json; then ``oom`` raises
TensorFlow's ResourceExhaustedError there, ``hog`` allocates until something stops it.
"""

import json
import sys

import keras
import numpy as np
import tensorflow as tf

out, mode = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "")
images = np.random.randint(0, 255, size=(10_000, 64, 64), dtype=np.uint8)  # 41 MB of arrays
labels = np.random.randint(0, 10, size=(10_000,)).astype("int32")
dataset = (tf.data.Dataset.from_tensor_slices((images, labels))
           .map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, y))  # 16 KiB an element from here on
           .shuffle(len(images))  # holds the whole mapped data set: 164 MB
           .batch(64))
model = keras.Sequential([keras.Input((64, 64)), keras.layers.Flatten(), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(10)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))


class AtEpoch2(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if self.epoch == 1 and batch == 3:
            with open(out, "w") as f:
                json.dump({"weights": int(sum(v.numpy().nbytes for v in self.model.weights)),
                           "optimizer": int(sum(v.numpy().nbytes for v in self.model.optimizer.variables))}, f)
            if mode == "oom":
                raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor (the test job)")
            if mode == "hog":
                held = []
                while True:
                    held.append(np.ones(16 << 20, dtype=np.uint8))

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch


model.fit(dataset, epochs=2, verbose=0, callbacks=[AtEpoch2()])
