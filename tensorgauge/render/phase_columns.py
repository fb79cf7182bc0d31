"""The figures of the phase table as text, shared by ``show`` and the HTML report."""

from __future__ import annotations

from collections.abc import Callable

from tensorgauge.model import Phase
from tensorgauge.units import format_bytes, format_seconds, format_share


def _steps_per_second(p: Phase) -> str:
    return f"{p.steps / p.wall_seconds:.1f}" if p.steps and p.wall_seconds > 0 else ""


def _percent(value: float | None) -> str:
    return "" if value is None else f"{value:.0f}"


def phase_columns(phases: list[Phase], wall_seconds: float) -> list[tuple[str, Callable[[Phase], str]]]:
    """(header, cell) for every column after the phase's name; the GPU columns only where NVML read a GPU."""
    columns: list[tuple[str, Callable[[Phase], str]]] = [
        ("start", lambda p: f"{p.start:.2f}"),
        ("wall", lambda p: format_seconds(p.wall_seconds)),
        ("wall %", lambda p: format_share(p.wall_seconds, wall_seconds)),
        ("CPU-s", lambda p: f"{p.cpu_seconds:.2f}"),
        ("cores", lambda p: f"{p.cores_busy_mean:.2f}"),
        ("peak", lambda p: f"{p.cores_busy_peak:.2f}"),
        ("RSS peak", lambda p: format_bytes(p.rss_peak_bytes)),
        ("steps", lambda p: str(p.steps) if p.steps else ""),
        ("steps/s", _steps_per_second),
        ("step p50", lambda p: format_seconds(p.step_seconds_p50) if p.step_seconds_p50 else ""),
    ]
    if any(p.gpu_util_mean is not None or p.gpu_memory_peak_bytes is not None for p in phases):
        columns += [
            ("GPU %", lambda p: _percent(p.gpu_util_mean)),
            ("GPU pk %", lambda p: _percent(p.gpu_util_peak)),
            ("GPU mem", lambda p: format_bytes(p.gpu_memory_peak_bytes) if p.gpu_memory_peak_bytes is not None
             else ""),
        ]
    if any(p.gpu_job_memory_peak_bytes is not None for p in phases):
        columns.append(("job GPU mem", lambda p: format_bytes(p.gpu_job_memory_peak_bytes)
                        if p.gpu_job_memory_peak_bytes is not None else ""))
    return columns
