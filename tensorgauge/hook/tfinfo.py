"""Facts about the job's own Python, Keras and TensorFlow, sent once they have loaded.

Runs inside the job in a daemon thread started when ``import keras`` (the
backend: TensorFlow, JAX or PyTorch) or ``import tensorflow`` finishes, so it
never delays the job; nothing it calls initialises a GPU or
fixes TensorFlow's configuration (listing physical devices leaves memory
growth and visible devices settable).
"""

from __future__ import annotations

from tensorgauge.hook.channel import channel
from tensorgauge.hook.facts import keras_facts, python_facts, tensorflow_facts
from tensorgauge.hook.facts import safe as _safe
from tensorgauge.hook.listeners import on_keras, on_tensorflow
from tensorgauge.hook.protocol import Kind


def send_facts(keras=None) -> None:
    """Python's facts, and TensorFlow's (after ``import tensorflow``) or Keras' (after ``import keras``)."""
    facts = python_facts()
    facts.update((_safe(lambda: keras_facts(keras), {}) if keras is not None else _safe(tensorflow_facts, {})) or {})
    channel().emit(Kind.ENV, facts=facts)


def _later(*args) -> None:
    import threading

    # ~20 ms (threadpoolctl inspects every loaded library): off the job's path.
    threading.Thread(target=send_facts, args=args, name="tensorgauge-facts", daemon=True).start()


@on_tensorflow
def _send_facts_later(tf) -> None:
    _later()


@on_keras
def _send_keras_facts_later(keras) -> None:
    if getattr(keras, "__name__", "") == "keras":  # tf_keras is TensorFlow's: its facts come with TensorFlow's
        _later(keras)
