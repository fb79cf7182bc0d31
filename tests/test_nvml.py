from tensorgauge.sources.nvml import NoGpus, NvmlGpus, open_gpus
from tensorgauge.testing import FakeNvml


def test_no_driver_means_no_gpus_and_no_error():
    assert isinstance(open_gpus(FakeNvml(driver=False)), NoGpus)


def test_driver_without_gpus_means_no_gpus():
    nvml = FakeNvml(gpus=[])
    assert isinstance(open_gpus(nvml), NoGpus)
    assert nvml.shutdown_called


def test_readings_and_unsupported_fields_are_none():
    nvml = FakeNvml(gpus=[
        {"name": b"H100", "util": 87, "used": 3 << 30, "total": 80 << 30, "power_mw": 250_000},
        {"name": "T4", "util": 0, "used": 1 << 20, "total": 16 << 30, "power_mw": None},
    ])
    gpus = open_gpus(nvml)
    assert isinstance(gpus, NvmlGpus)
    first, second = gpus.read()
    assert (first.name, first.util_percent, first.memory_used_bytes, first.power_watts) == ("H100", 87.0, 3 << 30, 250.0)
    assert second.power_watts is None and second.memory_total_bytes == 16 << 30
    gpus.close()
    assert nvml.shutdown_called
