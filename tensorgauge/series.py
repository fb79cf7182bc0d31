"""Samples as columns: one numpy array per :class:`~tensorgauge.model.Sample` field.

A day at 10 Hz is 864,000 samples: as objects that is ~2 GB, as columns of
float64 ~100 MB, and the analysis reads them with vectorised operations. A
value not reported (``None``) is NaN; integer fields are exact as float64 up to
2**53 (8 PiB). Per-CPU busy percentages are an (n, cpus) array, GPU readings one
(n, gpus) array per :class:`~tensorgauge.model.GpuReading` field.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from tensorgauge.model import GpuReading, Sample

SCALARS: tuple[str, ...] = tuple(f.name for f in fields(Sample) if f.name not in ("cpu_percent", "gpus"))
INTEGERS = frozenset(f.name for f in fields(Sample) if f.metadata["kind"].rstrip("?") == "int")
REQUIRED = frozenset(f.name for f in fields(Sample) if not f.metadata["kind"].endswith("?")) & set(SCALARS)
GPU_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(GpuReading) if f.name not in ("index", "name"))
GPU_INTEGERS = frozenset(f.name for f in fields(GpuReading) if f.metadata["kind"].rstrip("?") == "int")
# Besides the readings: whether the sample had the GPU at all, and its name (an index into ``gpu_names``).
GPU_COLUMNS: tuple[str, ...] = GPU_FIELDS + ("present", "name")


def _nan(value: Any) -> float:
    return np.nan if value is None else value


@dataclass
class SampleSeries:
    """``columns``: each scalar field, float64, NaN where not reported; ``cpu_percent``: (n, cpus),
    ``cpu_count``: how many per-CPU values each sample had (NaN: none); ``gpu``: each of
    :data:`GPU_COLUMNS`, (n, len(gpu_index)); ``gpu_names``: the names the ``name`` column indexes."""

    columns: dict[str, np.ndarray]
    cpu_percent: np.ndarray
    cpu_count: np.ndarray
    gpu_index: list[int] = field(default_factory=list)
    gpu: dict[str, np.ndarray] = field(default_factory=dict)
    gpu_names: list[str] = field(default_factory=list)

    # -- building ----------------------------------------------------------------

    @classmethod
    def empty(cls) -> SampleSeries:
        return cls.from_samples([])

    @classmethod
    def from_samples(cls, samples: list[Sample]) -> SampleSeries:
        n = len(samples)
        columns = {name: np.array([_nan(getattr(s, name)) for s in samples], dtype=np.float64).reshape(n)
                   for name in SCALARS}
        width = max((len(s.cpu_percent) for s in samples if s.cpu_percent), default=0)
        cpu = np.full((n, width), np.nan)
        count = np.array([np.nan if s.cpu_percent is None else len(s.cpu_percent) for s in samples]).reshape(n)
        for i, s in enumerate(samples):
            if s.cpu_percent:
                cpu[i, :len(s.cpu_percent)] = s.cpu_percent
        index = sorted({g.index for s in samples for g in s.gpus})
        position = {gpu: j for j, gpu in enumerate(index)}
        gpu = {name: np.full((n, len(index)), np.nan) for name in GPU_COLUMNS}
        names: dict[str, int] = {}
        for i, s in enumerate(samples):
            for g in s.gpus:
                j = position[g.index]
                gpu["present"][i, j] = 1.0
                if g.name is not None:
                    gpu["name"][i, j] = names.setdefault(g.name, len(names))
                for name in GPU_FIELDS:
                    value = getattr(g, name)
                    if value is not None:
                        gpu[name][i, j] = value
        return cls(columns, cpu, count, index, gpu, list(names))

    @classmethod
    def concat(cls, parts: list[SampleSeries], consume: bool = False) -> SampleSeries:
        """The parts one after the other (GPUs and CPUs aligned by index; missing ones NaN). With
        ``consume``, each part's columns are let go as they are joined (the parts are emptied): the
        whole is never held twice."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        take = (lambda p, name: p.columns.pop(name)) if consume else (lambda p, name: p.columns[name])
        columns = {}
        for name in SCALARS:
            columns[name] = np.concatenate([take(p, name) for p in parts])
        width = max(p.cpu_percent.shape[1] for p in parts)
        cpu = np.concatenate([_widen(p.cpu_percent, width) for p in parts])
        index = sorted({i for p in parts for i in p.gpu_index})
        names: dict[str, int] = {}
        gpu = {name: np.concatenate([_align(p.gpu[name], p.gpu_index, index) for p in parts]) for name in GPU_FIELDS
               + ("present",)}
        codes = []
        for p in parts:  # each part numbers its names on its own: renumber into one table
            table = np.array([names.setdefault(n, len(names)) for n in p.gpu_names] + [np.nan])
            local = _align(p.gpu["name"], p.gpu_index, index)
            codes.append(np.where(np.isnan(local), np.nan, table[np.nan_to_num(local, nan=len(p.gpu_names))
                                                                 .astype(np.int64)]))
        gpu["name"] = np.concatenate(codes)
        return cls(columns, cpu, np.concatenate([p.cpu_count for p in parts]), index, gpu, list(names))

    # -- reading -----------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.columns["t"])

    @property
    def t(self) -> np.ndarray:
        return self.columns["t"]

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def reported(self, name: str) -> np.ndarray:
        """The values of ``name`` that were reported (NaN dropped)."""
        values = self.columns[name]
        return values[~np.isnan(values)]

    def take(self, selection: slice | np.ndarray) -> SampleSeries:
        """The samples at ``selection`` (a slice or a boolean/integer index)."""
        return SampleSeries({k: v[selection] for k, v in self.columns.items()}, self.cpu_percent[selection],
                            self.cpu_count[selection], list(self.gpu_index),
                            {k: v[selection] for k, v in self.gpu.items()}, list(self.gpu_names))

    def bounds(self, start: float, end: float) -> tuple[int, int]:
        """Index range of the samples with ``start < t <= end`` (a sample's figures cover the interval ending at t)."""
        return int(np.searchsorted(self.t, start, side="right")), int(np.searchsorted(self.t, end, side="right"))

    def between(self, start: float, end: float) -> SampleSeries:
        """The samples with ``start <= t <= end``."""
        return self.take(slice(int(np.searchsorted(self.t, start, side="left")),
                               int(np.searchsorted(self.t, end, side="right"))))

    def to_samples(self) -> list[Sample]:
        """As :class:`Sample` objects (for a window, not a day)."""
        n = len(self)
        values = {name: _python(self.columns[name], name in INTEGERS) for name in SCALARS}
        rows = self.cpu_percent.tolist()
        cpu = [None if np.isnan(c) else rows[i][:int(c)] for i, c in enumerate(self.cpu_count.tolist())]
        gpu = {name: [_python(self.gpu[name][:, j], name in GPU_INTEGERS or name in ("present", "name"))
                      for j in range(len(self.gpu_index))] for name in GPU_COLUMNS}
        out = []
        for i in range(n):
            readings = []
            for j, index in enumerate(self.gpu_index):
                if gpu["present"][j][i] is None:
                    continue
                code = gpu["name"][j][i]
                readings.append(GpuReading(index=index, name=None if code is None else self.gpu_names[code],
                                           **{name: gpu[name][j][i] for name in GPU_FIELDS}))
            sample = Sample(**{name: values[name][i] for name in SCALARS})
            sample.cpu_percent, sample.gpus = cpu[i], readings
            out.append(sample)
        return out


def _python(values: np.ndarray, integer: bool) -> list:
    """The column as Python values: None for NaN, int for integer fields."""
    present = ~np.isnan(values)
    items = values.astype(np.int64).tolist() if integer and present.all() else values.tolist()
    if present.all():
        return items
    return [(int(v) if integer else v) if ok else None for v, ok in zip(items, present.tolist())]


def _widen(values: np.ndarray, width: int) -> np.ndarray:
    if values.shape[1] == width:
        return values
    out = np.full((values.shape[0], width), np.nan)
    out[:, :values.shape[1]] = values
    return out


def _align(values: np.ndarray, index: list[int], wanted: list[int]) -> np.ndarray:
    if index == wanted:
        return values
    out = np.full((values.shape[0], len(wanted)), np.nan)
    for j, gpu in enumerate(index):
        out[:, wanted.index(gpu)] = values[:, j]
    return out
