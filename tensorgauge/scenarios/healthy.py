"""Healthy: a compute-bound fit with a batched, prefetched tf.data pipeline."""

import tensorflow as tf

from tensorgauge.scenarios._common import arrays, dense_model

if __name__ == "__main__":
    x, y = arrays(8192, 256)
    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1024, seed=0).batch(256).prefetch(tf.data.AUTOTUNE)
    dense_model(1024, 256).fit(data, epochs=4, verbose=0)
