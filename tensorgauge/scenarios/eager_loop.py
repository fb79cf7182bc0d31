"""Eager loop: a custom training loop (GradientTape) without tf.function."""

from tensorgauge.scenarios._common import arrays, dense_model

if __name__ == "__main__":
    import tensorflow as tf

    x, y = arrays(3072, 64)
    model = dense_model(256, 64)
    optimizer, loss_fn = model.optimizer, tf.keras.losses.MeanSquaredError()
    batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
    for _ in range(2):
        for xb, yb in batches:
            with tf.GradientTape() as tape:
                loss = loss_fn(yb, model(xb, training=True))
            optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
