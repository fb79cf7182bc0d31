"""Where a model's variables live, sent after ``fit`` and after a model is loaded.

One ``placement`` event per call: bytes and variable counts per device (the
short device name, e.g. ``GPU:0``). Keras 3 variables keep the device on
``.value``; tf.Variable and tf_keras variables on ``.device``.
"""

from __future__ import annotations

from tensorgauge.hook.channel import channel
from tensorgauge.hook.listeners import FitCall, FitListener, on_fit
from tensorgauge.hook.protocol import Kind


def short_device(device: str | None) -> str:
    """'/job:localhost/replica:0/task:0/device:GPU:0' -> 'GPU:0'."""
    if not device:
        return "unknown"
    tail = device.rsplit("device:", 1)[-1]
    return tail.upper() if tail.count(":") == 1 else tail


def variable_device(variable) -> str:
    value = getattr(variable, "value", None)
    device = getattr(value, "device", None) if value is not None and not callable(value) else None
    return short_device(device or getattr(variable, "device", None))


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
    import sys

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


class _AfterFit(FitListener):
    def on_train_end(self, model) -> None:
        send(model, "fit")


@on_fit
def _placement_listener(call: FitCall) -> FitListener:
    return _AfterFit()
