"""Where a model's variables live, sent after ``fit`` and after a model is loaded; and which
devices the Keras backend sees, sent when a fit begins.

One ``placement`` event per call: bytes and variable counts per device, named
alike on every backend (``CPU:0``, ``GPU:0``). Keras 3 variables keep the
backend's tensor on ``.value`` (a ``tf.Variable``, a ``jax.Array``, a
``torch.nn.Parameter``); tf_keras variables are ``tf.Variable`` themselves.
"""

from __future__ import annotations

import sys

from tensorgauge.hook.channel import channel
from tensorgauge.hook.listeners import FitCall, FitListener, on_fit
from tensorgauge.hook.protocol import Kind

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


def by_device(variables) -> dict[str, dict[str, int]]:
    """{device: {"bytes": n, "variables": n}} over distinct variables."""
    devices: dict[str, dict[str, int]] = {}
    seen = set()
    for variable in variables:
        if id(variable) in seen:
            continue
        seen.add(id(variable))
        entry = devices.setdefault(variable_device(variable), {"bytes": 0, "variables": 0})
        entry["bytes"] += variable_bytes(variable)
        entry["variables"] += 1
    return devices


def variables_of(obj) -> list:
    """A model's variables; for a loaded SavedModel (no ``.variables``), every variable it tracks."""
    variables = getattr(obj, "variables", None)
    if variables is not None and not callable(variables):
        return list(variables)
    tf = sys.modules.get("tensorflow")
    if tf is None or obj is None:
        return []
    return [t for t in tf.train.TrackableView(obj).descendants() if isinstance(t, tf.Variable)]


def send(obj, after: str) -> None:
    """Report where ``obj``'s variables live (a Keras model or a loaded SavedModel); never raises."""
    try:
        variables = variables_of(obj)
        if variables:
            channel().emit(Kind.PLACEMENT, after=after, devices=by_device(variables))
    except Exception:
        pass


def backend_device_facts(backend: str) -> dict:
    """The devices Keras' JAX or PyTorch backend sees ('CPU:0', 'GPU:0', ...), its GPUs, and the CUDA
    PyTorch was built with (None: a CPU-only wheel). Asked when a fit starts, as the backend is about
    to take its devices anyway (JAX claims most of a GPU's memory the first time it is asked)."""
    if backend == "jax":
        import jax

        devices = [device_name(d) for d in jax.devices()]
        cuda = None
    elif backend == "torch":
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        devices = ["CPU:0"] + [f"GPU:{i}" for i in range(gpus)]
        cuda = torch.version.cuda
    else:
        return {}
    return {"backend_devices": devices, "backend_gpus": sum(1 for d in devices if d.startswith("GPU")),
            "backend_cuda": cuda}


_devices_sent = False


def send_backend_devices(model) -> None:
    """Once per process, at the first fit on a JAX or PyTorch backend; never raises."""
    global _devices_sent
    if _devices_sent:
        return
    _devices_sent = True
    try:
        from tensorgauge.hook.diagnose import keras_backend

        facts = backend_device_facts(keras_backend(model))
        if facts:
            channel().emit(Kind.ENV, facts=facts)
    except Exception:
        pass


class _AfterFit(FitListener):
    def on_train_end(self, model) -> None:
        send(model, "fit")


@on_fit
def _placement_listener(call: FitCall) -> FitListener:
    send_backend_devices(call.model)
    return _AfterFit()
