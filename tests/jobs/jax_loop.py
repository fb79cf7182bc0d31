"""A custom training loop on Keras' JAX backend, as in Keras' guide "Writing a training loop from
scratch in JAX": a ``@jax.jit`` train step calling ``optimizer.stateless_apply``, fed by a tf.data
pipeline (its last batch partial, so the step compiles twice an epoch), then a ``@jax.jit``
evaluation loop. Writes the steps it ran as JSON to argv[1]."""

import json
import os
import sys

os.environ["KERAS_BACKEND"] = "jax"

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

EPOCHS, BATCH = 2, 32
rng = np.random.default_rng(0)
x = rng.random((BATCH * 60 + 8, 64), dtype=np.float32)
y = keras.utils.to_categorical(rng.integers(0, 10, len(x)), 10)
train = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256).batch(BATCH)
val = tf.data.Dataset.from_tensor_slices((x[:BATCH * 10], y[:BATCH * 10])).batch(BATCH)

inputs = keras.Input((64,))
model = keras.Model(inputs, keras.layers.Dense(10)(keras.layers.Dense(64, activation="relu")(inputs)))
loss_fn = keras.losses.CategoricalCrossentropy(from_logits=True)
optimizer = keras.optimizers.Adam(1e-3)
optimizer.build(model.trainable_variables)


def compute_loss(trainable, non_trainable, x, y):
    y_pred, non_trainable = model.stateless_call(trainable, non_trainable, x)
    return loss_fn(y, y_pred), non_trainable


grad_fn = jax.value_and_grad(compute_loss, has_aux=True)


@jax.jit
def train_step(state, data):
    trainable, non_trainable, optimizer_variables = state
    (loss, non_trainable), grads = grad_fn(trainable, non_trainable, *data)
    trainable, optimizer_variables = optimizer.stateless_apply(optimizer_variables, grads, trainable)
    return loss, (trainable, non_trainable, optimizer_variables)


@jax.jit
def eval_step(state, data):
    trainable, non_trainable = state
    y_pred, _ = model.stateless_call(trainable, non_trainable, data[0])
    return loss_fn(data[1], y_pred)


state = ([v.value for v in model.trainable_variables], [v.value for v in model.non_trainable_variables],
         [v.value for v in optimizer.variables])
steps = 0
for _ in range(EPOCHS):
    for batch in train:
        loss, state = train_step(state, (batch[0].numpy(), batch[1].numpy()))
        steps += 1
float(loss)
evaluated = 0
for batch in val:
    float(eval_step(state[:2], (batch[0].numpy(), batch[1].numpy())))
    evaluated += 1
with open(sys.argv[1], "w") as f:
    json.dump({"steps": steps, "eval_steps": evaluated, "traces_per_epoch": 2}, f)
