"""Facts about the job's own Python, Keras and TensorFlow, sent once they have loaded.

Runs inside the job in a daemon thread started when ``import keras`` (the
backend: TensorFlow, JAX or PyTorch) or ``import tensorflow`` finishes, so it
never delays the job; nothing it calls initialises a GPU or
fixes TensorFlow's configuration (listing physical devices leaves memory
growth and visible devices settable).
"""

from __future__ import annotations

import sys

from tensorgauge.hook.channel import channel
from tensorgauge.hook.listeners import on_keras, on_tensorflow
from tensorgauge.hook.protocol import Kind


def _safe(fn, default=None):
    try:
        return fn()
    except Exception:
        return default


def tensorflow_facts() -> dict:
    import tensorflow as tf

    facts: dict = {"tensorflow_version": getattr(tf, "__version__", None)}
    build = _safe(lambda: dict(tf.sysconfig.get_build_info()), {}) or {}
    facts["tf_build"] = {k: v for k, v in build.items()
                         if k in ("is_cuda_build", "is_rocm_build", "cuda_version", "cudnn_version",
                                  "cuda_compute_capabilities")}

    def onednn():
        from tensorflow.python.util import _pywrap_util_port

        return bool(_pywrap_util_port.IsMklEnabled())

    facts["onednn_enabled"] = _safe(onednn)
    facts["devices_physical"] = _safe(
        lambda: [f"{d.device_type}:{d.name.rsplit(':', 1)[-1]}" for d in tf.config.list_physical_devices()], [])
    facts["gpus_visible"] = sum(1 for d in facts["devices_physical"] if d.startswith("GPU"))
    facts["intra_op_threads"] = _safe(tf.config.threading.get_intra_op_parallelism_threads)
    facts["inter_op_threads"] = _safe(tf.config.threading.get_inter_op_parallelism_threads)
    keras = sys.modules.get("keras")
    if keras is not None:
        facts.update(keras_facts(keras))
    return facts


BACKEND_MODULES = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch", "numpy": "numpy"}


def keras_facts(keras) -> dict:
    """Keras' version, its backend (``KERAS_BACKEND``: tensorflow, jax, torch) and the backend's version.
    Reads no device: JAX and PyTorch would claim the GPU's memory on first use."""
    backend = _safe(lambda: keras.backend.backend())
    module = sys.modules.get(BACKEND_MODULES.get(backend or "", ""))
    return {"keras_version": getattr(keras, "__version__", None), "keras_backend": backend,
            "backend_version": getattr(module, "__version__", None)}


THREAD_ENV = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS")


def python_facts() -> dict:
    import os

    facts: dict = {"python": sys.version.split()[0], "executable": sys.executable,
             "thread_env": {k: os.environ[k] for k in THREAD_ENV if k in os.environ}}
    try:
        facts["affinity_cpus"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        facts["affinity_cpus"] = os.cpu_count()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        facts["numpy_version"] = getattr(numpy, "__version__", None)

    def blas():
        from threadpoolctl import threadpool_info

        return [{k: pool.get(k) for k in ("user_api", "internal_api", "num_threads", "version",
                                          "threading_layer", "architecture")}
                for pool in threadpool_info()]

    facts["blas"] = _safe(blas, [])
    return facts


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
