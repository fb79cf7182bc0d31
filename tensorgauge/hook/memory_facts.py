"""What holds the job's memory, counted where it can be counted exactly, sent as
``memory_facts`` events; and the exception that ended the job, as a ``job_error`` event.

A fit sends its facts at its third batch (the first two built the optimizer's slots
and traced the step): the bytes of the model's weights (by dtype and device) and of
the optimizer's variables, the arrays it was handed, and — where a GPU is used —
what the framework's allocator holds. The event's own ``rss`` is the state before
the steps that follow: the analysis measures the steps' working memory as the rise
over it. A fit shorter than that sends them as it ends. Standard library only.
"""

from __future__ import annotations

import sys
from typing import Any

from tensorgauge.hook.channel import channel
from tensorgauge.hook.dataset_facts import nbytes
from tensorgauge.hook.facts import variable_bytes, variable_device
from tensorgauge.hook.listeners import FitCall, FitListener, on_fit
from tensorgauge.hook.protocol import Kind
from tensorgauge.hook.wrapping import wrap_once

FACTS_AT_BATCH = 2  # the batch (from 0) before which a fit's facts are sent


def variables_bytes(variables) -> tuple[int, dict[str, int], dict[str, int]]:
    """(bytes, bytes by dtype, bytes by device) of distinct variables."""
    total, dtypes, devices = 0, dict[str, int](), dict[str, int]()
    seen: set[int] = set()
    for variable in variables or ():
        if id(variable) in seen:
            continue
        seen.add(id(variable))
        size = variable_bytes(variable)
        total += size
        dtype = str(getattr(getattr(variable, "dtype", None), "name", None) or getattr(variable, "dtype", "?"))
        dtypes[dtype] = dtypes.get(dtype, 0) + size
        device = variable_device(variable)
        devices[device] = devices.get(device, 0) + size
    return total, dtypes, devices


def optimizer_variables(model) -> list:
    """The optimizer's variables (slots, step counter, learning rate): Keras 3 has a property,
    tf_keras' legacy optimizers a method."""
    optimizer = getattr(model, "optimizer", None)
    variables = getattr(optimizer, "variables", None) if optimizer is not None else None
    if callable(variables):
        variables = variables()
    return list(variables or [])


def gpu_allocators(backend: str) -> list[dict]:
    """What the framework's GPU allocator holds now and at its peak, per GPU (empty without one)."""
    out: list[dict] = []
    try:
        if backend == "torch":
            torch = sys.modules.get("torch")
            if torch is not None and torch.cuda.is_available():
                for i in range(torch.cuda.device_count()):
                    out.append({"device": f"GPU:{i}", "bytes_in_use": int(torch.cuda.memory_allocated(i)),
                                "peak_bytes": int(torch.cuda.max_memory_allocated(i))})
        elif backend == "jax":
            jax = sys.modules.get("jax")
            for device in jax.devices() if jax is not None else ():
                stats = device.memory_stats() if device.platform == "gpu" else None
                if stats:
                    out.append({"device": f"GPU:{device.id}", "bytes_in_use": int(stats.get("bytes_in_use", 0)),
                                "peak_bytes": int(stats.get("peak_bytes_in_use", 0))})
        else:
            tf: Any = sys.modules.get("tensorflow")
            for i, _ in enumerate(tf.config.list_logical_devices("GPU") if tf is not None else ()):
                info = tf.config.experimental.get_memory_info(f"GPU:{i}")
                out.append({"device": f"GPU:{i}", "bytes_in_use": int(info["current"]),
                            "peak_bytes": int(info["peak"])})
    except Exception:
        pass
    return out


def facts(model, fit_input: tuple | None, backend: str) -> dict:
    """The payload of a ``memory_facts`` event for ``model`` (see :class:`protocol.MemoryFacts`)."""
    weights, dtypes, devices = variables_bytes(getattr(model, "weights", None) or [])
    optimizer, _, optimizer_devices = variables_bytes(optimizer_variables(model))
    x, y = (fit_input or (None, None, None))[:2]
    arrays = nbytes(x) + nbytes(y)
    return {"weights_bytes": weights, "weights_by_dtype": dtypes, "weights_by_device": devices,
            "optimizer_bytes": optimizer, "optimizer_by_device": optimizer_devices,
            "input_arrays_bytes": arrays or None, "gpu_allocators": gpu_allocators(backend)}


class _FactsListener(FitListener):
    def __init__(self, call: FitCall):
        from tensorgauge.hook.diagnose import keras_backend

        self.call = call
        self.backend = keras_backend(call.model)
        self.batches = 0
        self.sent = False

    def _send(self, model, when: str) -> None:
        self.sent = True
        channel().emit(Kind.MEMORY_FACTS, when=when, **facts(model, self.call.fit_input, self.backend))

    def on_train_batch_begin(self, model, epoch: int, batch: int) -> None:
        if not self.sent and self.batches == FACTS_AT_BATCH:
            self._send(model, "steps")
        self.batches += 1

    def on_train_end(self, model) -> None:
        if not self.sent:
            self._send(model, "end")
        else:
            allocators = gpu_allocators(self.backend)
            if allocators:  # the peak of the fit, on a GPU
                channel().emit(Kind.MEMORY_FACTS, when="end", gpu_allocators=allocators)


@on_fit
def _facts_listener(call: FitCall) -> FitListener | None:
    return _FactsListener(call) if call.fit_input is not None else None


# -- the exception that ends the job -------------------------------------------------

def error_payload(error: BaseException) -> dict:
    """{"type", "module", "message"} of an exception: enough to tell an out-of-memory error apart."""
    message = str(error).strip().splitlines()
    return {"type": type(error).__name__, "module": type(error).__module__,
            "message": (message[0] if message else "")[:300]}


def _install_excepthook() -> None:
    def told(previous):
        def excepthook(kind, error, traceback):
            try:
                channel().emit(Kind.JOB_ERROR, **error_payload(error))
            except Exception:
                pass
            previous(kind, error, traceback)

        return excepthook

    wrap_once(sys, "excepthook", told, by="memory_facts")


_install_excepthook()
