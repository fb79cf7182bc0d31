"""Built-in jobs for ``tensorgauge demo``: the default demo and scenarios with a known cause.

Each scenario is a small Keras job (a few seconds of training on synthetic
data) that contains no tensorgauge code: what the diagnosis finds, it finds
from outside, as on a user's job.
"""

SCENARIOS = {
    "default": ("tensorgauge.scenarios.demo", "train, save, load and predict a small model"),
    "input-bound": ("tensorgauge.scenarios.input_bound", "a serial Python map starves training of input"),
    "eager": ("tensorgauge.scenarios.eager", "fit with run_eagerly=True"),
    "eager-loop": ("tensorgauge.scenarios.eager_loop", "a custom GradientTape loop without tf.function"),
    "thread-limited": ("tensorgauge.scenarios.thread_limited", "TensorFlow held to one thread on a multi-core machine"),
    "healthy": ("tensorgauge.scenarios.healthy", "a compute-bound fit with a good input pipeline"),
}
