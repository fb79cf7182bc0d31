"""Where a model's variables live, sent after ``fit`` and after a model is loaded; and which
devices the Keras backend sees, sent when a fit begins.

One ``placement`` event per call: bytes and variable counts per device, named
alike on every backend (``CPU:0``, ``GPU:0``). Keras 3 variables keep the
backend's tensor on ``.value`` (a ``tf.Variable``, a ``jax.Array``, a
``torch.nn.Parameter``); tf_keras variables are ``tf.Variable`` themselves.
"""

from __future__ import annotations

from tensorgauge.hook.channel import channel
from tensorgauge.hook.facts import device_name, variable_bytes, variable_device, variables_of
from tensorgauge.hook.listeners import FitCall, FitListener, on_fit
from tensorgauge.hook.protocol import Kind


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
