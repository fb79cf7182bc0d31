"""The hook's one step timer: calls of a step, each timed to the end of its results (a GPU runs a step's
ops after the call returns), with a bound on the seconds they may take and a pause before each. The
input A/B, the compute-only, XLA and eager probes all time their steps with it."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

MIN_STEPS = 4  # a bounded timing takes at least these many steps


def wait_for(results: Any) -> None:
    """Block until a step's results exist: each tensor in them read back."""
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, results)
    elif hasattr(results, "numpy"):
        results.numpy()


def time_calls(call: Callable[[], Any], steps: int, seconds: float | None = None, began: float | None = None,
               min_steps: int = MIN_STEPS, gap: float = 0.0) -> list[float]:
    """Seconds of each of up to ``steps`` calls of ``call``, each to the end of its results, stopping
    before a call that would end past ``seconds`` since ``began`` (default: now; after ``min_steps``);
    ``gap`` seconds of pause before each call (not timed)."""
    began = time.monotonic() if began is None else began
    times: list[float] = []
    while len(times) < steps:
        if gap > 0:
            time.sleep(gap)
        start = time.monotonic()
        wait_for(call())
        times.append(time.monotonic() - start)
        if seconds is not None and len(times) >= min_steps and time.monotonic() - began + times[-1] > seconds:
            break
    return times


QUIET_CORES, QUIET_SLICE_SECONDS = 0.3, 0.01


def wait_until_quiet(max_seconds: float, cpu: Callable[[], float] = time.process_time,
                     clock: Callable[[], float] = time.monotonic) -> float:
    """Sleep in slices of :data:`QUIET_SLICE_SECONDS` until the process's threads use less than
    :data:`QUIET_CORES` over one (a data pipeline has refilled its buffers), or ``max_seconds`` have
    gone; the seconds waited."""
    began = clock()
    while clock() - began < max_seconds:
        wall, used = clock(), cpu()
        time.sleep(QUIET_SLICE_SECONDS)
        if (cpu() - used) / max(clock() - wall, 1e-9) < QUIET_CORES:
            break
    return clock() - began
