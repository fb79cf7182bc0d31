"""Parsing and checking a budget (pure: no I/O)."""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import asdict, dataclass

from tensorgauge.errors import TensorgaugeError

# Below this, not even the interpreter starts (Python alone ~10 MiB RSS; with
# TensorFlow imported ~500 MiB).
INTERPRETER_FLOOR_BYTES = 64 << 20
SOFT_LINE = 0.9  # at this share of the memory budget the job is asked to stop
INTERVAL_SECONDS_MIN, INTERVAL_SECONDS_MAX = 0.01, 60.0  # between samples
CPUS_MIN = 0.01  # the smallest CPU quota a cgroup takes (1 ms in 100 ms)

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
          "g": 1000**3, "gb": 1000**3, "gib": 1024**3, "t": 1000**4, "tb": 1000**4, "tib": 1024**4}


@dataclass
class Budget:
    max_memory_bytes: int | None = None
    max_cpus: float | None = None
    max_gpu_memory_bytes: int | None = None

    @property
    def empty(self) -> bool:
        return self.max_memory_bytes is None and self.max_cpus is None and self.max_gpu_memory_bytes is None

    @property
    def soft_memory_bytes(self) -> int | None:
        return int(self.max_memory_bytes * SOFT_LINE) if self.max_memory_bytes else None

    def to_dict(self) -> dict:
        return asdict(self)


def check_interval(value: object, what: str = "--interval") -> float:
    """Seconds between samples, checked alike for the CLI, the API and the notebook magic: a finite
    number from :data:`INTERVAL_SECONDS_MIN` to :data:`INTERVAL_SECONDS_MAX` (NaN stored in a run broke
    the store's listing; 0 sampled at 30 kHz)."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TensorgaugeError(f"{what}: not a number of seconds: {value!r}") from None
    if not INTERVAL_SECONDS_MIN <= seconds <= INTERVAL_SECONDS_MAX:  # false for NaN too
        raise TensorgaugeError(f"{what}: the interval must be between {INTERVAL_SECONDS_MIN:g} and "
                               f"{INTERVAL_SECONDS_MAX:g} seconds, got {value}")
    return seconds


_NAME_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def check_run_name(value: str | None, what: str = "--name") -> str | None:
    """A run's name, checked alike for the CLI, the API and the notebook magic: one line of text, without
    control characters (a newline split its row in ``runs``)."""
    if value is not None and _NAME_CONTROL.search(value):
        raise TensorgaugeError(f"{what}: a run's name is one line without control characters (tabs, newlines)")
    return value


def run_name_option(text: str) -> str:
    """:func:`check_run_name` as an argparse type."""
    try:
        return check_run_name(text) or text
    except TensorgaugeError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--name: ")) from None


def interval_option(text: str) -> float:
    """:func:`check_interval` as an argparse type: the ``--interval`` of the CLI and of the notebook magic."""
    try:
        return check_interval(text)
    except TensorgaugeError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--interval: ")) from None


def parse_memory(text: str, total_bytes: int, what: str = "--max-memory") -> int:
    """'10%' of ``total_bytes``, or an absolute size: 4GiB, 4G, 512MiB, 2.5GB, 1073741824."""
    raw = text.strip()
    match = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*(%|[a-zA-Z]*)", raw)
    if not match:
        raise TensorgaugeError(f"{what}: '{text}' is not a size (examples: 10%, 4GiB, 512MiB)")
    value, unit = float(match.group(1)), match.group(2).lower()
    if unit == "%":
        if not 0 < value <= 100:
            raise TensorgaugeError(f"{what}: {text} is not a share between 0% and 100%")
        result = int(total_bytes * value / 100)
    elif unit in _UNITS:
        result = int(value * _UNITS[unit])
    else:
        raise TensorgaugeError(f"{what}: unknown unit '{match.group(2)}' (use %, KiB, MiB, GiB, TiB, or KB, MB, GB)")
    if result <= 0:
        raise TensorgaugeError(f"{what}: the budget must be more than zero")
    return result


def parse_cpus(text: str, cores_allowed: float) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TensorgaugeError(f"--max-cpus: '{text}' is not a number of CPUs (examples: 1, 1.5)") from None
    if not math.isfinite(value):
        raise TensorgaugeError(f"--max-cpus: '{text}' is not a finite number of CPUs (examples: 1, 1.5)")
    if value < CPUS_MIN:
        raise TensorgaugeError(f"--max-cpus: the budget must be at least {CPUS_MIN:g} CPUs, got {text}")
    if value > cores_allowed:
        raise TensorgaugeError(f"--max-cpus: {text} is more than the {cores_allowed:g} CPUs this job may use")
    return value


def make_budget(max_memory: str | None, max_cpus: str | None, max_gpu_memory: str | None,
                ram_bytes: int, cores_allowed: float) -> Budget:
    """A checked budget; any problem is one clear TensorgaugeError."""
    budget = Budget()
    if max_memory is not None:
        budget.max_memory_bytes = parse_memory(max_memory, ram_bytes)
        if budget.max_memory_bytes < INTERPRETER_FLOOR_BYTES:
            raise TensorgaugeError(f"--max-memory: {max_memory} is below the {INTERPRETER_FLOOR_BYTES >> 20} MiB "
                                   "the interpreter itself needs (TensorFlow alone takes ~500 MiB)")
        if budget.max_memory_bytes > ram_bytes:
            raise TensorgaugeError(f"--max-memory: {max_memory} is more than this machine's memory")
    if max_cpus is not None:
        budget.max_cpus = parse_cpus(max_cpus, cores_allowed)
    if max_gpu_memory is not None:
        if "%" in max_gpu_memory:
            raise TensorgaugeError("--max-gpu-memory: give a size (e.g. 8GiB); TensorFlow limits GPU memory in bytes")
        budget.max_gpu_memory_bytes = parse_memory(max_gpu_memory, 0, "--max-gpu-memory")
    return budget


def thread_pools(max_cpus: float) -> dict[str, str]:
    """Environment that sizes TensorFlow's and BLAS's thread pools to the budget."""
    n = str(max(1, math.ceil(max_cpus)))
    return {"TF_NUM_INTRAOP_THREADS": n, "TF_NUM_INTEROP_THREADS": n, "OMP_NUM_THREADS": n,
            "OPENBLAS_NUM_THREADS": n, "MKL_NUM_THREADS": n}
