"""``tensorgauge run --try-fixes``: time a short window of the job with each fix.

The job runs once as it is and once per applicable fix (see
:mod:`tensorgauge.hook.fixes`), each time only for a window of its first
``fit`` (3 warm-up steps, then ``steps`` timed ones). Which fixes apply is read
from the baseline run: tf.data fixes when fit gets a Dataset, ``no_eager``
when it runs eagerly, ``threads`` when its thread pools are smaller than the
CPUs allowed. Every window is a stored run of its own.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Callable

from tensorgauge.errors import TensorgaugeError
from tensorgauge.hook.fixes import FIX_ENV, WINDOW_ENV
from tensorgauge.runner import run
from tensorgauge.store import Store

CANDIDATES = {
    "parallel_map": "map(num_parallel_calls=tf.data.AUTOTUNE)",
    "prefetch": "dataset.prefetch(tf.data.AUTOTUNE) before fit",
    "parallel_map,prefetch": "both of the above",
    "no_eager": "model.run_eagerly = False, tf.config.run_functions_eagerly(False)",
    "threads": "TensorFlow's thread pools sized to the CPUs allowed",
}


LIMIT_REACHED = 1.15  # a step this close to the compute-only step (ratio) has reached it


@dataclass
class Trial:
    fixes: str  # "baseline" or the fixes, comma-separated
    what: str
    run_id: str
    step_seconds_median: float | None
    speedup: float | None = None  # baseline step / this step
    reaches_limit: bool | None = None  # step within LIMIT_REACHED of the compute-only limit

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Trials:
    trials: list[Trial]  # the baseline first
    compute_only_step_seconds: float | None  # the limit: the train step on one cached batch

    def to_dict(self) -> dict:
        return {"schema": "tensorgauge.try_fixes/1", "compute_only_step_seconds": self.compute_only_step_seconds,
                "trials": [t.to_dict() for t in self.trials]}


def _window(store: Store, run_id: str) -> tuple[float | None, dict, float | None]:
    """(median window step, fit's config, median compute-only step) of one window run."""
    events = store.events(run_id)
    windows = [e.data for e in events if e.kind == "try_window" and e.data.get("step_seconds")]
    config = next((e.data for e in events if e.kind == "fit_config"), {})
    probe = next((e.data["step_seconds"] for e in events if e.kind == "compute_probe" and e.data.get("step_seconds")),
                 None)
    median = statistics.median(windows[0]["step_seconds"]) if windows else None
    return median, config, statistics.median(probe) if probe else None


def applicable(config: dict, job: dict, cores_allowed: float) -> list[str]:
    fixes = []
    if config.get("dataset"):
        fixes += ["parallel_map", "prefetch", "parallel_map,prefetch"]
    if config.get("run_eagerly") or config.get("functions_run_eagerly"):
        fixes.append("no_eager")
    limits = [n for n in (config.get("intra_op_threads"),
                          int((job.get("thread_env") or {}).get("TF_NUM_INTRAOP_THREADS", 0))) if n]
    if limits and min(limits) < cores_allowed:
        fixes.append("threads")
    return fixes


def try_fixes(command: list[str], store: Store, steps: int = 20,
              progress: Callable[[str], None] = lambda line: None) -> Trials:
    window = {WINDOW_ENV: str(steps)}
    progress("timing the job as it is")
    base = run(command, store, name="try-fixes: baseline", extra_env=window)
    base_step, config, limit = _window(store, base.record.run_id)
    if base_step is None:
        raise TensorgaugeError("--try-fixes times the job's first Keras fit, and this job ran none "
                               f"(or stopped before {steps + 3} steps); see 'tensorgauge show {base.record.run_id}'")
    record = store.run(base.record.run_id)
    cores = float(record.env.get("host", {}).get("cores_allowed") or 1)
    trials = [Trial("baseline", "the job as it is", base.record.run_id, base_step, 1.0)]
    for fix in applicable(config, record.env.get("job") or {}, cores):
        progress(f"timing the job with {fix}")
        env = {**window, FIX_ENV: fix}
        if fix == "threads":
            n = str(max(1, math.floor(cores)))
            env.update({"TF_NUM_INTRAOP_THREADS": n, "TF_NUM_INTEROP_THREADS": n})
        result = run(command, store, name=f"try-fixes: {fix}", extra_env=env)
        step, _, _ = _window(store, result.record.run_id)
        trials.append(Trial(fix, CANDIDATES[fix], result.record.run_id, step, base_step / step if step else None,
                            step <= LIMIT_REACHED * limit if step and limit else None))
    trials[0].reaches_limit = base_step <= LIMIT_REACHED * limit if limit else None
    return Trials(trials, limit)
