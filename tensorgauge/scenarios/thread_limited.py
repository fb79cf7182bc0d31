"""Thread-limited: TensorFlow held to one thread, though the machine has more CPUs."""

import tensorflow as tf

from tensorgauge.scenarios._common import arrays, dense_model

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)

if __name__ == "__main__":
    x, y = arrays(8192, 256)
    dense_model(1024, 256).fit(x, y, batch_size=256, epochs=3, verbose=0)
