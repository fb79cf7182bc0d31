"""What the job's objects and interpreter say about themselves, read the same way in the job (by the
hook's features) and by the monitor's commands (``tensorgauge env``, ``devices``): device names alike on
every backend, a model's variables and their bytes, Python's, TensorFlow's and Keras' facts, the
process's RSS peak over a block of code.

Readers only: importing this module registers no listener and imports no framework (each function
imports what it reads, when called).
"""

from __future__ import annotations

import sys
import threading

from tensorgauge.hook.channel import process_rss_bytes

PEAK_EVERY_SECONDS = 0.002  # PeakRss's reading interval where the kernel's high-water mark cannot be reset

# Device kinds as the backends name them -> one name: TensorFlow "GPU", PyTorch "cuda", JAX "gpu".
DEVICE_KINDS = {"cpu": "CPU", "gpu": "GPU", "cuda": "GPU", "rocm": "GPU", "tpu": "TPU", "mps": "MPS",
                "xla_gpu": "GPU", "xla_cpu": "CPU"}


def short_device(device: str | None) -> str:
    """'/job:localhost/replica:0/task:0/device:GPU:0' -> 'GPU:0'; PyTorch's 'cuda:1' -> 'GPU:1',
    'cpu' -> 'CPU:0'."""
    if not device:
        return "unknown"
    tail = device.rsplit("device:", 1)[-1]
    kind, _, index = tail.partition(":")
    if kind.lower() in DEVICE_KINDS and (not index or index.isdigit()):
        return f"{DEVICE_KINDS[kind.lower()]}:{index or 0}"
    return tail.upper() if tail.count(":") == 1 else tail


def device_name(device) -> str:
    """A device as a backend gives it (a string, a ``torch.device``, a JAX ``Device``) -> 'GPU:0'."""
    if device is None:
        return "unknown"
    if isinstance(device, str):
        return short_device(device)
    platform = getattr(device, "platform", None)  # a JAX Device: platform 'cpu' / 'gpu', id
    if isinstance(platform, str):
        return f"{DEVICE_KINDS.get(platform.lower(), platform.upper())}:{getattr(device, 'id', 0) or 0}"
    kind = getattr(device, "type", None)  # a torch.device: type 'cpu' / 'cuda', index
    if isinstance(kind, str):
        return f"{DEVICE_KINDS.get(kind.lower(), kind.upper())}:{getattr(device, 'index', 0) or 0}"
    return short_device(str(device))


def variable_device(variable) -> str:
    value = getattr(variable, "value", None)
    if value is not None and not callable(value):
        devices = getattr(value, "devices", None)  # a JAX array: the set of devices holding it
        if callable(devices):
            try:
                return device_name(sorted(devices(), key=str)[0])
            except Exception:
                pass
        device = getattr(value, "device", None)
        if device is not None:
            return device_name(device)
    return device_name(getattr(variable, "device", None))


def variable_bytes(variable) -> int:
    try:
        count = 1
        for dim in variable.shape:
            count *= int(dim)
        dtype = variable.dtype
        size = getattr(dtype, "size", None)
        if size is None:
            import numpy as np

            size = np.dtype(str(dtype)).itemsize
        return count * int(size)
    except Exception:
        return 0


def variables_of(obj) -> list:
    """A model's variables; for a loaded SavedModel (no ``.variables``), every variable it tracks."""
    variables = getattr(obj, "variables", None)
    if variables is not None and not callable(variables):
        return list(variables)
    tf = sys.modules.get("tensorflow")
    if tf is None or obj is None:
        return []
    return [t for t in tf.train.TrackableView(obj).descendants() if isinstance(t, tf.Variable)]


def safe(fn, default=None):
    """``fn()``, or ``default`` where it raises (a fact a build does not have)."""
    try:
        return fn()
    except Exception:
        return default


def tensorflow_facts() -> dict:
    import tensorflow as tf

    facts: dict = {"tensorflow_version": getattr(tf, "__version__", None)}
    build = safe(lambda: dict(tf.sysconfig.get_build_info()), {}) or {}
    facts["tf_build"] = {k: v for k, v in build.items()
                         if k in ("is_cuda_build", "is_rocm_build", "cuda_version", "cudnn_version",
                                  "cuda_compute_capabilities")}

    def onednn():
        from tensorflow.python.util import _pywrap_util_port

        return bool(_pywrap_util_port.IsMklEnabled())

    facts["onednn_enabled"] = safe(onednn)
    facts["devices_physical"] = safe(
        lambda: [f"{d.device_type}:{d.name.rsplit(':', 1)[-1]}" for d in tf.config.list_physical_devices()], [])
    facts["gpus_visible"] = sum(1 for d in facts["devices_physical"] if d.startswith("GPU"))
    facts["intra_op_threads"] = safe(tf.config.threading.get_intra_op_parallelism_threads)
    facts["inter_op_threads"] = safe(tf.config.threading.get_inter_op_parallelism_threads)
    keras = sys.modules.get("keras")
    if keras is not None:
        facts.update(keras_facts(keras))
    return facts


BACKEND_MODULES = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch", "numpy": "numpy"}


def keras_facts(keras) -> dict:
    """Keras' version, its backend (``KERAS_BACKEND``: tensorflow, jax, torch) and the backend's version.
    Reads no device: JAX and PyTorch would claim the GPU's memory on first use."""
    backend = safe(lambda: keras.backend.backend())
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

    facts["blas"] = safe(blas, [])
    return facts


class PeakRss:
    """The process's RSS peak while the block runs: the kernel's high-water mark (VmHWM), reset at the
    start by writing 5 to /proc/self/clear_refs; where that is refused, a thread reading RSS every 2 ms
    (which a C call holding the GIL can hide an allocation from)."""

    def __init__(self):
        self.peak = process_rss_bytes() or 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _watch(self) -> None:
        while not self._stop.wait(PEAK_EVERY_SECONDS):
            self.peak = max(self.peak, process_rss_bytes() or 0)

    def __enter__(self) -> PeakRss:
        if not _reset_high_water():
            self._thread = threading.Thread(target=self._watch, name="tensorgauge-peak-rss", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        else:
            self.peak = max(self.peak, high_water_bytes() or 0)
        self.peak = max(self.peak, process_rss_bytes() or 0)


def _reset_high_water() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return high_water_bytes() is not None
    except OSError:
        return False


def high_water_bytes() -> int | None:
    """VmHWM: the process's RSS peak since it started or since the last reset."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
