"""One worker of a 2-worker MultiWorkerMirroredStrategy job on localhost (TF_CONFIG set by the
caller). The worker whose index is in $SLOW_WORKER reads its input through a 50 ms sleep per batch."""

import os

import numpy as np
import tensorflow as tf
import tf_keras as keras  # Keras 3 cannot fit under MultiWorkerMirroredStrategy; legacy Keras 2 can
from tensorflow.python.data.experimental.ops import testing as tf_data_testing

strategy = tf.distribute.MultiWorkerMirroredStrategy()
index = int(tf.distribute.cluster_resolver.TFConfigClusterResolver().task_id)
slow = str(index) == os.environ.get("SLOW_WORKER")


x = np.random.default_rng(index).normal(size=(4096, 32)).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(64)
if slow:
    # 50 ms a batch in tf.data's own sleep stage: no Python in the pipeline (a py_function here, under the
    # profiler window of --diagnose, crashed the worker with "double free or corruption" about one run in five).
    data = data.apply(tf_data_testing.sleep(50_000))
data = data.repeat()
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
data = data.with_options(options)
with strategy.scope():
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile("adam", "mse")
model.fit(data, epochs=2, steps_per_epoch=40, verbose=0)
