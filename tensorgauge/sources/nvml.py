"""NVIDIA GPUs through NVML (the ``[gpu]`` extra, nvidia-ml-py).

No driver, no library, no GPU: :func:`open_gpus` returns :class:`NoGpus`.
A reading NVML refuses (per-process memory on some drivers, power on some
boards) is ``None``.
"""

from __future__ import annotations

from tensorgauge.model import GpuReading


class NoGpus:
    names: list[str] = []

    def read(self) -> list[GpuReading]:
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

    def read(self) -> list[GpuReading]:
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
            ))
        return out

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass


def open_gpus(nvml=None):
    """NVML-backed GPUs, or :class:`NoGpus` where NVML is missing or finds none."""
    if nvml is None:
        try:
            import pynvml as nvml  # provided by nvidia-ml-py
        except ImportError:
            return NoGpus()
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
