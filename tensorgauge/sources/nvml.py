"""NVIDIA GPUs through NVML (the ``[gpu]`` extra, nvidia-ml-py).

No driver, no library, no GPU: :func:`open_gpus` returns :class:`NoGpus`.
A reading NVML refuses (per-process memory on some drivers, power on some
boards) is ``None``. The job's own share of a GPU's memory is the sum of
NVML's per-process figures for the job's processes; ``None`` where NVML gives
none, or names only processes this PID namespace cannot see (a container).
"""

from __future__ import annotations

import os
import sys

from tensorgauge.model import GpuReading


class NoGpus:
    names: list[str] = []

    def read(self, pids: tuple[int, ...] = ()) -> list[GpuReading]:
        return []

    def close(self) -> None:
        pass


class NvmlGpus:
    def __init__(self, nvml):
        self._nvml = nvml
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        self._names = [self._call(nvml.nvmlDeviceGetName, h) for h in self._handles]

    @property
    def names(self) -> list[str]:
        """The GPUs' model names, in NVML's index order."""
        return [name or "unknown" for name in self._names]

    def _call(self, fn, *args):
        try:
            value = fn(*args)
        except Exception:  # NVMLError_NotSupported and friends
            return None
        return value.decode() if isinstance(value, bytes) else value

    def _job_memory(self, handle, pids: tuple[int, ...]) -> int | None:
        """Bytes the processes ``pids`` hold on the GPU ``handle``."""
        listed = []
        for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            fn = getattr(self._nvml, name, None)  # absent from old nvidia-ml-py releases
            processes = self._call(fn, handle) if fn else None
            if processes is None:
                return None
            listed.extend(processes)
        if listed and not any(_pid_exists(p.pid) for p in listed):
            return None  # another PID namespace: NVML's pids are not ours
        used = [p.usedGpuMemory for p in listed if p.pid in pids]
        if any(u is None for u in used):
            return None  # NVML does not know the per-process figure (some drivers, MIG)
        return int(sum(used))

    def read(self, pids: tuple[int, ...] = ()) -> list[GpuReading]:
        """Every GPU now; with ``pids``, also the memory those processes hold on each."""
        nvml = self._nvml
        out = []
        for index, handle in enumerate(self._handles):
            util = self._call(nvml.nvmlDeviceGetUtilizationRates, handle)
            mem = self._call(nvml.nvmlDeviceGetMemoryInfo, handle)
            power_mw = self._call(nvml.nvmlDeviceGetPowerUsage, handle)
            out.append(GpuReading(
                index=index,
                name=self._names[index],
                util_percent=float(util.gpu) if util is not None else None,
                memory_used_bytes=int(mem.used) if mem is not None else None,
                memory_total_bytes=int(mem.total) if mem is not None else None,
                power_watts=power_mw / 1000.0 if power_mw is not None else None,
                job_memory_bytes=self._job_memory(handle, pids) if pids else None,
            ))
        return out

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def no_nvidia_driver() -> bool:
    """Linux without NVIDIA's kernel driver (``/proc/driver/nvidia``) or WSL's GPU device (``/dev/dxg``):
    NVML can find nothing, so it is not imported (47 ms of every run's start on a 2-core VM)."""
    return sys.platform.startswith("linux") and not os.path.exists("/proc/driver/nvidia") \
        and not os.path.exists("/dev/dxg")


def open_gpus(nvml=None):
    """NVML-backed GPUs, or :class:`NoGpus` where NVML is missing or finds none."""
    if nvml is None:
        if no_nvidia_driver():
            return NoGpus()
        try:
            import pynvml  # provided by nvidia-ml-py
        except ImportError:
            return NoGpus()
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return NoGpus()
    try:
        gpus = NvmlGpus(nvml)
    except Exception:
        return NoGpus()
    if not gpus.read():
        gpus.close()
        return NoGpus()
    return gpus
