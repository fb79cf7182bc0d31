"""The hook's memory facts on fakes: variable bytes by dtype and device, the GPU allocators of each
backend, and the exception that ends the job."""

import sys
import types

from tensorgauge.hook import memory_facts
from tensorgauge.hook.protocol import Kind


class Var:
    def __init__(self, shape, dtype, device="/job:localhost/replica:0/task:0/device:CPU:0"):
        self.shape, self.dtype, self.device = shape, dtype, device


def test_variables_are_counted_once_by_dtype_and_device():
    shared = Var((10, 4), "float32")
    total, dtypes, devices = memory_facts.variables_bytes(
        [shared, shared, Var((3,), "float16", "GPU:0"), Var((), "int64")])
    assert total == 160 + 6 + 8
    assert dtypes == {"float32": 160, "float16": 6, "int64": 8}
    assert devices == {"CPU:0": 168, "GPU:0": 6}


def test_optimizer_variables_as_a_property_or_a_method():
    slot = Var((2,), "float32")
    keras3 = types.SimpleNamespace(optimizer=types.SimpleNamespace(variables=[slot]))
    legacy = types.SimpleNamespace(optimizer=types.SimpleNamespace(variables=lambda: [slot, slot]))
    assert memory_facts.optimizer_variables(keras3) == [slot]
    assert memory_facts.optimizer_variables(legacy) == [slot, slot]
    assert memory_facts.optimizer_variables(types.SimpleNamespace(optimizer=None)) == []


def test_gpu_allocators_of_each_backend(monkeypatch):
    cuda = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 2,
                                 memory_allocated=lambda i: 100 + i, max_memory_allocated=lambda i: 200 + i)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    assert memory_facts.gpu_allocators("torch") == [{"device": "GPU:0", "bytes_in_use": 100, "peak_bytes": 200},
                                                    {"device": "GPU:1", "bytes_in_use": 101, "peak_bytes": 201}]
    gpu = types.SimpleNamespace(platform="gpu", id=0,
                                memory_stats=lambda: {"bytes_in_use": 5, "peak_bytes_in_use": 9})
    cpu = types.SimpleNamespace(platform="cpu", id=0, memory_stats=lambda: None)
    monkeypatch.setitem(sys.modules, "jax", types.SimpleNamespace(devices=lambda: [cpu, gpu]))
    assert memory_facts.gpu_allocators("jax") == [{"device": "GPU:0", "bytes_in_use": 5, "peak_bytes": 9}]
    config = types.SimpleNamespace(list_logical_devices=lambda kind: ["GPU:0"],
                                   experimental=types.SimpleNamespace(get_memory_info=lambda d: {"current": 7,
                                                                                                  "peak": 8}))
    monkeypatch.setitem(sys.modules, "tensorflow", types.SimpleNamespace(config=config))
    assert memory_facts.gpu_allocators("tensorflow") == [{"device": "GPU:0", "bytes_in_use": 7, "peak_bytes": 8}]
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=types.SimpleNamespace(
        is_available=lambda: False)))
    assert memory_facts.gpu_allocators("torch") == []  # no GPU: nothing, and no error


def test_the_exception_that_ends_the_job_is_sent_then_shown_as_before(events, monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "excepthook", lambda *a: seen.append(a[0]))
    memory_facts._install_excepthook()
    memory_facts._install_excepthook()  # once only
    error = MemoryError("Unable to allocate 8.00 GiB for an array\nsecond line")
    sys.excepthook(MemoryError, error, None)
    (sent,) = [e for e in events() if e["kind"] == Kind.JOB_ERROR]
    assert sent["type"] == "MemoryError" and sent["message"] == "Unable to allocate 8.00 GiB for an array"
    assert seen == [MemoryError]  # the job's own hook still runs, once
