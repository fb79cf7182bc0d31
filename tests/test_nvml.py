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


def test_the_jobs_share_of_gpu_memory_is_its_processes_sum():
    import os

    me, parent = os.getpid(), os.getppid()
    nvml = FakeNvml(gpus=[
        {"name": "A", "util": 10, "used": 9 << 30, "total": 80 << 30, "processes": [(me, 2 << 30), (parent, 3 << 30)]},
        {"name": "B", "util": 0, "used": 1 << 30, "total": 80 << 30, "processes": []},
        {"name": "C", "util": 0, "used": 1 << 30, "total": 80 << 30},  # per-process figures not supported
        {"name": "D", "util": 0, "used": 1 << 30, "total": 80 << 30, "processes": [(me, None)]},  # MIG, some drivers
    ])
    a, b, c, d = open_gpus(nvml).read((me,))
    assert a.job_memory_bytes == 2 << 30  # the other process is not the job's
    assert b.job_memory_bytes == 0 and c.job_memory_bytes is None and d.job_memory_bytes is None
    assert open_gpus(nvml).read()[0].job_memory_bytes is None  # no pids asked: not read


def test_pids_from_another_namespace_are_not_attributed():
    nvml = FakeNvml(gpus=[{"name": "A", "util": 10, "used": 9 << 30, "total": 80 << 30,
                           "processes": [(4_000_000, 2 << 30)]}])  # above any pid_max: not a pid of ours
    (a,) = open_gpus(nvml).read((1,))
    assert a.job_memory_bytes is None


def test_without_an_nvidia_driver_nvml_is_not_imported(monkeypatch):
    import sys

    from tensorgauge.sources import nvml as source

    monkeypatch.setattr(source.sys, "platform", "linux")
    monkeypatch.setattr(source.os.path, "exists", lambda path: False)
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    assert isinstance(open_gpus(), NoGpus) and "pynvml" not in sys.modules
    monkeypatch.setattr(source.os.path, "exists", lambda path: path == "/proc/driver/nvidia")
    assert not source.no_nvidia_driver()  # a driver: NVML is asked (and says what it finds)
