"""The input split of a run's training: how much of a step waits for input, and the compute-only
limit, as measured in the job (see :mod:`tensorgauge.hook.input_window`; on Keras' JAX and
PyTorch backends :mod:`tensorgauge.hook.fit_input`), or why it was not.

Pure: from the run's events and phases. In ``show`` and in the JSON of every run that trains
(``input_split``; null for a run without training).
"""

from __future__ import annotations

import statistics

from tensorgauge.analyse.phases import main_fit
from tensorgauge.hook.protocol import TRAIN_LOOP, WINDOW_START, Kind
from tensorgauge.model import Event, Phase


def _median(values) -> float | None:
    return round(statistics.median(values), 7) if values else None


def _first(events: list[Event], kind: str) -> dict | None:
    return next((e.data for e in events if e.kind == kind), None)


def _per_step(window: dict, key: str) -> float | None:
    """A window total per profiled step."""
    total, steps = window.get(key), len(window.get("step_seconds") or [])
    return round(total / steps, 7) if total is not None and steps else None


def input_split(events: list[Event], phases: list[Phase]) -> dict | None:
    """``{"measured": bool, ...}`` for the run's training, or None when it did not train."""
    fit = main_fit(phases)
    if fit is None:
        return None
    loop = next((e.data for e in reversed(events) if e.kind == Kind.LOOP_INPUT), None)  # the latest sums
    if loop is not None and fit.name == TRAIN_LOOP:
        return _loop_split(loop)
    timed = fit_input(events, fit)
    if timed is not None:
        return _backend_split(timed, fit)
    window, probe = _first(events, Kind.INPUT_PROBE), _first(events, Kind.COMPUTE_PROBE)
    if window is None:
        why = (f"the fit ran {fit.steps} steps, fewer than the {WINDOW_START + 1} the window waits for"
               if (fit.steps or 0) <= WINDOW_START else "diagnosis was off (--no-diagnose)")
        return {"measured": False, "why": why}
    if window.get("skipped") or window.get("error"):
        why = window.get("skipped") or f"the profiler failed: {window['error']}"
        return {"measured": False, "why": why, "allowance_seconds": window.get("allowance_seconds")}
    step, wait = _median(window.get("step_seconds")), _median(window.get("get_next_seconds"))
    split: dict = {"measured": True, "measured_by": "profiler window", "steps": len(window.get("step_seconds") or []),
                   "step_seconds": step, "input_wait_seconds": wait,
                   "input_share": round(min(wait, step) / step, 4) if step and wait is not None else None,
                   "input_work_seconds": window.get("input_work_seconds"),
                   "input_threads_busy_seconds": _per_step(window, "input_thread_seconds"),
                   "compute_only_step_seconds": None, "compute_probe": None,
                   "cost_seconds": round((window.get("start_seconds") or 0.0) + (window.get("stop_seconds") or 0.0), 4),
                   "allowance_seconds": window.get("allowance_seconds")}
    if probe is not None:
        if probe.get("step_seconds"):
            split["compute_only_step_seconds"] = _median(probe["step_seconds"])
            split["compute_probe"] = f"{len(probe['step_seconds'])} steps on {probe.get('source') or 'one batch'}"
            split["cost_seconds"] = round(split["cost_seconds"] + (probe.get("total_seconds") or 0.0), 4)
        else:
            split["compute_probe"] = "not timed: " + str(probe.get("skipped") or probe.get("error"))
    return split


def fit_input(events: list[Event], fit: Phase) -> dict | None:
    """The ``fit_input`` event of ``fit`` (a fit on Keras' JAX or PyTorch backend), if any."""
    return next((e.data for e in events if e.kind == Kind.FIT_INPUT and fit.start - 1e-6 <= e.t <= fit.end + 1e-6
                 and (e.data.get("batches") or 0) >= 2), None)


def backend_input_wait(timed: dict, fit: Phase) -> float:
    """Seconds a step of ``fit`` waited in Keras' data iterator: the batches after the first (which
    starts the iterator; Keras' build of the model reads it), as many per step as the fit took."""
    later = timed["batches"] - 1
    per_batch = max(0.0, timed["seconds"] - (timed.get("first_seconds") or 0.0)) / later
    return per_batch * max(1, round(later / max(1, fit.steps or later)))


def _backend_split(timed: dict, fit: Phase) -> dict:
    step, wait = fit.step_seconds_p50, round(backend_input_wait(timed, fit), 7)
    return {"measured": True, "measured_by": f"next() on Keras' data iterator ({timed.get('backend')} backend)",
            "steps": fit.steps, "step_seconds": step, "input_wait_seconds": wait,
            "input_share": round(min(wait, step) / step, 4) if step else None,
            "input_work_seconds": None, "input_threads_busy_seconds": None, "compute_only_step_seconds": None,
            "compute_probe": None, "cost_seconds": 0.0, "allowance_seconds": None}


def _loop_split(loop: dict) -> dict:
    """A custom training loop's input wait, timed in its ``next()`` calls: per step over all its
    steps (the first, which traces, left out), as ``input_bound`` reads it."""
    counted = max(1, (loop.get("steps") or 1) - 1)
    total, waited = loop.get("step_seconds_total") or 0.0, loop.get("next_seconds_total") or 0.0
    step, wait = round(total / counted, 7), round(waited / counted, 7)
    return {"measured": True, "measured_by": "next() on the loop's iterator", "steps": loop.get("steps"),
            "step_seconds": step, "input_wait_seconds": wait,
            "input_share": round(min(waited, total) / total, 4) if total else None,
            "input_work_seconds": None, "input_threads_busy_seconds": None, "compute_only_step_seconds": None,
            "compute_probe": None, "cost_seconds": 0.0, "allowance_seconds": None}


def describe(split: dict | None) -> str | None:
    """One line for ``show``."""
    if split is None:
        return None
    if not split.get("measured"):
        return f"not measured: {split.get('why')}"
    step, wait = split.get("step_seconds"), split.get("input_wait_seconds")
    if step is None or wait is None:
        return "measured, but the window saw no step"
    text = (f"waits {split['input_share']:.0%} of each step ({wait * 1000:.1f} ms of {step * 1000:.1f} ms, "
            f"{split['steps']} steps, by {split['measured_by']})")
    if split.get("compute_only_step_seconds") is not None:
        text += f"; compute-only {split['compute_only_step_seconds'] * 1000:.1f} ms a step"
    elif split.get("compute_probe"):
        text += f"; compute-only probe {split['compute_probe']}"
    if split.get("input_threads_busy_seconds"):
        text += f"; tf.data threads busy {split['input_threads_busy_seconds'] * 1000:.1f} ms a step"
    if split.get("cost_seconds"):
        text += f"; cost {split['cost_seconds']:.2f} s"
    return text
