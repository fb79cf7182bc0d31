"""Healthy: a compute-bound fit with a batched, prefetched tf.data pipeline."""

import tensorflow as tf

from tensorgauge.scenarios._common import arrays, dense_model

if __name__ == "__main__":
    x, y = arrays(8192, 256)
    # Autotuning off, as `stalls` advises: deleting an epoch's iterator waits for its autotuning thread to
    # wake, and on a busy machine those pauses as epochs start passed a second (2 of 4, 2.3 s of a 9 s fit).
    options = tf.data.Options()
    options.autotune.enabled = False
    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1024, seed=0).batch(256).prefetch(2)
    data = data.with_options(options)
    dense_model(1024, 256).fit(data, epochs=4, verbose=0)
