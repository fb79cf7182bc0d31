"""Facts about the job's own Python and TensorFlow, sent once TF has loaded.

Runs inside the job in a daemon thread started when ``import tensorflow``
finishes, so it never delays the job; nothing it calls initialises a GPU or
fixes TensorFlow's configuration (listing physical devices leaves memory
growth and visible devices settable).
"""

from __future__ import annotations

import sys

from tensorgauge.hook.channel import channel
from tensorgauge.hook.listeners import on_tensorflow
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
        facts["keras_version"] = getattr(keras, "__version__", None)
    return facts


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


def send_facts() -> None:
    facts = python_facts()
    facts.update(_safe(tensorflow_facts, {}) or {})
    channel().emit(Kind.ENV, facts=facts)


@on_tensorflow
def _send_facts_later(tf) -> None:
    import threading

    # ~20 ms (threadpoolctl inspects every loaded library): off the job's path.
    threading.Thread(target=send_facts, name="tensorgauge-facts", daemon=True).start()
