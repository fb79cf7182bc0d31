"""Keras' PyTorch custom-loop guide in small: a Keras model trained by a torch.optim optimizer over
a DataLoader, with a validation loop (model(x, training=False)) after each epoch, on synthetic data.

argv: OUT.json, where the job writes the steps it ran per epoch and the validation batches."""

import json
import os
import sys

os.environ["KERAS_BACKEND"] = "torch"

import keras  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

EPOCHS, BATCH = 2, 32
rng = np.random.default_rng(0)
x, y = rng.random((1600, 784), dtype=np.float32), rng.integers(0, 10, 1600)
train = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.from_numpy(x[:1280]), torch.from_numpy(y[:1280])),
                                    batch_size=BATCH, shuffle=True)
val = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.from_numpy(x[1280:]), torch.from_numpy(y[1280:])),
                                  batch_size=BATCH)
inputs = keras.Input(shape=(784,))
hidden = keras.layers.Dense(64, activation="relu")(keras.layers.Dense(64, activation="relu")(inputs))
model = keras.Model(inputs, keras.layers.Dense(10)(hidden))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = torch.nn.CrossEntropyLoss()
steps, validated = [], 0
for _ in range(EPOCHS):
    count = 0
    for inputs_, targets in train:
        loss = loss_fn(model(inputs_), targets)
        model.zero_grad()
        loss.backward()
        optimizer.step()
        count += 1
    steps.append(count)
    for x_val, _ in val:
        model(x_val, training=False)
        validated += 1
with open(sys.argv[1], "w") as f:
    json.dump({"steps": steps, "validation_batches": validated}, f)
